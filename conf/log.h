#pragma once
/* The logger: one line per event on stderr, text or JSON. Every call keeps errno intact. */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum sf_log_level { SF_LOG_ERROR = 0, SF_LOG_WARN, SF_LOG_INFO, SF_LOG_DEBUG };
enum sf_log_format { SF_LOG_TEXT = 0, SF_LOG_JSON };

void sf_log_setup(enum sf_log_level level, enum sf_log_format format);
enum sf_log_level sf_log_get_level(void);
enum sf_log_format sf_log_get_format(void);
int sf_log_level_parse(const char *s, enum sf_log_level *out);
int sf_log_format_parse(const char *s, enum sf_log_format *out);

/* While buf is set, the text of every error line logged (without time and level) is also kept
 * in buf, lines joined by "; " and cut at cap: what a reload asked over the control socket
 * answers. sf_log_capture(NULL, 0) stops. */
void sf_log_capture(char *buf, size_t cap);

/* forward may be NULL (process-wide event); conn 0 means "no connection". */
void sf_log(enum sf_log_level level, const char *forward, uint64_t conn, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
void sf_logv(enum sf_log_level level, const char *forward, uint64_t conn, const char *fmt, va_list ap)
        __attribute__((format(printf, 4, 0)));

#define sf_log_error(...) sf_log(SF_LOG_ERROR, NULL, 0, __VA_ARGS__)
#define sf_log_warn(...) sf_log(SF_LOG_WARN, NULL, 0, __VA_ARGS__)
#define sf_log_info(...) sf_log(SF_LOG_INFO, NULL, 0, __VA_ARGS__)
#define sf_log_debug(...) sf_log(SF_LOG_DEBUG, NULL, 0, __VA_ARGS__)

/* Text another program wrote (the far end of attach, an engine's CLI) made fit for one log
 * line: every control byte but tab (ESC, CR, BEL, NUL...), DEL, the C1 controls and any byte
 * that is not part of a UTF-8 character become \xHH, so the text can neither move, retitle or
 * clear the terminal nor start a line of its own. len bytes of in; at most cap - 1 bytes and
 * a NUL in out (cap > 3), a cut text ending in "...". Returns the length written. */
size_t sf_log_escape(const char *in, size_t len, char *out, size_t cap);

/* Lines of one source (a forward's per-connection errors, attach's far end) at most per_sec
 * in each second; what is dropped is counted. Zeroed to start. */
struct sf_log_ratelimit {
        uint64_t start_ms;
        unsigned count;
        unsigned dropped;
};
/* true when a line may be logged at now_ms. When a new second starts, *dropped is set to the
 * lines dropped in the one before (else 0), for the caller to say in its own words first.
 * now_ms is the clock's time now, not an event loop's cached time: after a long loop turn
 * that lags, and a second of the lines' own time stamps could then hold three windows. */
bool sf_log_ratelimit(struct sf_log_ratelimit *r, unsigned per_sec, uint64_t now_ms, unsigned *dropped);
/* The lines dropped and not yet said (the source ended): returned and cleared. */
unsigned sf_log_ratelimit_flush(struct sf_log_ratelimit *r);
