#pragma once
/* Directories on a socket path that nobody but root, the relay and the socket's own user can
 * change (doc/SECURITY.md, "Socket directories"). A listen path or alias is reached through a
 * directory fd pinned after every directory from / down to it was checked, never through a
 * name that can change underneath. The rule is OpenSSH's: every directory is owned by root or
 * a trusted user (the effective uid, the user the socket is for), and is not writable by group
 * or others unless it is sticky and owned by root (/tmp); a symbolic link on the way is
 * followed only when root or a trusted user owns it. Where the socket's user owns a directory
 * or link on the way, what is made there is made as that user, so that the user decides
 * nothing root does. */
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

struct sf_safedir_policy {
        uid_t trusted[2]; /* besides root: the effective uid and the user the path is for */
        size_t n_trusted;
        bool user_set;    /* the user the path is for, and the group of what is made as that */
        uid_t user;       /* user (sf_safedir_found.users) */
        gid_t gid;
        /* A token file's path (sf_safedir_open_file): besides the trusted owners, directories
         * and links of one other owner pass (the file must then be that owner's, the caller
         * checks), and so does whatever is on a read-only mount, which nobody here can change. */
        bool any_owner;
};

/* What a walk found on the way, beyond root and the effective uid. */
struct sf_safedir_found {
        /* A directory or link of the user the path is for: what is made in it (directories,
         * the socket) is made as that user (sf_fs_user_enter), never by root in a place that
         * user can change. */
        bool users;
        /* any_owner: a directory or link of another owner, other_uid; the first is other_path. */
        bool other, other_link;
        uid_t other_uid;
        char other_path[PATH_MAX];
        /* sf_safedir_open_file: the file's directory lets others add names (a sticky one of
         * root's): whoever owns the file may have put it there. */
        bool shared_dir;
};

/* Root, the effective uid and, when user_set, user: the user the path is for (a socket's owner,
 * the relay's `user`), whose files are made with the group gid. */
void sf_safedir_policy_init(struct sf_safedir_policy *p, bool user_set, uid_t user, gid_t gid);
/* Whether a file owned by uid may decide where a path leads. */
bool sf_safedir_owner_ok(const struct sf_safedir_policy *p, uid_t uid);
/* Whether a directory with this owner and mode is safe to hold a socket or lead to one. */
bool sf_safedir_dir_ok(const struct sf_safedir_policy *p, const struct stat *st);

/* "NAME (uid N)", or "uid N" for a uid without a name: the owner in messages. */
const char *sf_safedir_user_name(uid_t uid, char *buf, size_t size);

/* Makes the calling thread create files as p's user (sf_fs_user_enter) until
 * sf_fs_user_leave, for what the walk found to be in that user's hands. Refused once the
 * sandbox runs (it kills a process that changes its ids; a reload then needs a restart).
 * 0 or -errno, logged as "WHAT: ..." for the forward `name`. */
int sf_safedir_as_user(const struct sf_safedir_policy *p, const char *name, const char *what);

/* Opens the directory holding the absolute path `path`, walking from / and checking every
 * directory and link on the way; with create, missing directories are made 0755 (mkdirat on
 * the checked parent; as the path's user where found->users). *base points at the last
 * component of path. found (may be NULL) says what was on the way. Failures are logged as
 * "WHAT: ..." for the forward `name` (may be NULL). Returns an O_PATH directory fd or -errno:
 * -EPERM when a directory or link on the way is not safe (a configuration error). */
int sf_safedir_open(const struct sf_safedir_policy *p, const char *path, bool create, const char *name,
                    const char *what, const char **base, struct sf_safedir_found *found);

/* Opens the file at the absolute path `path` with open(2)'s flags (O_NOFOLLOW and O_CLOEXEC
 * added), walking from / under the same rule: every directory on the way checked, every link
 * (the last component's too) followed only when the rule lets its owner decide. For files whose
 * place decides what they mean (a token file: whoever can change a directory on its path could
 * point the relay at another token). found (may be NULL) says what was on the way. Failures are
 * logged as "WHAT: ...", but for a missing file or directory (-ENOENT) and a file this process
 * may not open, which the caller explains: -EACCES with its lstat in *denied (denied may be
 * NULL; *denied is left alone when the -EACCES was logged here).
 * Returns the fd or -errno: -EPERM when a directory or link on the way is not safe. */
int sf_safedir_open_file(const struct sf_safedir_policy *p, const char *path, int flags, const char *name,
                         const char *what, struct sf_safedir_found *found, struct stat *denied);

/* Makes dirfd the working directory, for the calls that take a path only (bind, connect).
 * Returns the previous working directory as an fd for sf_safedir_leave, or -errno. Only for
 * start-up, while no other thread resolves relative paths. */
int sf_safedir_enter(int dirfd);
/* Returns to the working directory sf_safedir_enter saved and closes its fd. */
void sf_safedir_leave(int saved);
