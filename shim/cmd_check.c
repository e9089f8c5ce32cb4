/* sockferry check: an end-to-end health probe of every forward, for Docker HEALTHCHECK. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sodium.h>
#include <uv.h>

#include "conf/log.h"
#include "conf/value.h"
#include "relay/engine/bufpool.h"
#include "relay/link/client.h"
#include "relay/link/frames.h"
#include "relay/link/messages.h"
#include "relay/link/mux.h"
#include "relay/link/token.h"
#include "relay/listen/sockpath.h"
#include "shim/cli.h"
#include "shim/confsearch.h"
#include "shim/netio.h"

#define DEFAULT_TIMEOUT_MS 5000
/* A banner such as SSH's is recognisable by its first 40 bytes (as the relay quotes it). */
#define BANNER_MAX 40

static void help(void) {
        fputs("Usage: sockferry check [-c FILE] [-F SPEC]... [--pid PID] [--timeout 5s] [--link-only]\n"
              "\n"
              "Probe every forward end to end: its own listening socket must be live (a relay serves\n"
              "it), and its candidates are tried in order as a connection tries them, until one answers;\n"
              "on a link with auth = token the host relay confirms that its own upstream answers: over\n"
              "the shared link (link = shared, the default) a link of the check's own, its round trip and\n"
              "a probe stream for the forward's service; per connection, a handshake with the probe flag.\n"
              "Prints one line per candidate tried, OK or the failure in plain words; a forward is\n"
              "healthy when a client would be served.\n"
              "\n"
              "  -c, --config FILE   INI configuration\n"
              "  -F, --forward SPEC  NAME:LISTEN=CONNECT[|CONNECT...][,key=value]... (repeatable)\n"
              "      --pid PID       check the forwards of the sockferry relay or run with this process\n"
              "                      id, as its -c, -F and -u give them (Linux: /proc/PID/cmdline)\n"
              "      --timeout DUR   time allowed per candidate, connect and handshake (default 5s; the\n"
              "                      forward's connect-timeout and handshake-timeout bound each step too)\n"
              "      --link-only     check the link alone: a forward whose unix listen socket is not\n"
              "                      live is a warning, not a failure (check run where no relay is)\n"
              "  -t, --test          check the configuration only, print what would be probed\n"
              "  -v, --verbose       more log output\n"
              "  -q, --quiet         less log output\n"
              "      --log-format F  text or json\n"
              "  -V, --version       show the version\n"
              "  -h, --help          show this help\n"
              "\n"
              "Exit status: 0 every forward is healthy, 1 otherwise, 64 usage, 78 configuration.\n"
              "\n"
              "Example (Dockerfile; the entrypoint's own -c or -F, whichever it was given):\n"
              "  HEALTHCHECK --interval=30s --timeout=10s CMD [\"sockferry\", \"check\", \"--pid\", \"1\"]\n",
              stdout);
}

struct probe {
        const struct sf_endpoint *ep;
        const struct sf_hs_key *key; /* NULL: no handshake */
        const char *token_file;
        const struct sf_forward *f;
        uint64_t timeout_ms; /* --timeout: the whole candidate */
        int64_t deadline;
        char *msg;
        size_t cap;
        /* A shared link's candidate: its round trip and what its host relay offers. */
        bool shared;
        uint64_t rtt_us;
        char offers[SF_HS_REASON_MAX + 1];
};

static int64_t earlier(int64_t a, int64_t b) {
        return a < b ? a : b;
}

static uint64_t at_most(uint64_t a, uint64_t b) {
        return a < b ? a : b;
}

/* What a connection allows for the status frame: handshake-timeout + connect-timeout. */
static uint64_t status_ms(const struct sf_forward *f) {
        uint64_t a = f->handshake_timeout_ms, b = f->connect_timeout_ms;
        return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The client half of the handshake (relay/link/client.h) with flags: the probe flag, with the
 * link flag for a shared link; a per-connection probe names the service as a client's
 * connection does. Returns the kind of failure, SF_LINK_OK when the host relay confirmed its
 * upstream (probe) or the link (its reason, the services it offers, in p->offers). *old_peer
 * (when not NULL) says the host relay does not know the flags we sent: ask it again without. */
static enum sf_link_err probe_link(int fd, struct probe *p, uint8_t flags, const char *service, bool *old_peer) {
        struct sf_hs_client h = {
                .key = p->key,
                .ep = p->ep->text,
                .token_file = p->token_file,
                .forward = p->f->name,
                .flags = flags,
                .service = service,
                .service_set = p->f->service_set,
        };
        /* Each wait as long as a connection would wait, within --timeout. */
        uint64_t hello_ms = at_most(p->timeout_ms, p->f->handshake_timeout_ms);
        int64_t deadline = earlier(p->deadline, sf_netio_deadline(hello_ms));
        uint8_t buf[SF_HS_STATUS_MAX];
        for (;;) {
                /* A stray service's banner is recognisable by its first 40 bytes. */
                size_t want = sf_hs_client_need(&h);
                if (!h.hello_done && want < BANNER_MAX - h.have)
                        want = BANNER_MAX - h.have;
                ssize_t n = sf_netio_read(fd, buf, want, deadline);
                if (n == -ETIMEDOUT) {
                        sf_hs_client_timeout(&h, hello_ms);
                        break;
                }
                if (n == 0) {
                        sf_hs_client_eof(&h);
                        break;
                }
                if (n < 0) {
                        snprintf(p->msg, p->cap, "connection error: %s: %s", p->ep->text, strerror((int)-n));
                        return SF_LINK_OTHER;
                }
                size_t used;
                enum sf_hsc_step step = sf_hs_client_input(&h, buf, (size_t)n, &used);
                if (step == SF_HSC_MORE)
                        continue;
                if (step == SF_HSC_FRAME) {
                        uint8_t frame[SF_HSC_FRAME_MAX];
                        size_t len = sf_hs_client_frame(&h, frame);
                        deadline = earlier(p->deadline, sf_netio_deadline(status_ms(p->f)));
                        int r = sf_netio_write_all(fd, frame, len, deadline);
                        if (r < 0) {
                                sf_hs_client_eof(&h);
                                break;
                        }
                        continue;
                }
                if (step == SF_HSC_OLD_PEER && old_peer) {
                        *old_peer = true;
                        return SF_LINK_OTHER;
                }
                if (step == SF_HSC_OK)
                        snprintf(p->offers, sizeof p->offers, "%s", h.reason);
                break;
        }
        snprintf(p->msg, p->cap, "%s", h.msg);
        return h.kind;
}

/* ---- a shared link's candidate: a stream end to end --------------------------------------- */

struct link_probe {
        bool pong;
        uint64_t rtt_us;
};

/* The ping's clock: a loopback link answers within microseconds. */
static uint64_t now_us(void) {
        return uv_hrtime() / 1000;
}

static void lp_pong(void *owner, uint64_t sent) {
        struct link_probe *lp = owner;
        lp->pong = true;
        uint64_t now = now_us();
        lp->rtt_us = now > sent ? now - sent : 1;
}

static void lp_stream_new(void *owner, struct sf_mux_stream *s, const char *service, bool by_default, bool probe) {
        (void)owner;
        (void)service;
        (void)by_default;
        (void)probe;
        sf_mux_stream_close(s); /* a client's mux gets no streams from its server */
}

static void lp_want_output(void *owner) {
        (void)owner;
}

static const struct sf_mux_ops lp_ops = { .stream_new = lp_stream_new, .want_output = lp_want_output, .pong = lp_pong };

static int mux_flush(int fd, struct sf_mux *m, int64_t deadline, char *why, size_t cap) {
        static uint8_t out[65536];
        ssize_t n;
        while ((n = sf_mux_output(m, out, sizeof out, why, cap)) > 0) {
                int r = sf_netio_write_all(fd, out, (size_t)n, deadline);
                if (r < 0) {
                        snprintf(why, cap, "writing to it: %s", strerror(-r));
                        return r;
                }
        }
        return n < 0 ? -EPROTO : 0;
}

/* Over the link the handshake confirmed: a ping for its round trip, and a probe stream for the
 * forward's service as a client's connection opens it (the host relay dials its upstream and
 * answers, then ends the stream). The words are those a relay logs for a stream that fails. */
static enum sf_link_err probe_stream(int fd, struct probe *p) {
        const char *ep = p->ep->text;
        struct sf_mux_config cfg;
        sf_mux_config_init(&cfg, SF_MUX_CLIENT_END_STREAMS);
        struct link_probe lp = { 0 };
        struct sf_bufpool *pool = sf_bufpool_new(1, NULL);
        struct sf_mux *m = NULL;
        if (!pool || sf_mux_new(SF_MUX_CLIENT, &cfg, &lp_ops, &lp, pool, &m) < 0) {
                sf_bufpool_free(pool);
                snprintf(p->msg, p->cap, "out of memory for the link to %s", ep);
                return SF_LINK_OTHER;
        }
        int err = 0;
        struct sf_mux_stream *s = NULL;
        if (sf_mux_ping(m, now_us()) == 0)
                s = sf_mux_stream_open(m, p->f->service, !p->f->service_set, true, &err);
        if (s)
                sf_mux_stream_shutdown(s);
        /* As a connection waits for its upstream: connect-timeout, within --timeout. */
        int64_t deadline = earlier(p->deadline, sf_netio_deadline(p->f->connect_timeout_ms));
        enum sf_link_err kind = SF_LINK_OK;
        char why[240] = "";
        uint8_t in[16384];
        while (s && (sf_mux_stream_status(s) < 0 && !sf_mux_stream_error(s))) {
                if (mux_flush(fd, m, deadline, why, sizeof why) < 0) {
                        snprintf(p->msg, p->cap, "the link to %s failed: %s", ep, why);
                        kind = SF_LINK_OTHER;
                        break;
                }
                ssize_t n = sf_netio_read(fd, in, sizeof in, deadline);
                if (n == -ETIMEDOUT) {
                        snprintf(p->msg, p->cap, "timeout: the host relay at %s did not answer the stream for service %s "
                                 "within %llums (its upstream is slow to answer, or the link stalls)",
                                 ep, p->f->service, (unsigned long long)at_most(p->timeout_ms, p->f->connect_timeout_ms));
                        kind = SF_LINK_TIMEOUT;
                        break;
                }
                if (n <= 0) {
                        snprintf(p->msg, p->cap, "the link to %s went down: %s", ep,
                                 n == 0 ? "the host relay closed it" : strerror((int)-n));
                        kind = SF_LINK_OTHER;
                        break;
                }
                if (sf_mux_input(m, in, (size_t)n, why, sizeof why) < 0) {
                        snprintf(p->msg, p->cap, "the link to %s failed: the host relay broke the protocol: %s", ep, why);
                        kind = SF_LINK_OTHER;
                        break;
                }
        }
        if (!s) {
                snprintf(p->msg, p->cap, "the link to %s takes no stream: %s", ep,
                         err == -ENOMEM ? "out of memory" : "the host relay is shutting down");
                kind = SF_LINK_OTHER;
        } else if (kind == SF_LINK_OK) {
                int st = sf_mux_stream_status(s);
                const char *reason = sf_mux_stream_reason(s);
                if (st == SF_MUX_OK) {
                        p->rtt_us = lp.pong ? lp.rtt_us : 0;
                } else if (st == SF_MUX_UPSTREAM_UNAVAILABLE) {
                        snprintf(p->msg, p->cap, "upstream unavailable: the host relay at %s could not reach its upstream: %s",
                                 ep, reason);
                        kind = SF_LINK_UPSTREAM;
                } else if (st > 0) {
                        snprintf(p->msg, p->cap, "upstream unavailable: the host relay at %s refused the stream: %s", ep,
                                 reason);
                        kind = SF_LINK_UPSTREAM;
                } else {
                        snprintf(p->msg, p->cap, "upstream unavailable: %s", reason);
                        kind = SF_LINK_UPSTREAM;
                }
        }
        sf_mux_stream_close(s);
        (void)mux_flush(fd, m, deadline, why, sizeof why);
        sf_mux_free(m, "check is done");
        sf_bufpool_free(pool);
        return kind;
}

static bool is_net(const struct sf_endpoint *ep) {
        return ep->kind == SF_EP_TCP || ep->kind == SF_EP_VSOCK;
}

/* One connection with the probe flag, as a client of `link = per-connection` gets: it names
 * the service as that client's connection does, and asks again without it a host relay from
 * before services (which answers a forward that named none). */
static bool probe_candidate_plain(struct probe *p) {
        char cause[300];
        bool old_peer = false;
        for (int attempt = 0; attempt < 2; attempt++) {
                int fd = sf_netio_dial(p->ep, at_most(p->timeout_ms, p->f->connect_timeout_ms), cause, sizeof cause);
                if (fd < 0) {
                        snprintf(p->msg, p->cap, "connect %s: %s", p->ep->text, cause);
                        return false;
                }
                enum sf_link_err r =
                        probe_link(fd, p, SF_HS_FLAG_PROBE, old_peer ? NULL : p->f->service, old_peer ? NULL : &old_peer);
                sf_netio_close(fd);
                if (!old_peer || attempt)
                        return r == SF_LINK_OK;
        }
        return false;
}

/* Probes one candidate: true when healthy; otherwise p->msg says why. */
static bool probe_candidate(struct probe *p) {
        if (p->key && is_net(p->ep) && p->f->link != SF_LINK_SHARED)
                return probe_candidate_plain(p);
        char cause[300];
        int fd = sf_netio_dial(p->ep, at_most(p->timeout_ms, p->f->connect_timeout_ms), cause, sizeof cause);
        if (fd < 0) {
                snprintf(p->msg, p->cap, "connect %s: %s", p->ep->text, cause);
                return false;
        }
        bool ok = true;
        bool old_peer = false;
        if (p->key && is_net(p->ep) && p->f->link == SF_LINK_SHARED) {
                /* The probe flag too: the host relay logs a health check's link at debug level. */
                ok = probe_link(fd, p, SF_HS_FLAG_LINK | SF_HS_FLAG_PROBE, NULL, &old_peer) == SF_LINK_OK &&
                     probe_stream(fd, p) == SF_LINK_OK;
                p->shared = ok;
                if (old_peer) {
                        /* A host relay from before links: its clients get one connection each,
                         * which the probe flag checks. */
                        sf_netio_close(fd);
                        return probe_candidate_plain(p);
                }
        }
        sf_netio_close(fd);
        return ok;
}

/* A forward whose own unix socket is not live has no relay serving it: clients fail whatever
 * the link says, so a HEALTHCHECK must not call it healthy. Returns NULL when live (or not a
 * unix socket), else what is wrong with it. */
static const char *listen_problem(const struct sf_forward *f) {
        if (f->listen.kind != SF_EP_UNIX)
                return NULL;
        switch (sf_sockpath_probe_settled(f->listen.path)) {
        case SF_PATH_LIVE_SOCKET:
                return NULL;
        case SF_PATH_MISSING:
                return "is missing";
        case SF_PATH_STALE_SOCKET:
                return "is a stale socket nobody accepts on";
        default:
                return "is not a live socket";
        }
}

/* Checks one forward and prints its line. 0 healthy, 1 not, SF_EX_CONFIG for a token file
 * that cannot be used. */
static int check_forward(const struct sf_conf *conf, const struct sf_forward *f, uint64_t timeout_ms,
                         bool link_only) {
        struct sf_hs_key key;
        bool has_key = false;
        const char *token_file = sf_conf_token_file(conf, f);
        for (size_t i = 0; i < f->n_connect && f->auth == SF_AUTH_TOKEN && !has_key; i++) {
                if (!is_net(&f->connect[i]))
                        continue;
                if (!token_file) {
                        sf_log(SF_LOG_ERROR, f->name, 0,
                               "auth = token needs a token-file (create one with sockferry keygen -o FILE)");
                        return SF_EX_CONFIG;
                }
                if (sf_token_load(token_file, conf, &key) < 0)
                        return SF_EX_CONFIG;
                has_key = true;
        }

        const char *listen = listen_problem(f);
        if (listen && link_only)
                fprintf(stderr, "%s: warning: listen %s %s: the relay for this forward is not running (sockferry probe %s says more)\n",
                        f->name, f->listen.text, listen, f->listen.path);
        /* The candidates in order, as a connection tries them (it starts from the one that
         * worked last, which a fresh check does not know): one line for each tried, the last one
         * below. */
        char msg[600], link[700];
        bool ok = false;
        for (size_t i = 0; i < f->n_connect && !ok; i++) {
                struct probe p = {
                        .ep = &f->connect[i], .key = has_key ? &key : NULL, .token_file = token_file, .f = f,
                        .timeout_ms = timeout_ms, .deadline = sf_netio_deadline(timeout_ms), .msg = msg, .cap = sizeof msg,
                };
                int64_t start = sf_netio_now_ms();
                ok = probe_candidate(&p);
                if (ok && p.shared)
                        snprintf(link, sizeof link, "OK (%s, shared link up, RTT %.1f ms, service %s: upstream answers, "
                                 "%lld ms)", p.ep->text, (double)p.rtt_us / 1000.0, f->service,
                                 (long long)(sf_netio_now_ms() - start));
                else if (ok)
                        snprintf(link, sizeof link, "OK (%s, %s, %lld ms)", p.ep->text,
                                 p.key && is_net(p.ep) ? "upstream answers" : "connected",
                                 (long long)(sf_netio_now_ms() - start));
                else
                        snprintf(link, sizeof link, "FAIL %s", msg);
                if (!ok && i + 1 < f->n_connect)
                        printf("%s: %s\n", f->name, link);
        }
        if (has_key)
                sodium_memzero(&key, sizeof key);
        if (listen && !link_only) {
                printf("%s: FAIL listen %s %s: the relay for this forward is not running (sockferry probe %s says "
                       "more; --link-only checks the link alone); the link: %s\n",
                       f->name, f->listen.text, listen, f->listen.path, link);
                return 1;
        }
        printf("%s: %s\n", f->name, link);
        return ok ? 0 : 1;
}

/* --pid: the forwards of a running `sockferry relay` or `run`, taken from its command line
 * (its -c, -F and -u), so that an image's HEALTHCHECK checks what its entrypoint was given,
 * a file or -F forwards. The options are parsed as relay and run parse them; what else is
 * there is skipped. o's file and specs then point into *cmdline, which the caller frees.
 * Returns 0 or an exit status, logged: 1 the process cannot be read, 64 it is not sockferry
 * relay or run. */
static int pid_options(const char *arg, struct sf_cli_opts *o, char **cmdline, char **file) {
        /* relay's and run's options, not check's (tests/docs/test_manpages.py knows the name). */
        static const struct option relay_run_opts[] = {
                SF_CLI_LONGOPTS,
                { "user", required_argument, NULL, 'u' },
                { "preload", required_argument, NULL, 0 },
                { "no-preload", no_argument, NULL, 0 },
                { "signal-group", no_argument, NULL, 0 },
                {}
        };
        char *end, cwd[PATH_MAX];
        size_t len;
        errno = 0;
        long pid = strtol(arg, &end, 10);
        if (errno || end == arg || *end || pid <= 0)
                return sf_cli_usage_error("check", "--pid %s: expected a process id, e.g. 1", arg);
        if (sf_confsearch_cmdline(pid, cmdline, &len) < 0)
                return 1;
        /* The arguments end in '\0' each; the last one, too, unless the process rewrote them. */
        int n = 0;
        for (size_t i = 0; i < len; i++)
                n += (*cmdline)[i] == '\0';
        if ((*cmdline)[len - 1] != '\0')
                return sf_cli_usage_error("check", "--pid %ld: its command line does not end as a program's does", pid);
        char **pargv = calloc((size_t)n + 1, sizeof *pargv);
        char **specs = realloc(o->specs, ((size_t)n + 1) * sizeof *specs);
        if (!pargv || !specs) {
                free(pargv);
                if (specs)
                        o->specs = specs;
                sf_log_error("--pid %ld: out of memory", pid);
                return 1;
        }
        o->specs = specs;
        for (int i = 0, at = 0; i < n; i++) {
                pargv[i] = *cmdline + at;
                at += (int)strlen(pargv[i]) + 1;
        }
        if (n < 2 || (strcmp(pargv[1], "relay") != 0 && strcmp(pargv[1], "run") != 0)) {
                int r = sf_cli_usage_error("check", "--pid %ld: not a sockferry relay or run (its command line starts "
                                           "'%s%s%s'); give the process id of the relay, or -c/-F", pid, pargv[0],
                                           n > 1 ? " " : "", n > 1 ? pargv[1] : "");
                free(pargv);
                return r;
        }
        int c, status = 0;
        optind = 0;
        while (status == 0 && (c = getopt_long(n - 1, pargv + 1, "+:" SF_CLI_SHORTOPTS "u:", relay_run_opts, NULL)) != -1) {
                if (c == 'F') {
                        o->specs[o->n_specs++] = optarg;
                } else if (c == 'u') {
                        o->user = optarg;
                } else if (c == 'c' && optarg[0] == '/') {
                        o->file = optarg;
                } else if (c == 'c') {
                        /* Relative to where the relay was started. */
                        free(*file);
                        *file = NULL;
                        if (sf_confsearch_cwd(pid, cwd, sizeof cwd) < 0 || asprintf(file, "%s/%s", cwd, optarg) < 0) {
                                sf_log_error("--pid %ld: its -c %s is a relative path; give check -c with the full "
                                             "path instead", pid, optarg);
                                *file = NULL;
                                status = 1;
                        } else {
                                o->file = *file;
                        }
                }
        }
        free(pargv);
        return status;
}

int sf_cmd_check(int argc, char **argv) {
        enum { OPT_TIMEOUT = 256, OPT_LINK_ONLY, OPT_PID };
        static const struct option opts[] = {
                SF_CLI_LONGOPTS,
                { "timeout", required_argument, NULL, OPT_TIMEOUT },
                { "link-only", no_argument, NULL, OPT_LINK_ONLY },
                { "pid", required_argument, NULL, OPT_PID },
                {}
        };
        struct sf_cli_opts o;
        uint64_t timeout_ms = DEFAULT_TIMEOUT_MS;
        bool link_only = false;
        const char *pid = NULL;
        char *cmdline = NULL, *pid_file = NULL;
        int c;

        if (sf_cli_opts_init(&o, argc) < 0)
                return 1;
        optind = 1;
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+:" SF_CLI_SHORTOPTS, opts, NULL)) != -1) {
                char err[200];
                int r = SF_CLI_NEXT;
                if (c == OPT_TIMEOUT) {
                        if (sf_duration_parse(optarg, &timeout_ms, err, sizeof err) < 0 || timeout_ms == 0)
                                r = sf_cli_usage_error("check", "--timeout %s: %s", optarg,
                                                       timeout_ms ? err : "expected a duration above 0, e.g. 5s");
                } else if (c == OPT_LINK_ONLY) {
                        link_only = true;
                } else if (c == OPT_PID) {
                        pid = optarg;
                } else if (c == 'h') {
                        help();
                        r = SF_CLI_EXIT_OK;
                } else {
                        r = sf_cli_opt("check", c, argv, &o);
                }
                if (r != SF_CLI_NEXT) {
                        sf_cli_opts_free(&o);
                        return r == SF_CLI_EXIT_OK ? 0 : r;
                }
        }
        if (optind < argc) {
                /* -t took a duration before it meant --test in every command. */
                uint64_t ms;
                char err[200];
                bool duration = o.test && sf_duration_parse(argv[optind], &ms, err, sizeof err) == 0;
                sf_cli_opts_free(&o);
                return sf_cli_usage_error("check", "unexpected argument '%s'%s", argv[optind],
                                          duration ? " (-t is --test, as in relay and run; the timeout is --timeout DUR)"
                                                   : "");
        }

        if (pid && (o.file || o.n_specs || o.user)) {
                sf_cli_opts_free(&o);
                return sf_cli_usage_error("check", "--pid takes the forwards from the running relay: give either "
                                          "--pid or -c/-F, not both");
        }
        if (pid) {
                int r = pid_options(pid, &o, &cmdline, &pid_file);
                if (r != 0) {
                        sf_cli_opts_free(&o);
                        free(cmdline);
                        free(pid_file);
                        return r;
                }
        }
        char found[PATH_MAX], places[2 * PATH_MAX];
        if (!o.file && o.n_specs == 0)
                o.file = sf_confsearch_find(found, sizeof found);
        struct sf_conf conf;
        sf_conf_init(&conf);
        int status = sf_cli_conf_load(&conf, &o, false);
        bool test = o.test;
        sf_cli_opts_free(&o);
        free(cmdline);
        free(pid_file);
        if (status == 0 && conf.n_forwards == 0) {
                sf_log_error("nothing to check: give a forward with -F NAME:LISTEN=CONNECT or a config file with a "
                             "[NAME] section (-c FILE; without -c and -F: %s)",
                             sf_confsearch_places(places, sizeof places));
                status = SF_EX_CONFIG;
        }
        if (status == 0 && test)
                status = sf_cli_conf_test(&conf);
        for (size_t i = 0; !test && status != SF_EX_CONFIG && i < conf.n_forwards; i++) {
                int r = check_forward(&conf, &conf.forwards[i], timeout_ms, link_only);
                if (r > status)
                        status = r;
        }
        fflush(stdout);
        sf_conf_free(&conf);
        return status;
}
