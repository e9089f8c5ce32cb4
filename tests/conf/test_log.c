/* The logger's defences against text it did not write (conf/log.h): sf_log_escape, which
 * keeps another program's bytes from driving the operator's terminal or forging log lines,
 * and the rate limit of one source's lines. */
#include <criterion/criterion.h>
#include <string.h>

#include "conf/log.h"

static const char *esc(const char *in, size_t len, size_t cap) {
        static char out[512];
        cr_assert(cap <= sizeof out);
        size_t n = sf_log_escape(in, len, out, cap);
        cr_assert_eq(n, strlen(out));
        cr_assert_lt(n, cap);
        return out;
}

Test(log_escape, terminal_controls_become_hex) {
        /* OSC 0 (retitle), CSI 2J (clear), BEL, CR (overwrite the line), a newline (a forged
         * line), NUL, DEL. */
        static const char in[] = "\x1b]0;owned\x07 \x1b[2J\rsockferry error: forged\nx\0y\x7f";
        cr_assert_str_eq(esc(in, sizeof in - 1, 512),
                         "\\x1b]0;owned\\x07 \\x1b[2J\\x0dsockferry error: forged\\x0ax\\x00y\\x7f");
}

Test(log_escape, tab_and_utf8_text_are_kept) {
        static const char in[] = "a\tb /tmp/caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\xb3";
        cr_assert_str_eq(esc(in, sizeof in - 1, 512), in);
}

Test(log_escape, c1_controls_and_broken_utf8_become_hex) {
        /* U+009B (CSI as one character) in UTF-8 and raw, a lone continuation byte, a cut
         * sequence, an overlong '/', a surrogate. */
        static const char in[] = "\xc2\x9b" "2J|\x9b|\x80|\xe2\x82|\xc0\xaf|\xed\xa0\x80";
        cr_assert_str_eq(esc(in, sizeof in - 1, 512),
                         "\\xc2\\x9b2J|\\x9b|\\x80|\\xe2\\x82|\\xc0\\xaf|\\xed\\xa0\\x80");
}

Test(log_escape, a_long_text_is_cut_with_an_ellipsis) {
        char in[300];
        memset(in, '\x1b', sizeof in);
        const char *out = esc(in, sizeof in, 64);
        cr_assert_eq(strlen(out), 4 * 15 + 3, "%s", out);
        cr_assert(strncmp(out, "\\x1b\\x1b", 8) == 0 && strcmp(out + strlen(out) - 3, "...") == 0, "%s", out);
        cr_assert_str_eq(esc("abc", 3, 8), "abc");
        cr_assert_str_eq(esc("abcdefgh", 8, 8), "abcd...");
}

Test(log_ratelimit, per_second_with_the_dropped_count_after) {
        struct sf_log_ratelimit r = { 0 };
        unsigned dropped, allowed = 0;
        for (int i = 0; i < 100; i++) {
                allowed += sf_log_ratelimit(&r, 20, 5000 + (uint64_t)i, &dropped);
                cr_assert_eq(dropped, 0);
        }
        cr_assert_eq(allowed, 20);
        cr_assert(sf_log_ratelimit(&r, 20, 6000, &dropped));
        cr_assert_eq(dropped, 80, "the next second says what the last one dropped");
        for (int i = 0; i < 25; i++)
                sf_log_ratelimit(&r, 20, 6001, &dropped);
        cr_assert_eq(sf_log_ratelimit_flush(&r), 6, "the end says what is left");
        cr_assert_eq(sf_log_ratelimit_flush(&r), 0);
}
