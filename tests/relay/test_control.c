/* The control request parser: what any local client may send to the control socket. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "relay/control/control.h"

static int parse(const char *s, enum sf_stats_format *fmt) {
        return sf_control_request_parse(s, strlen(s), fmt);
}

Test(control, stats_formats) {
        enum sf_stats_format fmt = SF_STATS_PROMETHEUS;
        cr_assert_eq(parse("stats\n", &fmt), 1);
        cr_assert_eq(fmt, SF_STATS_TEXT);
        cr_assert_eq(parse("stats json\n", &fmt), 1);
        cr_assert_eq(fmt, SF_STATS_JSON);
        cr_assert_eq(parse("stats prometheus\r\n", &fmt), 1);
        cr_assert_eq(fmt, SF_STATS_PROMETHEUS);
        cr_assert_eq(parse("  stats \t text  \n", &fmt), 1);
        cr_assert_eq(fmt, SF_STATS_TEXT);
}

Test(control, reload) {
        enum sf_stats_format fmt;
        cr_assert_eq(parse("reload\n", &fmt), SF_CONTROL_RELOAD);
        cr_assert_eq(parse(" reload \r\n", &fmt), SF_CONTROL_RELOAD);
        cr_assert_eq(parse("reload\nstats\n", &fmt), SF_CONTROL_RELOAD);
        cr_assert_eq(parse("reload", &fmt), 0);
        cr_assert_eq(parse("reload now\n", &fmt), -EINVAL);
        cr_assert_eq(parse("RELOAD\n", &fmt), -EINVAL);
        cr_assert_eq(parse("reloads\n", &fmt), -EINVAL);
}

Test(control, incomplete_line_waits) {
        enum sf_stats_format fmt;
        cr_assert_eq(parse("", &fmt), 0);
        cr_assert_eq(parse("stats js", &fmt), 0);
        cr_assert_eq(parse("stats json", &fmt), 0);
}

Test(control, only_the_first_line_counts) {
        enum sf_stats_format fmt;
        cr_assert_eq(parse("stats json\ngarbage after", &fmt), 1);
        cr_assert_eq(fmt, SF_STATS_JSON);
}

Test(control, unknown_requests) {
        enum sf_stats_format fmt;
        cr_assert_eq(parse("\n", &fmt), -EINVAL);
        cr_assert_eq(parse("STATS\n", &fmt), -EINVAL);
        cr_assert_eq(parse("stats xml\n", &fmt), -EINVAL);
        cr_assert_eq(parse("stats json extra\n", &fmt), -EINVAL);
        cr_assert_eq(parse("statsjson\n", &fmt), -EINVAL);
        cr_assert_eq(parse("quit\n", &fmt), -EINVAL);
        cr_assert_eq(sf_control_request_parse("stats\0json\n", 11, &fmt), -EINVAL);
}

Test(control, long_line_is_cut_off) {
        enum sf_stats_format fmt;
        char buf[4 * SF_CONTROL_LINE_MAX];
        memset(buf, 'a', sizeof buf);
        cr_assert_eq(sf_control_request_parse(buf, SF_CONTROL_LINE_MAX - 1, &fmt), 0);
        cr_assert_eq(sf_control_request_parse(buf, SF_CONTROL_LINE_MAX, &fmt), -EMSGSIZE);
        cr_assert_eq(sf_control_request_parse(buf, sizeof buf, &fmt), -EMSGSIZE);
        /* a newline past the limit does not make the line acceptable */
        memcpy(buf, "stats", 5);
        buf[SF_CONTROL_LINE_MAX + 2] = '\n';
        cr_assert_eq(sf_control_request_parse(buf, sizeof buf, &fmt), -EMSGSIZE);
}

Test(control, format_names) {
        enum sf_stats_format fmt;
        cr_assert_eq(sf_stats_format_parse("json", &fmt), 0);
        cr_assert_eq(fmt, SF_STATS_JSON);
        cr_assert_eq(sf_stats_format_parse("Json", &fmt), -EINVAL);
        cr_assert_eq(sf_stats_format_parse("", &fmt), -EINVAL);
}
