#pragma once
/* Directories on a socket path that nobody but root and the relay's own users can change
 * (doc/SECURITY.md, "Socket directories"). A listen path or alias is reached through a
 * directory fd pinned after every directory from / down to it was checked, never through a
 * name that can change underneath. The rule is OpenSSH's: every directory is owned by root or
 * a trusted user, and is not writable by group or others unless it is sticky and owned by
 * root (/tmp); a symbolic link on the way is followed only when root or a trusted user owns
 * it. */
#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

struct sf_safedir_policy {
        uid_t trusted[2]; /* besides root: the effective uid and the configured `user` */
        size_t n_trusted;
};

/* Root, the effective uid and, when user_set, the uid the relay will run as. */
void sf_safedir_policy_init(struct sf_safedir_policy *p, bool user_set, uid_t user);
/* Whether a file owned by uid may decide where a path leads. */
bool sf_safedir_owner_ok(const struct sf_safedir_policy *p, uid_t uid);
/* Whether a directory with this owner and mode is safe to hold a socket or lead to one. */
bool sf_safedir_dir_ok(const struct sf_safedir_policy *p, const struct stat *st);

/* "NAME (uid N)", or "uid N" for a uid without a name: the owner in messages. */
const char *sf_safedir_user_name(uid_t uid, char *buf, size_t size);

/* Opens the directory holding the absolute path `path`, walking from / and checking every
 * directory and link on the way; with create, missing directories are made 0755 (mkdirat on
 * the checked parent). *base points at the last component of path. Failures are logged as
 * "WHAT: ..." for the forward `name` (may be NULL). Returns an O_PATH directory fd or -errno:
 * -EPERM when a directory or link on the way is not safe (a configuration error). */
int sf_safedir_open(const struct sf_safedir_policy *p, const char *path, bool create, const char *name,
                    const char *what, const char **base);

/* Opens the file at the absolute path `path` with open(2)'s flags (O_NOFOLLOW and O_CLOEXEC
 * added), walking from / under the same rule: every directory on the way checked, every link
 * (the last component's too) followed only when root or a trusted user owns it. For files whose
 * place decides what they mean (a token file: whoever can change a directory on its path could
 * point the relay at another token). Failures are logged as "WHAT: ...", but for a missing file
 * or directory (-ENOENT), which the caller explains.
 * Returns the fd or -errno: -EPERM when a directory or link on the way is not safe. */
int sf_safedir_open_file(const struct sf_safedir_policy *p, const char *path, int flags, const char *name,
                         const char *what);

/* Makes dirfd the working directory, for the calls that take a path only (bind, connect).
 * Returns the previous working directory as an fd for sf_safedir_leave, or -errno. Only for
 * start-up, while no other thread resolves relative paths. */
int sf_safedir_enter(int dirfd);
/* Returns to the working directory sf_safedir_enter saved and closes its fd. */
void sf_safedir_leave(int saved);
