#pragma once
/* The control socket (`control = unix:PATH`): a local client connects, sends one request line,
 * gets the answer and the connection closes. The requests are `stats [text|json|prometheus]`,
 * which `sockferry stats` sends, and `reload` (`sockferry reload`, the same as SIGHUP). */
#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

#include "conf/conf.h"
#include "relay/control/stats.h"
#include "relay/relay.h"

/* A request line is short; a client that sends more without a newline is cut off. */
#define SF_CONTROL_LINE_MAX 64

#define SF_CONTROL_STATS 1
#define SF_CONTROL_RELOAD 2
/* Parses what a control client sent so far: buf holds len bytes, not NUL-terminated, any
 * content. Returns SF_CONTROL_STATS with *fmt set once a whole line "stats [FORMAT]" is there,
 * SF_CONTROL_RELOAD for a line "reload" (a trailing CR and runs of blanks are allowed); 0 when
 * the line is not complete yet; -EMSGSIZE when SF_CONTROL_LINE_MAX bytes came without a newline;
 * -EINVAL for any other line. Pure. */
int sf_control_request_parse(const char *buf, size_t len, enum sf_stats_format *fmt);

struct sf_control;

/* Binds conf->control as a listen socket is bound (mode 0600, owner root or whoever runs us,
 * a stale socket replaced, nothing else) and serves requests on loop; the counters are the ones
 * of the configuration relay runs now (sf_relay_conf), conf need not outlive the call. Returns
 * 0 or -errno, logged. */
int sf_control_new(uv_loop_t *loop, const struct sf_conf *conf, const struct sf_relay *relay,
                   struct sf_control **out);
/* Answers a reload request: writes one line (no newline) into msg, the summary or what went
 * wrong, and returns 0 or -errno. */
typedef int (*sf_control_reload_cb)(void *data, char *msg, size_t cap);
/* Without a callback a reload request is answered with an error. */
void sf_control_on_reload(struct sf_control *ctl, sf_control_reload_cb cb, void *data);
struct sf_listener;
/* The control socket's listener (relay/listen/listener.h): for a unix path, its pinned
 * directory is its dirfd. */
const struct sf_listener *sf_control_listener(const struct sf_control *ctl);

/* Stops serving, closes every handle and removes the socket file; a client whose answer is on
 * its way gets it first (within 2 s). The memory is freed once libuv released
 * the handles, so the loop must run on. NULL-safe, not idempotent. */
void sf_control_close(struct sf_control *ctl);
