#pragma once
/* Scalar value parsers for the config file and -F. Each returns 0 or -EINVAL; on error it
 * writes into err what was expected. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The longest duration any setting takes. No timeout needs more than a day, and the cap keeps
 * every deadline (now + a duration, or a sum of two) far inside 64 bits, and inside the
 * signed 64-bit milliseconds some callers count in. */
#define SF_DURATION_MAX_MS (24 * 60 * 60 * 1000ull)

/* "250ms", "5s", "2m", "1h"; a bare number is seconds; at most SF_DURATION_MAX_MS. */
int sf_duration_parse(const char *s, uint64_t *ms, char *err, size_t errlen);
/* Octal permission bits, "0660" or "660", no file-type bits. */
int sf_mode_parse(const char *s, mode_t *mode, char *err, size_t errlen);
/* yes|no|true|false|on|off|1|0 */
int sf_bool_parse(const char *s, bool *out, char *err, size_t errlen);
/* Decimal integer in [min, max]. */
int sf_uint_parse(const char *s, uint64_t min, uint64_t max, uint64_t *out, char *err, size_t errlen);
/* A user name or numeric uid; the primary group comes from the passwd entry when there is one. */
int sf_user_parse(const char *s, uid_t *uid, gid_t *gid, char *err, size_t errlen);
/* "NAME|UID[:GROUP|GID]" as the user key takes it. */
int sf_user_group_parse(const char *s, uid_t *uid, gid_t *gid, char *err, size_t errlen);
int sf_group_parse(const char *s, gid_t *gid, char *err, size_t errlen);
/* An account (users: a user, else a group) named for another system, the far end of attach in
 * a container: a numeric id or a name of the form account names take, not looked up here.
 * Returns 0, or -EINVAL with a message in err. */
int sf_account_name_check(const char *s, bool users, char *err, size_t errlen);
