/* sockferry relay -t / run -t: the configuration test mode (as sshd -t, nginx -t). */
#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sodium.h>

#include "conf/log.h"
#include "relay/link/token.h"
#include "relay/listen/listener.h"
#include "relay/listen/sockpath.h"
#include "shim/cli.h"

/* Loads the forward's token file as the relay would. Returns 0 or SF_EX_CONFIG, logged. */
static int token_test(const struct sf_conf *c, const struct sf_forward *f, const char **file) {
        *file = NULL;
        if (f->auth != SF_AUTH_TOKEN)
                return 0;
        *file = sf_conf_token_file(c, f);
        if (!*file) {
                sf_log(SF_LOG_ERROR, f->name, 0,
                       "auth = token needs a token-file (create one with sockferry keygen -o FILE)");
                return SF_EX_CONFIG;
        }
        struct sf_hs_key key;
        int r = sf_token_load(*file, c, &key);
        sodium_memzero(&key, sizeof key);
        return r < 0 ? SF_EX_CONFIG : 0;
}

/* What is at a unix listen path now, when that matters for binding there. */
static void listen_test(const struct sf_forward *f) {
        if (f->listen.kind != SF_EP_UNIX)
                return;
        switch (sf_sockpath_probe(f->listen.path)) {
        case SF_PATH_MISSING:
        case SF_PATH_STALE_SOCKET:
                return;
        case SF_PATH_LIVE_SOCKET:
                sf_log(SF_LOG_WARN, f->name, 0,
                       "listen %s: another process accepts on it now; binding there fails while it runs "
                       "(the relay this configuration is for?)",
                       f->listen.text);
                return;
        default:
                sf_log(SF_LOG_WARN, f->name, 0,
                       "listen %s: something other than a socket is at that path; binding will fail "
                       "(sockferry probe %s says what)",
                       f->listen.text, f->listen.path);
                return;
        }
}

/* Appends one connect candidate, with the address a host name resolves to here. */
static void candidate_describe(const struct sf_forward *f, const struct sf_endpoint *ep, char *out, size_t cap) {
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s", len ? " | " : "", ep->text);
        if (ep->kind != SF_EP_TCP)
                return;
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV }, *res;
        char port[8], addr[NI_MAXHOST];
        snprintf(port, sizeof port, "%u", (unsigned)ep->port);
        int r = getaddrinfo(ep->host, port, &hints, &res);
        if (r != 0) {
                /* Not an error: the relay resolves at each connection, and a name such as
                 * host.docker.internal may exist only where the relay will run. */
                sf_log(SF_LOG_WARN, f->name, 0, "connect %s: %s does not resolve here: %s", ep->text, ep->host,
                       gai_strerror(r));
                return;
        }
        if (getnameinfo(res->ai_addr, res->ai_addrlen, addr, sizeof addr, NULL, 0, NI_NUMERICHOST) == 0 &&
            strcmp(addr, ep->host) != 0) {
                len = strlen(out);
                snprintf(out + len, cap - len, " (%s)", addr);
        }
        freeaddrinfo(res);
}

/* Whether an earlier forward used the same token file: it was tested (and any problem
 * said) once. */
static bool token_seen(const struct sf_conf *c, size_t i, const char *file) {
        for (size_t j = 0; j < i; j++) {
                const char *other = c->forwards[j].auth == SF_AUTH_TOKEN ? sf_conf_token_file(c, &c->forwards[j]) : NULL;
                if (other && strcmp(other, file) == 0)
                        return true;
        }
        return false;
}

/* The control socket, as sf_control_new would bind it (relay/control/control.h): its place
 * checked, and one line that says where it is. 0 or -EPERM (logged). */
static int control_test(const struct sf_conf *c) {
        struct sf_forward *f = calloc(1, sizeof *f);
        if (!f) {
                sf_log_error("control %s: out of memory", c->control.text);
                return -ENOMEM;
        }
        snprintf(f->name, sizeof f->name, "control");
        f->listen = c->control;
        int r = f->listen.kind == SF_EP_UNIX ? sf_listener_place_check(f, c) : 0;
        if (f->listen.kind == SF_EP_UNIX)
                listen_test(f);
        free(f);
        printf("control: listen %s (sockferry stats)\n", c->control.text);
        return r;
}

int sf_cli_conf_test(const struct sf_conf *c) {
        int status = 0;
        for (size_t i = 0; i < c->n_forwards; i++) {
                const struct sf_forward *f = &c->forwards[i];
                const char *token_file = f->auth == SF_AUTH_TOKEN ? sf_conf_token_file(c, f) : NULL;
                if (!(token_file && token_seen(c, i, token_file)) && token_test(c, f, &token_file))
                        status = SF_EX_CONFIG;
                if (sf_listener_place_check(f, c) == -EPERM)
                        status = SF_EX_CONFIG;
                if ((f->listen.kind == SF_EP_SYSTEMD || f->listen.kind == SF_EP_FD) && sf_listener_passed_test(f) < 0)
                        status = SF_EX_CONFIG;
                listen_test(f);
                char connect[2048] = "";
                for (size_t j = 0; j < f->n_connect; j++)
                        candidate_describe(f, &f->connect[j], connect, sizeof connect);
                printf("%s: listen %s -> connect %s, auth = %s%s%s%s\n", f->name, f->listen.text, connect,
                       f->auth == SF_AUTH_TOKEN ? "token" : "none", token_file ? " (token-file " : "",
                       token_file ? token_file : "", token_file ? ")" : "");
        }
        if (c->control_set && control_test(c) < 0)
                status = SF_EX_CONFIG;
        if (status == 0)
                printf("configuration OK: %zu forward%s, nothing bound\n", c->n_forwards, c->n_forwards == 1 ? "" : "s");
        fflush(stdout);
        return status;
}
