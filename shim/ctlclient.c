#include "shim/ctlclient.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/log.h"
#include "conf/platform.h"
#include "shim/confsearch.h"
#include "shim/netio.h"

/* A client of a relay's control socket (relay/control/control.h): one request line, the answer
 * printed as it came (printable text only), an answer that starts with "error:" on stderr. */

/* Long enough for a reload, which binds and reads token files before it answers. */
#define CONTROL_TIMEOUT_MS 5000
/* A relay's answer is a few kilobytes per forward: past this, the other end is not one. */
#define CONTROL_ANSWER_MAX (1024 * 1024)

/* The control endpoint from --control: a bare absolute path is taken as unix:PATH. */
static int control_parse(const char *cmd, const char *s, struct sf_endpoint *ep) {
        char text[SF_ENDPOINT_TEXT_MAX + 8], err[256];
        snprintf(text, sizeof text, "%s%s", s[0] == '/' ? "unix:" : "", s);
        if (sf_endpoint_parse(text, ep, err, sizeof err) < 0 || sf_endpoint_supported(ep, err, sizeof err) < 0) {
                sf_cli_usage_error(cmd, "--control %s: %s", s, err);
                return -EINVAL;
        }
        if (ep->kind != SF_EP_UNIX && ep->kind != SF_EP_ABSTRACT && ep->kind != SF_EP_NPIPE) {
                sf_cli_usage_error(cmd, "--control %s: not %s", s, sf_conf_local_endpoints);
                return -EINVAL;
        }
        return 0;
}

/* Length of the UTF-8 character at s (at most n bytes) that a terminal prints as text, or 0:
 * a C0 or C1 control (ESC, CSI...), DEL or an invalid or overlong sequence. */
static size_t printable_char(const unsigned char *s, size_t n) {
        if (s[0] == '\n' || s[0] == '\t' || (s[0] >= 0x20 && s[0] < 0x7f))
                return 1;
        size_t len = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
                   : s[0] >= 0xf0 && s[0] <= 0xf4                                 ? 4
                                                                                  : 0;
        if (len == 0 || len > n)
                return 0;
        for (size_t i = 1; i < len; i++)
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
        if ((s[0] == 0xc2 && s[1] < 0xa0) || (s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) ||
            (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))
                return 0; /* C1 controls, overlong forms, surrogates, beyond U+10FFFF */
        return len;
}

/* Text, JSON and Prometheus answers are printable text: any other byte (a terminal escape
 * sequence from something that is not a relay) becomes '?' before it reaches the terminal.
 * Returns how many bytes were replaced. */
static size_t make_printable(char *s, size_t len) {
        size_t replaced = 0;
        for (size_t i = 0; i < len;) {
                size_t n = printable_char((const unsigned char *)s + i, len - i);
                if (n == 0) {
                        s[i++] = '?';
                        replaced++;
                } else {
                        i += n;
                }
        }
        return replaced;
}

/* Sends the request and copies the answer to stdout; 0 or 1 (the cause printed). */
static int ask(const char *cmd, const struct sf_endpoint *ep, const char *req) {
        char err[300];
        int fd = sf_netio_dial(ep, CONTROL_TIMEOUT_MS, err, sizeof err);
        if (fd < 0) {
                /* A pipe's own hints are a service's (netio): a control pipe is the relay's. */
                bool pipe = ep->kind == SF_EP_NPIPE;
                fprintf(stderr, "sockferry %s: control %s: %s%s\n", cmd, ep->text, pipe ? strerror(-fd) : err,
                        fd == -ENOENT || fd == -ECONNREFUSED
                                ? " (is the relay running, with control = this socket in its configuration?)"
                        : fd == -EACCES && pipe ? " (the control pipe admits the relay's account only: run this as it)"
                        : fd == -EACCES ? " (the control socket is mode 0600: run as root or as the relay's user)"
                                        : "");
                return 1;
        }
        int64_t deadline = sf_netio_now_ms() + CONTROL_TIMEOUT_MS;
        int r = sf_netio_write_all(fd, req, strlen(req), deadline);
        char *answer = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&answer, &len);
        if (!out)
                r = -ENOMEM;
        while (r == 0) {
                char buf[4096];
                ssize_t got = sf_netio_read(fd, buf, sizeof buf, deadline);
                if (got <= 0) {
                        r = (int)got;
                        break;
                }
                if (len + (size_t)got > CONTROL_ANSWER_MAX) {
                        r = -EMSGSIZE;
                        break;
                }
                fwrite(buf, 1, (size_t)got, out);
                fflush(out); /* updates len */
        }
        sf_netio_close(fd);
        if (out)
                fclose(out);
        int status = 0;
        size_t replaced = r == 0 ? make_printable(answer, len) : 0;
        if (r == -EMSGSIZE) {
                fprintf(stderr,
                        "sockferry %s: control %s: the answer goes on past %d bytes (is it a sockferry control "
                        "socket?)\n",
                        cmd, ep->text, CONTROL_ANSWER_MAX);
                status = 1;
        } else if (r < 0) {
                fprintf(stderr, "sockferry %s: control %s: %s\n", cmd, ep->text,
                        r == -ETIMEDOUT ? "no answer within 5s (is it a sockferry control socket?)" : strerror(-r));
                status = 1;
        } else if (len == 0 || strncmp(answer, "error:", 6) == 0) {
                fprintf(stderr, "sockferry %s: control %s: %s", cmd, ep->text,
                        len ? answer : "closed without an answer (is it a sockferry control socket?)\n");
                status = 1;
        } else {
                fwrite(answer, 1, len, stdout);
        }
        if (replaced)
                fprintf(stderr,
                        "sockferry %s: control %s: %zu byte%s that %s not printable text replaced with '?' (is it "
                        "a sockferry control socket?)\n",
                        cmd, ep->text, replaced, replaced == 1 ? "" : "s", replaced == 1 ? "was" : "were");
        free(answer);
        return status;
}

int sf_ctlclient_ask(const char *cmd, struct sf_cli_opts *o, const char *control, const char *request) {
        char found[PATH_MAX], places[2 * PATH_MAX];
        if (o->file && control)
                return sf_cli_usage_error(cmd, "give either -c FILE or --control PATH");
        if (!o->file && !control && !(o->file = sf_confsearch_find(found, sizeof found)))
                return sf_cli_usage_error(cmd, "give -c FILE or --control PATH (no configuration file at %s)",
                                          sf_confsearch_places(places, sizeof places));

        struct sf_endpoint ep;
        if (control)
                return control_parse(cmd, control, &ep) < 0 ? SF_EX_USAGE : ask(cmd, &ep, request);

        struct sf_conf conf;
        sf_conf_init(&conf);
        int status = sf_cli_conf_load(&conf, o, false);
        if (status == 0 && !conf.control_set) {
                sf_log_error("%s: no control socket: add control = unix:/run/sockferry/control.sock to the "
                             "[sockferry] section (and reload or restart the relay), or give --control PATH",
                             o->file);
                status = SF_EX_CONFIG;
        }
        if (status == 0)
                status = ask(cmd, &conf.control, request);
        sf_conf_free(&conf);
        return status;
}
