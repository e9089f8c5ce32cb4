#include "relay/forward.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "conf/log.h"
#include "relay/link/server.h"
#include "relay/link/token.h"

/* A forward's run-time object: set up with its token, freed in one place, and the state its
 * connections share — the error accounting they report to and the rate limit of their log
 * lines. Its accept loop is relay/listen/accept.c. */

#define RATELIMIT_PER_SEC 5

/* Counters, and how many forward objects count in them. */
struct stats_ref {
        struct sf_relay_stats s; /* first: fwd->stats points at it */
        unsigned refs;
};

static void stats_put(struct sf_relay_stats *s) {
        struct stats_ref *r = (struct stats_ref *)s;
        if (r && --r->refs == 0)
                free(r);
}

void sf_fwd_stats_share(struct sf_fwd *fwd, struct sf_fwd *from) {
        if (fwd->stats == from->stats)
                return;
        stats_put(fwd->stats);
        fwd->stats = from->stats;
        ((struct stats_ref *)fwd->stats)->refs++;
}

int sf_fwd_init(struct sf_fwd *fwd, const struct sf_conf *conf, const struct sf_forward *fc, uv_loop_t *loop,
                struct sf_bufpool *pool, struct sf_engine *eng) {
        fwd->loop = loop;
        fwd->conf = fc;
        fwd->pool = pool;
        fwd->eng = eng;
        fwd->listener.fd = -1;
        fwd->last_good = -1;
        struct stats_ref *r = calloc(1, sizeof *r);
        if (!r) {
                sf_log(SF_LOG_ERROR, fc->name, 0, "out of memory");
                return -ENOMEM;
        }
        r->refs = 1;
        fwd->stats = &r->s;
        fwd->stats->candidate = -1;
        if (fc->auth != SF_AUTH_TOKEN)
                return 0;
        fwd->token_file = sf_conf_token_file(conf, fc);
        if (!fwd->token_file) {
                sf_log(SF_LOG_ERROR, fc->name, 0,
                       "auth = token needs a token-file (create one with sockferry keygen -o FILE)");
                return -EINVAL;
        }
        int e = sf_token_load(fwd->token_file, conf, &fwd->key);
        if (e < 0)
                return e;
        fwd->has_key = true;
        fwd->connect_key = fc->connect_auth == SF_AUTH_TOKEN;
        return 0;
}

void sf_fwd_free(struct sf_fwd *fwd) {
        stats_put(fwd->stats);
        fwd->stats = NULL;
        sf_listener_close(&fwd->listener);
        sodium_memzero(&fwd->key, sizeof fwd->key);
        fwd->has_key = false;
        sf_preauth_free(&fwd->preauth);
}

struct sf_fwd *sf_fwd_service(struct sf_fwd *owner, const char *name, bool by_default, char *why, size_t cap) {
        size_t n = 0;
        for (struct sf_fwd *f = owner; f; f = f->next_service)
                n++;
        if (n == 1 && (!name[0] || by_default || strcmp(owner->conf->service, name) == 0))
                return owner;
        for (struct sf_fwd *f = owner; name[0] && f; f = f->next_service)
                if (strcmp(f->conf->service, name) == 0)
                        return f;
        size_t o = (size_t)snprintf(why, cap, "%s%s%s: this listener offers ", name[0] ? "unknown service " : "",
                                    name[0] ? name : "no service named", name[0] ? "" : " (name one with service = NAME)");
        for (struct sf_fwd *f = owner; f && o < cap; f = f->next_service)
                o += (size_t)snprintf(why + o, cap - o, "%s%s", f == owner ? "" : ", ", f->conf->service);
        return NULL;
}

void sf_fwd_offers(const struct sf_fwd *owner, char *out, size_t cap, struct sf_link_server_limits *lim) {
        size_t o = (size_t)snprintf(out, cap, "offers ");
        uint64_t streams = 0;
        for (const struct sf_fwd *f = owner; f; f = f->next_service) {
                if (o < cap)
                        o += (size_t)snprintf(out + o, cap - o, "%s%s", f == owner ? "" : ", ", f->conf->service);
                streams += f->conf->max_conns;
        }
        uint64_t links = owner->conf->max_links;
        /* A link holds a descriptor; its streams hold their upstreams', which max-conns counts. */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && links > rl.rlim_cur / 8)
                links = rl.rlim_cur / 8 < 1 ? 1 : rl.rlim_cur / 8;
        *lim = (struct sf_link_server_limits){
                .max_streams = streams,
                .max_links = (uint32_t)links,
                .keepalive_ms = owner->conf->keepalive_ms,
        };
}

void sf_fwd_note_error(struct sf_fwd *fwd, uint64_t *counter, const char *msg) {
        (*counter)++;
        snprintf(fwd->stats->last_error, sizeof fwd->stats->last_error, "%s", msg);
        fwd->stats->last_error_time = time(NULL);
}

bool sf_fwd_ratelimit(struct sf_fwd *fwd) {
        unsigned dropped;
        bool ok = sf_log_ratelimit(&fwd->ratelimit, RATELIMIT_PER_SEC, uv_hrtime() / 1000000, &dropped);
        if (dropped)
                sf_log(SF_LOG_WARN, fwd->conf->name, 0, "%u similar messages suppressed in the last second", dropped);
        return ok;
}

