#include "conf/value.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include "conf/conf_int.h"
#include "conf/platform.h"

#define DURATION_EXPECTED "expected a duration such as 250ms, 5s or 2m"
#define MODE_EXPECTED "expected octal permission bits such as 0660"
#define BOOL_EXPECTED "expected yes or no (also true/false, on/off, 1/0)"
#define USER_EXPECTED "expected a user name known to this system or a numeric UID"
#define GROUP_EXPECTED "expected a group name known to this system or a numeric GID"
#define USER_GROUP_EXPECTED "expected NAME|UID[:GROUP|GID]"

/* (uid_t)-1 and (gid_t)-1 mean "leave unchanged" to chown(2) and setresuid(2), so they are
 * never a real id. */
#define ID_MAX 4294967294u

static bool is_digit(char c) {
        return c >= '0' && c <= '9';
}

/* Reads the leading decimal digits of s. Returns how many there were, or -ERANGE when the
 * number does not fit in 64 bits; *end points after the digits either way. */
static int read_digits(const char *s, uint64_t *out, const char **end) {
        uint64_t v = 0;
        int n = 0;
        bool range = true;
        for (; is_digit(s[n]); n++) {
                uint64_t d = (uint64_t)(s[n] - '0');
                range = range && v <= (UINT64_MAX - d) / 10;
                v = v * 10 + d;
        }
        *end = s + n;
        if (!range)
                return -ERANGE;
        *out = v;
        return n;
}

int sf_duration_parse(const char *s, uint64_t *ms, char *err, size_t errlen) {
        static const struct {
                const char *suffix;
                uint64_t ms;
        } units[] = {
                { "", 1000 }, /* a bare number is seconds, like sleep(1) */
                { "ms", 1 },
                { "s", 1000 },
                { "m", 60 * 1000 },
                { "h", 60 * 60 * 1000 },
        };
        const char *unit;
        uint64_t v;

        if (!*s)
                return sf_conf_fail(err, errlen, "empty value, " DURATION_EXPECTED);
        if (*s == '-')
                return sf_conf_fail(err, errlen, "\"%s\" is negative, " DURATION_EXPECTED, s);
        int n = read_digits(s, &v, &unit);
        if (n == 0)
                return sf_conf_fail(err, errlen, "\"%s\" is not a duration, " DURATION_EXPECTED, s);
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
                if (strcmp(unit, units[i].suffix) != 0)
                        continue;
                /* A number too long for 64 bits is more than a day too. */
                if (n < 0 || v > SF_DURATION_MAX_MS / units[i].ms)
                        return sf_conf_fail(err, errlen,
                                            "\"%s\" is more than 24h, expected a duration of at most 24h such as 250ms, 5s "
                                            "or 2m",
                                            s);
                *ms = v * units[i].ms;
                return 0;
        }
        return sf_conf_fail(err, errlen, "\"%s\" is not a duration, " DURATION_EXPECTED, s);
}

int sf_mode_parse(const char *s, mode_t *mode, char *err, size_t errlen) {
        mode_t v = 0;

        if (!*s)
                return sf_conf_fail(err, errlen, "empty value, " MODE_EXPECTED);
        for (const char *p = s; *p; p++) {
                if (*p < '0' || *p > '7')
                        return sf_conf_fail(err, errlen, "\"%s\" is not an octal mode, " MODE_EXPECTED, s);
                v = v * 8 + (mode_t)(*p - '0');
                /* Checked per digit so a long string cannot wrap around into range. */
                if (v > 07777)
                        return sf_conf_fail(err, errlen,
                                            "\"%s\" has bits beyond 07777 (no file-type bits), " MODE_EXPECTED, s);
        }
        *mode = v;
        return 0;
}

int sf_bool_parse(const char *s, bool *out, char *err, size_t errlen) {
        static const char *const yes[] = { "yes", "true", "on", "1" };
        static const char *const no[] = { "no", "false", "off", "0" };

        for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
                if (strcasecmp(s, yes[i]) == 0) {
                        *out = true;
                        return 0;
                }
                if (strcasecmp(s, no[i]) == 0) {
                        *out = false;
                        return 0;
                }
        }
        if (!*s)
                return sf_conf_fail(err, errlen, "empty value, " BOOL_EXPECTED);
        return sf_conf_fail(err, errlen, "\"%s\" is not a boolean, " BOOL_EXPECTED, s);
}

int sf_uint_parse(const char *s, uint64_t min, uint64_t max, uint64_t *out, char *err, size_t errlen) {
        const char *end;
        uint64_t v;

        if (!*s)
                return sf_conf_fail(err, errlen, "empty value, expected a number from %llu to %llu",
                                    (unsigned long long)min, (unsigned long long)max);
        int n = read_digits(s, &v, &end);
        if (n == 0 || (n > 0 && *end))
                return sf_conf_fail(err, errlen, "\"%s\" is not a number, expected a number from %llu to %llu", s,
                                    (unsigned long long)min, (unsigned long long)max);
        if (n < 0 || v < min || v > max)
                return sf_conf_fail(err, errlen, "\"%s\" is out of range, expected a number from %llu to %llu", s,
                                    (unsigned long long)min, (unsigned long long)max);
        *out = v;
        return 0;
}

/* A whole-string numeric id. Returns 1 and sets *id for one in range, 0 for anything that is
 * not all digits (then it is a name), -ERANGE for digits beyond ID_MAX. */
static int parse_id(const char *s, uint32_t *id) {
        const char *end;
        uint64_t v;

        int n = read_digits(s, &v, &end);
        if (n == 0 || (n > 0 && *end))
                return 0;
        if (n < 0 || v > ID_MAX)
                return -ERANGE;
        *id = (uint32_t)v;
        return 1;
}

int sf_user_parse(const char *s, uid_t *uid, gid_t *gid, char *err, size_t errlen) {
        uint32_t id;
        uid_t u;
        gid_t g;
        int r;

        if (sf_accounts_unsupported)
                return sf_conf_fail(err, errlen, "%s", sf_accounts_unsupported);
        if (!*s)
                return sf_conf_fail(err, errlen, "empty value, " USER_EXPECTED);
        r = parse_id(s, &id);
        if (r < 0)
                return sf_conf_fail(err, errlen, "\"%s\" is not a valid UID, expected a number below 4294967295", s);
        if (r > 0) {
                /* A uid without a passwd entry is fine (containers often run as one); its
                 * group is then the same number, as docker run --user UID does. */
                r = sf_account_user(NULL, (uid_t)id, &u, &g);
                if (r < 0)
                        return sf_conf_fail(err, errlen, "cannot look up UID %s: %s", s, strerror(-r));
                *uid = (uid_t)id;
                *gid = r > 0 ? g : (gid_t)id;
                return 0;
        }
        /* Writes *uid and *gid only when it finds the user. */
        r = sf_account_user(s, 0, uid, gid);
        if (r < 0)
                return sf_conf_fail(err, errlen, "cannot look up user \"%s\": %s", s, strerror(-r));
        if (r == 0)
                return sf_conf_fail(err, errlen, "no such user \"%s\", " USER_EXPECTED, s);
        return 0;
}

int sf_account_name_check(const char *s, bool users, char *err, size_t errlen) {
        const char *what = users ? "user" : "group";
        uint32_t id;
        int r = parse_id(s, &id);
        if (!*s)
                return sf_conf_fail(err, errlen, "empty value, expected a %s name or a numeric %s", what, users ? "UID" : "GID");
        if (r < 0)
                return sf_conf_fail(err, errlen, "\"%s\" is not a valid %s, expected a number below 4294967295", s,
                                    users ? "UID" : "GID");
        if (r > 0)
                return 0;
        /* The portable account name (POSIX 3.437) and the trailing '$' of machine accounts;
         * it is looked up in the container, so anything else would only fail there. */
        size_t n = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-");
        if (s[0] == '-' || n > 255 || (s[n] && !(s[n] == '$' && !s[n + 1])))
                return sf_conf_fail(err, errlen,
                                    "\"%s\" is not a %s name, expected a name of letters, digits, '.', '_' and '-' "
                                    "(looked up in the container) or a numeric %s",
                                    s, what, users ? "UID" : "GID");
        return 0;
}

int sf_group_parse(const char *s, gid_t *gid, char *err, size_t errlen) {
        uint32_t id;
        int r;

        if (sf_accounts_unsupported)
                return sf_conf_fail(err, errlen, "%s", sf_accounts_unsupported);
        if (!*s)
                return sf_conf_fail(err, errlen, "empty value, " GROUP_EXPECTED);
        r = parse_id(s, &id);
        if (r < 0)
                return sf_conf_fail(err, errlen, "\"%s\" is not a valid GID, expected a number below 4294967295", s);
        if (r > 0) {
                *gid = (gid_t)id;
                return 0;
        }
        /* Writes *gid only when it finds the group. */
        r = sf_account_group(s, gid);
        if (r < 0)
                return sf_conf_fail(err, errlen, "cannot look up group \"%s\": %s", s, strerror(-r));
        if (r == 0)
                return sf_conf_fail(err, errlen, "no such group \"%s\", " GROUP_EXPECTED, s);
        return 0;
}

int sf_user_group_parse(const char *s, uid_t *uid, gid_t *gid, char *err, size_t errlen) {
        /* LOGIN_NAME_MAX; a longer user part cannot name a user. */
        char user[256];
        uid_t u;
        gid_t g;

        const char *colon = strchr(s, ':');
        if (!colon)
                return sf_user_parse(s, uid, gid, err, errlen);
        size_t n = (size_t)(colon - s);
        if (n == 0)
                return sf_conf_fail(err, errlen, "\"%s\" has an empty user, " USER_GROUP_EXPECTED, s);
        if (!colon[1])
                return sf_conf_fail(err, errlen, "\"%s\" has an empty group, " USER_GROUP_EXPECTED, s);
        if (n >= sizeof user)
                return sf_conf_fail(err, errlen, "\"%.32s...\": user name is too long, " USER_GROUP_EXPECTED, s);
        memcpy(user, s, n);
        user[n] = '\0';
        if (sf_user_parse(user, &u, &g, err, errlen) < 0 || sf_group_parse(colon + 1, &g, err, errlen) < 0)
                return -EINVAL;
        *uid = u;
        *gid = g;
        return 0;
}
