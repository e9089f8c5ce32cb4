#pragma once
/* Shared by the conf unit tests: capture what the code under test logs, and write config
 * files into a scratch directory. Criterion runs every test in its own process, so
 * redirecting fd 2 and the scratch directory never leak from one test into another. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "conf/conf.h"

/* stderr goes to a temporary file until capture_end(), which returns the text; the
 * caller frees it. */
void capture_start(void);
char *capture_end(void);

/* The scratch directory: created by the suites' .init, removed with its files by .fini. */
void scratch_setup(void);
void scratch_teardown(void);
const char *scratch_dir(void);
/* Writes text into the scratch directory as name; returns the path (static storage per name). */
const char *scratch_file(const char *name, const char *text);

/* sf_conf_load() on text written to "sf.conf"; the log is returned in *log (free it). */
int load_text(struct sf_conf *c, const char *text, char **log);
/* sf_conf_add_spec() with the log in *log. */
int add_spec(struct sf_conf *c, const char *spec, char **log);
/* sf_conf_validate() with the log in *log. */
int validate(struct sf_conf *c, char **log);

/* How many lines the logger wrote at level error. */
size_t count_errors(const char *log);
/* Whether the log has an error line whose message is exactly the formatted text. */
bool has_error(const char *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define assert_contains(log, s) \
        cr_assert(strstr((log), (s)) != NULL, "expected \"%s\" in the log:\n%s", (s), (log))
#define assert_error(log, ...) \
        cr_assert(has_error((log), __VA_ARGS__), "expected an error line in the log:\n%s", (log))
