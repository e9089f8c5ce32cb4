#pragma once
/* The init duties of `sockferry run`, with tini and catatonit semantics: forward signals to
 * the payload, reap every zombie, become a child subreaper when not PID 1, and on the way out
 * give the processes left behind a bounded grace period. */
#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

/* How long processes get after SIGTERM: the payload after a fatal relay error (SIGKILL
 * follows), and, when sockferry is PID 1, the processes still alive after the payload exited
 * (the kernel SIGKILLs them when PID 1 exits). */
#define SF_INIT_GRACE_MS 5000

struct sf_init;
typedef void (*sf_init_cb)(struct sf_init *init, void *data);

/* Before anything is started: becomes a child subreaper when not PID 1, so orphans are reaped
 * here and not by a host init, and ignores SIGPIPE and the terminal job-control signals (the
 * payload, not sockferry, owns the terminal). */
void sf_init_prepare(void);

/* Catches the forwarded signals (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH)
 * and SIGCHLD on loop. Call before the payload starts so no signal is lost; they are handled
 * once the loop runs. With signal_group, signals go to the payload's process group. */
int sf_init_new(uv_loop_t *loop, bool signal_group, struct sf_init **out);

/* Forwards signals to pid from now on and calls exited once, after it was reaped. */
void sf_init_watch(struct sf_init *init, pid_t pid, sf_init_cb exited, void *data);

/* After a fatal error: SIGTERM to the payload now, SIGKILL if it is still alive after the
 * grace period. */
void sf_init_terminate(struct sf_init *init);

/* After the payload exited. As PID 1: SIGTERM to every process still alive, then done runs
 * when they are all reaped or the grace period is over. Otherwise done runs at once. */
void sf_init_finish(struct sf_init *init, sf_init_cb done, void *data);

/* The payload's exit status, or 128+N when signal N killed it. */
int sf_init_status(const struct sf_init *init);

/* Closes the handles; the memory goes when the loop has run their close callbacks. */
void sf_init_close(struct sf_init *init);
