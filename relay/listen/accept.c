#include "relay/listen/accept.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conf/log.h"
#include "relay/sys/platform.h"

/* One forward's accept loop: accepting in batches, admitting local peers (allow-uid,
 * allow-gid, the system's own rule), pausing at max-conns and when out of descriptors (with a
 * backoff), resuming when a connection is gone. The relay and the connections come in
 * through the callbacks of struct sf_fwd only, so nothing here depends on them. */

#define ACCEPT_BATCH 64
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000

static void listener_resume(struct sf_fwd *fwd);
static void on_listen(struct sf_ev *ev, uint32_t events);

static int listen_add(struct sf_fwd *fwd) {
        int r = sf_watch_start(fwd->eng, &fwd->listen_watch, &fwd->listener, on_listen);
        if (r == 0)
                fwd->listening = true;
        return r;
}

void sf_fwd_listen_pause(struct sf_fwd *fwd) {
        if (!fwd->listening)
                return;
        sf_watch_stop(fwd->eng, &fwd->listen_watch, &fwd->listener);
        fwd->listening = false;
}

/* The listening socket itself broke: this forward cannot serve any more. */
static void fwd_fatal(struct sf_fwd *fwd, int err) {
        sf_fwd_listen_pause(fwd);
        fwd->fatal(fwd, err);
}

static void on_backoff(uv_timer_t *t) {
        listener_resume(t->data);
}

void sf_fwd_pause_out_of_fds(struct sf_fwd *fwd, const char *what, int err) {
        /* Under a storm the pressure comes and goes: one line per minute says it, not one
         * per pause. */
        uint64_t now = uv_now(fwd->loop);
        if (!fwd->paused_fds && (!fwd->fds_logged_ms || now - fwd->fds_logged_ms >= 60000)) {
                fwd->fds_logged_ms = now;
                sf_log(SF_LOG_ERROR, fwd->conf->name, 0,
                       "%s: %s — pausing new connections; raise the limit (ulimit -n / LimitNOFILE=) or lower "
                       "max-conns",
                       what, strerror(err));
        }
        if (fwd->paused_fds && !fwd->listening)
                return; /* paused already: the backoff timer resumes */
        fwd->paused_fds = true;
        sf_fwd_listen_pause(fwd);
        fwd->backoff_ms = fwd->backoff_ms ? fwd->backoff_ms * 2 : BACKOFF_MIN_MS;
        if (fwd->backoff_ms > BACKOFF_MAX_MS)
                fwd->backoff_ms = BACKOFF_MAX_MS;
        if (fwd->backoff_init)
                uv_timer_start(&fwd->backoff, on_backoff, fwd->backoff_ms, 0);
}

/* Whether the peer may use this listener: the system's own rule for a local one (a Windows
 * pipe: this account or SYSTEM) and allow-uid/allow-gid. false with why in msg. */
static bool admitted(struct sf_fwd *fwd, const struct sf_incoming *in, char *msg, size_t cap) {
        char who[160], allowed[64];
        if (!sf_incoming_trusted(in, who, sizeof who, allowed, sizeof allowed)) {
                snprintf(msg, cap, "refused a connection from %s: only %s may use %s", who, allowed,
                         fwd->conf->listen.text);
                return false;
        }
        if (!fwd->conf->n_allow_uid && !fwd->conf->n_allow_gid)
                return true;
        uid_t uid = (uid_t)-1;
        gid_t gid = (gid_t)-1;
        pid_t pid = 0;
        bool ok = false;
        if (sf_incoming_cred(in, &uid, &gid, &pid) == 0) {
                for (size_t k = 0; k < fwd->conf->n_allow_uid; k++)
                        ok = ok || uid == fwd->conf->allow_uid[k];
                for (size_t k = 0; k < fwd->conf->n_allow_gid; k++)
                        ok = ok || gid == fwd->conf->allow_gid[k];
        }
        if (!ok)
                snprintf(msg, cap, "refused a connection from uid %u gid %u (pid %d): not in allow-uid/allow-gid",
                         (unsigned)uid, (unsigned)gid, (int)pid);
        return ok;
}

static void accept_some(struct sf_fwd *fwd) {
        for (int i = 0; i < ACCEPT_BATCH; i++) {
                if (fwd->stats->active - fwd->preauth.all.n >= fwd->conf->max_conns) {
                        /* Leave the rest in the kernel's backlog until a connection ends. */
                        if (!fwd->paused_full)
                                sf_log(SF_LOG_WARN, fwd->conf->name, 0,
                                       "max-conns %u reached: new connections wait in the backlog",
                                       fwd->conf->max_conns);
                        fwd->paused_full = true;
                        sf_fwd_listen_pause(fwd);
                        return;
                }
                struct sf_incoming in;
                int r = sf_watch_accept(fwd->eng, &fwd->listen_watch, &fwd->listener, &in);
                if (r < 0) {
                        int e = -r;
                        if (e == EAGAIN || e == EINTR || e == ECONNABORTED || e == EPROTO)
                                return;
                        /* An unauthenticated peer's descriptor is the first to give back. */
                        if ((e == EMFILE || e == ENFILE) && sf_preauth_evict_oldest(&fwd->preauth))
                                continue;
                        if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
                                /* The pending connection stays readable: polling on would spin. */
                                char what[300];
                                snprintf(what, sizeof what, "accept on %s", fwd->conf->listen.text);
                                sf_fwd_pause_out_of_fds(fwd, what, e);
                                return;
                        }
                        sf_log(SF_LOG_ERROR, fwd->conf->name, 0, "accept on %s: %s: this forward stops serving",
                               fwd->conf->listen.text, strerror(e));
                        fwd_fatal(fwd, -e);
                        return;
                }
                if (fwd->paused_fds) {
                        sf_log(SF_LOG_DEBUG, fwd->conf->name, 0, "accepting again on %s", fwd->conf->listen.text);
                        fwd->paused_fds = false;
                        fwd->backoff_ms = 0;
                }
                char msg[300];
                if (!admitted(fwd, &in, msg, sizeof msg)) {
                        if (sf_fwd_ratelimit(fwd))
                                sf_log(SF_LOG_WARN, fwd->conf->name, 0, "%s", msg);
                        sf_fwd_note_error(fwd, &fwd->stats->err_denied, msg);
                        sf_incoming_close(fwd->eng, &in);
                        continue;
                }
                fwd->accepted(fwd, &in);
        }
}

static void on_listen(struct sf_ev *ev, uint32_t events) {
        /* An error on the listening socket comes out of the accept in accept_some. */
        (void)events;
        accept_some((struct sf_fwd *)((char *)ev - offsetof(struct sf_fwd, listen_watch.ev)));
}

static void listener_resume(struct sf_fwd *fwd) {
        if (fwd->listening || !fwd->listen_started)
                return;
        if (fwd->stats->active - fwd->preauth.all.n >= fwd->conf->max_conns)
                return;
        fwd->paused_full = false;
        int r = listen_add(fwd);
        if (r < 0) {
                sf_log(SF_LOG_ERROR, fwd->conf->name, 0, "listener %s: watching it: %s: this forward stops serving",
                       fwd->conf->listen.text, strerror(-r));
                fwd_fatal(fwd, r);
        }
}

int sf_fwd_start(struct sf_fwd *fwd) {
        /* A forward a reload gave a listener to may have its timer already. */
        if (!fwd->backoff_init) {
                uv_timer_init(fwd->loop, &fwd->backoff);
                fwd->backoff.data = fwd;
                fwd->backoff_init = true;
        }
        fwd->listen_started = true;
        int r = listen_add(fwd);
        if (r < 0)
                sf_log(SF_LOG_ERROR, fwd->conf->name, 0, "listener %s: %s", fwd->conf->listen.text, strerror(-r));
        return r;
}

void sf_fwd_conn_gone(struct sf_fwd *fwd) {
        fwd->n_conns_allocated--;
        if (fwd->paused_full)
                listener_resume(fwd);
        fwd->conn_gone(fwd);
}
