/* Scalar values: durations, modes, booleans, numbers, users and groups. */
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>

#include "helpers.h"
#include "conf/value.h"

#define DURATION_EXPECTED "expected a duration such as 250ms, 5s or 2m"
#define MORE_THAN_A_DAY "more than 24h, expected a duration of at most 24h such as 250ms, 5s or 2m"

static void assert_duration(const char *s, uint64_t want) {
        char err[256] = "";
        uint64_t ms = 12345;
        cr_assert_eq(sf_duration_parse(s, &ms, err, sizeof err), 0, "%s: %s", s, err);
        cr_assert_eq(ms, want, "%s: got %llu ms", s, (unsigned long long)ms);
}

static void assert_duration_error(const char *s, const char *want) {
        char err[256] = "";
        uint64_t ms = 12345;
        cr_assert_eq(sf_duration_parse(s, &ms, err, sizeof err), -EINVAL, "%s was accepted", s);
        cr_assert_str_eq(err, want);
        cr_assert_eq(ms, 12345, "a failed parse must not write the result");
}

Test(duration, units) {
        assert_duration("250ms", 250);
        assert_duration("5s", 5000);
        assert_duration("2m", 120000);
        assert_duration("1h", 3600000);
        assert_duration("0", 0);
        assert_duration("0ms", 0);
        assert_duration("7", 7000);
        assert_duration("007s", 7000);
        /* The longest: a day, in any unit. */
        assert_duration("24h", 86400000);
        assert_duration("1440m", 86400000);
        assert_duration("86400", 86400000);
        assert_duration("86400000ms", 86400000);
}

Test(duration, errors) {
        assert_duration_error("", "empty value, " DURATION_EXPECTED);
        assert_duration_error("5x", "\"5x\" is not a duration, " DURATION_EXPECTED);
        assert_duration_error("ms", "\"ms\" is not a duration, " DURATION_EXPECTED);
        assert_duration_error("5 s", "\"5 s\" is not a duration, " DURATION_EXPECTED);
        assert_duration_error("1.5s", "\"1.5s\" is not a duration, " DURATION_EXPECTED);
        assert_duration_error("5sec", "\"5sec\" is not a duration, " DURATION_EXPECTED);
        assert_duration_error("+5s", "\"+5s\" is not a duration, " DURATION_EXPECTED);
        assert_duration_error(" 5s", "\" 5s\" is not a duration, " DURATION_EXPECTED);
        assert_duration_error("-1s", "\"-1s\" is negative, " DURATION_EXPECTED);
        assert_duration_error("-0", "\"-0\" is negative, " DURATION_EXPECTED);
        /* Issue 23 g: 18446744073709551615ms was accepted, and the relay's deadline sums
         * wrapped around (a handshake timed out after 4 ms). Everything past a day is refused,
         * whether or not it fits in 64 bits. */
        assert_duration_error("18446744073709551615ms", "\"18446744073709551615ms\" is " MORE_THAN_A_DAY);
        assert_duration_error("86400001ms", "\"86400001ms\" is " MORE_THAN_A_DAY);
        assert_duration_error("86401", "\"86401\" is " MORE_THAN_A_DAY);
        assert_duration_error("1441m", "\"1441m\" is " MORE_THAN_A_DAY);
        assert_duration_error("25h", "\"25h\" is " MORE_THAN_A_DAY);
        assert_duration_error("18446744073709551616ms", "\"18446744073709551616ms\" is " MORE_THAN_A_DAY);
        assert_duration_error("18446744073709551615s", "\"18446744073709551615s\" is " MORE_THAN_A_DAY);
        assert_duration_error("5124095576030432h", "\"5124095576030432h\" is " MORE_THAN_A_DAY);
        assert_duration_error("99999999999999999999999999", "\"99999999999999999999999999\" is " MORE_THAN_A_DAY);
        /* A number beyond 64 bits with a bad unit is not a duration at all. */
        assert_duration_error("99999999999999999999999999x", "\"99999999999999999999999999x\" is not a duration, " DURATION_EXPECTED);
}

Test(duration, null_err_buffer) {
        uint64_t ms;
        cr_assert_eq(sf_duration_parse("x", &ms, NULL, 0), -EINVAL);
}

#define MODE_EXPECTED "expected octal permission bits such as 0660"

static void assert_mode(const char *s, mode_t want) {
        char err[256] = "";
        mode_t m = 0;
        cr_assert_eq(sf_mode_parse(s, &m, err, sizeof err), 0, "%s: %s", s, err);
        cr_assert_eq(m, want, "%s: got %o", s, (unsigned)m);
}

static void assert_mode_error(const char *s, const char *want) {
        char err[256] = "";
        mode_t m = 0123;
        cr_assert_eq(sf_mode_parse(s, &m, err, sizeof err), -EINVAL, "%s was accepted", s);
        cr_assert_str_eq(err, want);
        cr_assert_eq(m, 0123);
}

Test(mode, octal) {
        assert_mode("0660", 0660);
        assert_mode("660", 0660);
        assert_mode("0", 0);
        assert_mode("0600", 0600);
        assert_mode("7777", 07777);
        assert_mode("00000000000000000000666", 0666);
}

Test(mode, errors) {
        assert_mode_error("", "empty value, " MODE_EXPECTED);
        assert_mode_error("8", "\"8\" is not an octal mode, " MODE_EXPECTED);
        assert_mode_error("0698", "\"0698\" is not an octal mode, " MODE_EXPECTED);
        assert_mode_error("rw-", "\"rw-\" is not an octal mode, " MODE_EXPECTED);
        assert_mode_error("0x1ff", "\"0x1ff\" is not an octal mode, " MODE_EXPECTED);
        assert_mode_error("-660", "\"-660\" is not an octal mode, " MODE_EXPECTED);
        assert_mode_error("10000", "\"10000\" has bits beyond 07777 (no file-type bits), " MODE_EXPECTED);
        assert_mode_error("0140660", "\"0140660\" has bits beyond 07777 (no file-type bits), " MODE_EXPECTED);
        assert_mode_error("7777777777777777777777777", "\"7777777777777777777777777\" has bits beyond 07777 (no file-type bits), " MODE_EXPECTED);
}

Test(boolean, words) {
        static const char *const yes[] = { "yes", "YES", "true", "True", "on", "ON", "1" };
        static const char *const no[] = { "no", "No", "false", "FALSE", "off", "Off", "0" };
        char err[256];
        bool b;
        for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
                b = false;
                cr_assert_eq(sf_bool_parse(yes[i], &b, err, sizeof err), 0, "%s", yes[i]);
                cr_assert(b, "%s", yes[i]);
        }
        for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
                b = true;
                cr_assert_eq(sf_bool_parse(no[i], &b, err, sizeof err), 0, "%s", no[i]);
                cr_assert(!b, "%s", no[i]);
        }
}

Test(boolean, errors) {
        char err[256];
        bool b;
        cr_assert_eq(sf_bool_parse("maybe", &b, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "\"maybe\" is not a boolean, expected yes or no (also true/false, on/off, 1/0)");
        cr_assert_eq(sf_bool_parse("", &b, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "empty value, expected yes or no (also true/false, on/off, 1/0)");
        cr_assert_eq(sf_bool_parse("2", &b, err, sizeof err), -EINVAL);
        cr_assert_eq(sf_bool_parse("yes ", &b, err, sizeof err), -EINVAL);
}

Test(uint, range) {
        char err[256];
        uint64_t v;
        cr_assert_eq(sf_uint_parse("1", 1, 1000000, &v, err, sizeof err), 0);
        cr_assert_eq(v, 1);
        cr_assert_eq(sf_uint_parse("1000000", 1, 1000000, &v, err, sizeof err), 0);
        cr_assert_eq(v, 1000000);
        cr_assert_eq(sf_uint_parse("18446744073709551615", 0, UINT64_MAX, &v, err, sizeof err), 0);
        cr_assert_eq(v, UINT64_MAX);
}

Test(uint, errors) {
        char err[256];
        uint64_t v = 7;
        cr_assert_eq(sf_uint_parse("0", 1, 1000000, &v, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "\"0\" is out of range, expected a number from 1 to 1000000");
        cr_assert_eq(sf_uint_parse("1000001", 1, 1000000, &v, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "\"1000001\" is out of range, expected a number from 1 to 1000000");
        cr_assert_eq(sf_uint_parse("18446744073709551616", 0, UINT64_MAX, &v, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "\"18446744073709551616\" is out of range, expected a number from 0 to 18446744073709551615");
        cr_assert_eq(sf_uint_parse("12a", 1, 10, &v, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "\"12a\" is not a number, expected a number from 1 to 10");
        cr_assert_eq(sf_uint_parse("-1", 1, 10, &v, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "\"-1\" is not a number, expected a number from 1 to 10");
        cr_assert_eq(sf_uint_parse("", 1, 10, &v, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "empty value, expected a number from 1 to 10");
        cr_assert_eq(v, 7);
}

#define USER_EXPECTED "expected a user name known to this system or a numeric UID"
#define GROUP_EXPECTED "expected a group name known to this system or a numeric GID"

Test(user, names_and_numbers) {
        char err[256];
        uid_t uid = 1;
        gid_t gid = 1;
        cr_assert_eq(sf_user_parse("root", &uid, &gid, err, sizeof err), 0, "%s", err);
        cr_assert_eq(uid, 0);
        cr_assert_eq(gid, 0);
        uid = gid = 1;
        cr_assert_eq(sf_user_parse("0", &uid, &gid, err, sizeof err), 0, "%s", err);
        cr_assert_eq(uid, 0);
        cr_assert_eq(gid, 0);

        /* nobody's ids differ between systems; compare with what the system says. */
        struct passwd *pw = getpwnam("nobody");
        cr_assert_not_null(pw, "the test system has no user nobody");
        cr_assert_eq(sf_user_parse("nobody", &uid, &gid, err, sizeof err), 0, "%s", err);
        cr_assert_eq(uid, pw->pw_uid);
        cr_assert_eq(gid, pw->pw_gid);
}

Test(user, uid_without_entry) {
        char err[256];
        uid_t uid;
        gid_t gid;
        cr_assert_null(getpwuid(54321), "the test needs uid 54321 to have no passwd entry");
        cr_assert_eq(sf_user_parse("54321", &uid, &gid, err, sizeof err), 0, "%s", err);
        cr_assert_eq(uid, 54321);
        cr_assert_eq(gid, 54321, "a uid without an entry gets the same number as its group");
        cr_assert_eq(sf_user_parse("4294967294", &uid, &gid, err, sizeof err), 0, "%s", err);
        cr_assert_eq(uid, 4294967294u);
}

Test(user, errors) {
        char err[256];
        uid_t uid = 7;
        gid_t gid = 7;
        cr_assert_eq(sf_user_parse("no-such-user-sf", &uid, &gid, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "no such user \"no-such-user-sf\", " USER_EXPECTED);
        cr_assert_eq(sf_user_parse("", &uid, &gid, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "empty value, " USER_EXPECTED);
        cr_assert_eq(sf_user_parse("4294967295", &uid, &gid, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "\"4294967295\" is not a valid UID, expected a number below 4294967295");
        cr_assert_eq(sf_user_parse("99999999999999999999999", &uid, &gid, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "\"99999999999999999999999\" is not a valid UID, expected a number below 4294967295");
        cr_assert_eq(uid, 7);
        cr_assert_eq(gid, 7);
}

Test(group, names_and_numbers) {
        char err[256];
        gid_t gid = 1;
        cr_assert_eq(sf_group_parse("root", &gid, err, sizeof err), 0, "%s", err);
        cr_assert_eq(gid, 0);
        cr_assert_eq(sf_group_parse("65534", &gid, err, sizeof err), 0, "%s", err);
        cr_assert_eq(gid, 65534);
        cr_assert_eq(sf_group_parse("54321", &gid, err, sizeof err), 0, "%s", err);
        cr_assert_eq(gid, 54321);
}

Test(group, errors) {
        char err[256];
        gid_t gid = 7;
        cr_assert_eq(sf_group_parse("no-such-group-sf", &gid, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "no such group \"no-such-group-sf\", " GROUP_EXPECTED);
        cr_assert_eq(sf_group_parse("", &gid, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "empty value, " GROUP_EXPECTED);
        cr_assert_eq(sf_group_parse("4294967295", &gid, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "\"4294967295\" is not a valid GID, expected a number below 4294967295");
        cr_assert_eq(gid, 7);
}

Test(user_group, forms) {
        char err[256];
        uid_t uid;
        gid_t gid;
        cr_assert_eq(sf_user_group_parse("root", &uid, &gid, err, sizeof err), 0, "%s", err);
        cr_assert_eq(uid, 0);
        cr_assert_eq(gid, 0);
        cr_assert_eq(sf_user_group_parse("65534:65534", &uid, &gid, err, sizeof err), 0, "%s", err);
        cr_assert_eq(uid, 65534);
        cr_assert_eq(gid, 65534);
        cr_assert_eq(sf_user_group_parse("root:65534", &uid, &gid, err, sizeof err), 0, "%s", err);
        cr_assert_eq(uid, 0);
        cr_assert_eq(gid, 65534);
        cr_assert_eq(sf_user_group_parse("54321:root", &uid, &gid, err, sizeof err), 0, "%s", err);
        cr_assert_eq(uid, 54321);
        cr_assert_eq(gid, 0);
}

Test(user_group, errors) {
        char err[256], long_user[300];
        uid_t uid = 7;
        gid_t gid = 7;
        cr_assert_eq(sf_user_group_parse(":root", &uid, &gid, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "\":root\" has an empty user, expected NAME|UID[:GROUP|GID]");
        cr_assert_eq(sf_user_group_parse("root:", &uid, &gid, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "\"root:\" has an empty group, expected NAME|UID[:GROUP|GID]");
        cr_assert_eq(sf_user_group_parse("no-such-user-sf:root", &uid, &gid, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "no such user \"no-such-user-sf\", " USER_EXPECTED);
        cr_assert_eq(sf_user_group_parse("root:no-such-group-sf", &uid, &gid, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "no such group \"no-such-group-sf\", " GROUP_EXPECTED);
        cr_assert_eq(sf_user_group_parse("", &uid, &gid, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "empty value, " USER_EXPECTED);
        memset(long_user, 'u', sizeof long_user);
        memcpy(long_user + 280, ":root", 6);
        cr_assert_eq(sf_user_group_parse(long_user, &uid, &gid, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "\"uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu...\": user name is too long, expected NAME|UID[:GROUP|GID]");
        cr_assert_eq(uid, 7);
        cr_assert_eq(gid, 7);
}
