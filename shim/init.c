#include "shim/init.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf/log.h"
#include "shim/platform.h"

static const int forwarded[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH };
#define N_FORWARDED (sizeof forwarded / sizeof forwarded[0])

struct sf_init {
        uv_signal_t sigs[N_FORWARDED];
        uv_signal_t sigchld;
        uv_timer_t timer; /* SIGKILL deadline while terminating, grace deadline while finishing */
        unsigned open_handles;

        bool signal_group;
        pid_t payload;
        bool payload_exited;
        int status;
        sf_init_cb exited;
        void *exited_data;

        bool terminating;
        bool finishing, finished;
        sf_init_cb done;
        void *done_data;
};

static const char *sig_name(int sig) {
        const char *name = sigabbrev_np(sig);
        return name ? name : "?";
}

void sf_init_prepare(void) {
        int r = getpid() != 1 ? sf_proc_child_subreaper() : 0;
        if (r < 0)
                sf_log_warn("cannot become a child subreaper (%s); orphaned processes will be reaped by the host's init",
                            strerror(-r));
        struct sigaction ign = { .sa_handler = SIG_IGN };
        sigaction(SIGPIPE, &ign, NULL);
        /* The payload holds the terminal's foreground; sockferry writing its log from the
         * background must not be stopped for it. */
        sigaction(SIGTTOU, &ign, NULL);
        sigaction(SIGTTIN, &ign, NULL);
        sigaction(SIGTSTP, &ign, NULL);
}

static void signal_payload(struct sf_init *init, int sig) {
        pid_t target = init->signal_group ? -init->payload : init->payload;
        if (kill(target, sig) < 0 && errno != ESRCH)
                sf_log_warn("cannot send SIG%s to the payload (%s %ld): %s", sig_name(sig),
                            init->signal_group ? "process group" : "pid", (long)init->payload, strerror(errno));
}

static void finish_done(struct sf_init *init) {
        if (!init->finishing || init->finished)
                return;
        init->finished = true;
        uv_timer_stop(&init->timer);
        init->done(init, init->done_data);
}

static void payload_reaped(struct sf_init *init, int wstatus) {
        init->payload_exited = true;
        uv_timer_stop(&init->timer);
        if (WIFSIGNALED(wstatus)) {
                init->status = 128 + WTERMSIG(wstatus);
                sf_log_info("payload (pid %ld) killed by SIG%s; exit status %d", (long)init->payload,
                            sig_name(WTERMSIG(wstatus)), init->status);
        } else {
                init->status = WEXITSTATUS(wstatus);
                sf_log_info("payload (pid %ld) exited with status %d", (long)init->payload, init->status);
        }
        init->exited(init, init->exited_data);
}

/* One SIGCHLD may stand for many exits, and orphans re-parented here send theirs too: wait
 * for everyone until nothing is left to collect. */
static void reap(struct sf_init *init) {
        for (;;) {
                int wstatus;
                pid_t pid = waitpid(-1, &wstatus, WNOHANG);
                if (pid == 0)
                        return;
                if (pid < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == ECHILD)
                                finish_done(init);
                        return;
                }
                if (pid == init->payload && !init->payload_exited)
                        payload_reaped(init, wstatus);
                else if (WIFSIGNALED(wstatus))
                        sf_log_debug("reaped process %ld, killed by SIG%s", (long)pid, sig_name(WTERMSIG(wstatus)));
                else
                        sf_log_debug("reaped process %ld, exit status %d", (long)pid, WEXITSTATUS(wstatus));
        }
}

static void on_sigchld(uv_signal_t *h, int sig) {
        reap(h->data);
}

static void on_forwarded(uv_signal_t *h, int sig) {
        struct sf_init *init = h->data;
        if (init->payload <= 0 || init->payload_exited) {
                sf_log_debug("SIG%s received after the payload exited; not forwarded", sig_name(sig));
                return;
        }
        sf_log(sig == SIGWINCH ? SF_LOG_DEBUG : SF_LOG_INFO, NULL, 0, "forwarding SIG%s to the payload",
               sig_name(sig));
        signal_payload(init, sig);
}

static void on_closed(uv_handle_t *h) {
        struct sf_init *init = h->data;
        if (--init->open_handles == 0)
                free(init);
}

void sf_init_close(struct sf_init *init) {
        for (size_t i = 0; i < N_FORWARDED; i++)
                uv_close((uv_handle_t *)&init->sigs[i], on_closed);
        uv_close((uv_handle_t *)&init->sigchld, on_closed);
        uv_close((uv_handle_t *)&init->timer, on_closed);
}

int sf_init_new(uv_loop_t *loop, bool signal_group, struct sf_init **out) {
        struct sf_init *init = calloc(1, sizeof *init);
        if (!init)
                return -ENOMEM;
        init->signal_group = signal_group;

        /* Initialised all at once so that sf_init_close() has every handle to close, whatever
         * failed below. */
        for (size_t i = 0; i < N_FORWARDED; i++)
                uv_signal_init(loop, &init->sigs[i]);
        uv_signal_init(loop, &init->sigchld);
        uv_timer_init(loop, &init->timer);
        init->open_handles = N_FORWARDED + 2;
        for (size_t i = 0; i < N_FORWARDED; i++)
                init->sigs[i].data = init;
        init->sigchld.data = init;
        init->timer.data = init;

        int r = uv_signal_start(&init->sigchld, on_sigchld, SIGCHLD);
        for (size_t i = 0; r == 0 && i < N_FORWARDED; i++)
                r = uv_signal_start(&init->sigs[i], on_forwarded, forwarded[i]);
        if (r < 0) {
                sf_log_error("cannot catch signals: %s", uv_strerror(r));
                sf_init_close(init);
                return r;
        }
        *out = init;
        return 0;
}

void sf_init_watch(struct sf_init *init, pid_t pid, sf_init_cb exited, void *data) {
        init->payload = pid;
        init->exited = exited;
        init->exited_data = data;
}

static void on_kill_deadline(uv_timer_t *t) {
        struct sf_init *init = t->data;
        sf_log_warn("payload still running %d s after SIGTERM; sending SIGKILL", SF_INIT_GRACE_MS / 1000);
        signal_payload(init, SIGKILL);
}

void sf_init_terminate(struct sf_init *init) {
        if (init->payload <= 0 || init->payload_exited || init->terminating)
                return;
        init->terminating = true;
        sf_log_info("stopping the payload: SIGTERM now, SIGKILL in %d s", SF_INIT_GRACE_MS / 1000);
        signal_payload(init, SIGTERM);
        uv_timer_start(&init->timer, on_kill_deadline, SF_INIT_GRACE_MS, 0);
}

static void on_grace_over(uv_timer_t *t) {
        struct sf_init *init = t->data;
        if (getpid() == 1)
                sf_log_warn("processes still running %d s after SIGTERM; exiting, the kernel kills them",
                            SF_INIT_GRACE_MS / 1000);
        finish_done(init);
}

void sf_init_finish(struct sf_init *init, sf_init_cb done, void *data) {
        init->finishing = true;
        init->done = done;
        init->done_data = data;
        uint64_t grace = 0;
        /* kill(-1) from PID 1 reaches every other process of the namespace; ESRCH means
         * there is none. */
        if (getpid() == 1 && kill(-1, SIGTERM) == 0) {
                sf_log_info("sending SIGTERM to the processes still running; they have %d s", SF_INIT_GRACE_MS / 1000);
                grace = SF_INIT_GRACE_MS;
        }
        uv_timer_start(&init->timer, on_grace_over, grace, 0);
}

int sf_init_status(const struct sf_init *init) {
        return init->status;
}
