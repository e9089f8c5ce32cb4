#include "shim/alias.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "relay/listen/listener.h"
#include "relay/listen/safedir.h"
#include "relay/listen/sockpath.h"

/* The alias's directory, pinned and checked (relay/listen/safedir.h), and its last component: every
 * change goes through the fd, while the working directory is that directory (the probe's
 * connect() and the mount-point check take a path). */
struct at {
        int dirfd;
        const char *base;
};

static bool same_file(const struct at *a, const char *other) {
        struct stat sa, sb;
        return fstatat(a->dirfd, a->base, &sa, 0) == 0 && stat(other, &sb) == 0 && sa.st_dev == sb.st_dev &&
               sa.st_ino == sb.st_ino;
}

static enum sf_alias_result link_failed(const struct sf_forward *f, const char *what, int err) {
        sf_log(SF_LOG_WARN, f->name, 0, "alias %s: %s: %s; clients there depend on the preload library", f->alias, what,
               strerror(err));
        return SF_ALIAS_FAILED;
}

static enum sf_alias_result linked(const struct sf_forward *f, const char *was) {
        sf_log(SF_LOG_INFO, f->name, 0, "alias %s: %s, now a link to %s", f->alias, was, f->listen.path);
        return SF_ALIAS_LINKED;
}

static enum sf_alias_result mount_point(const struct sf_forward *f) {
        sf_log(SF_LOG_INFO, f->name, 0, "alias %s: a mount point (the host socket's bind mount did not carry it); left alone, clients there are redirected by the preload library",
               f->alias);
        return SF_ALIAS_MOUNT_POINT;
}

/* Something appeared at the path after it was examined (a sticky directory lets others create
 * names in it): it is examined again (sf_alias_apply). */
#define RACED ((enum sf_alias_result)-1)
#define RACE_TRIES 3

static enum sf_alias_result create_link(const struct sf_forward *f, const struct at *a) {
        if (symlinkat(f->listen.path, a->dirfd, a->base) < 0)
                return errno == EEXIST ? RACED : link_failed(f, "cannot create the link", errno);
        return linked(f, "was missing");
}

static enum sf_alias_result replace_dir(const struct sf_forward *f, const struct at *a) {
        if (unlinkat(a->dirfd, a->base, AT_REMOVEDIR) < 0) {
                /* A bind mount the mount-point check could not see (no statx attribute and a
                 * mount table we cannot read) still refuses rmdir(). */
                if (errno == EBUSY)
                        return mount_point(f);
                return link_failed(f, "cannot remove the empty directory", errno);
        }
        if (symlinkat(f->listen.path, a->dirfd, a->base) < 0)
                return errno == EEXIST ? RACED : link_failed(f, "cannot create the link", errno);
        return linked(f, "was an empty directory");
}

/* Puts the link where base is in one rename(), so a client never finds the path missing nor
 * what was there. 0 or -errno (not logged). */
static int swap_in_link(const struct sf_forward *f, const struct at *a) {
        char tmp[NAME_MAX + 1];
        snprintf(tmp, sizeof tmp, ".%.200s.sockferry-%ld", a->base, (long)getpid());
        unlinkat(a->dirfd, tmp, 0);
        if (symlinkat(f->listen.path, a->dirfd, tmp) < 0)
                return -errno;
        if (renameat(a->dirfd, tmp, a->dirfd, a->base) < 0) {
                int err = errno;
                unlinkat(a->dirfd, tmp, 0);
                return -err;
        }
        return 0;
}

static enum sf_alias_result replace_socket(const struct sf_forward *f, const struct at *a) {
        if (sf_sockpath_is_mount_point(a->base)) {
                sf_log(SF_LOG_WARN, f->name, 0, "alias %s: a bind-mounted socket nothing accepts on; left alone, clients there are redirected by the preload library",
                       f->alias);
                return SF_ALIAS_MOUNT_POINT;
        }
        int r = swap_in_link(f, a);
        if (r < 0)
                return link_failed(f, "cannot replace the stale socket", -r);
        return linked(f, "was a stale socket");
}

/* Whether what is at the path is someone else's way in: a socket or a link whose owner the
 * policy does not trust (in a sticky directory such as /tmp anyone may put one there), where
 * clients of the alias would reach whoever made it. A bind-mounted socket is not: nobody but
 * the container's engine can put a mount there, and the host decides who owns the socket. */
static bool is_foreign(const struct sf_safedir_policy *trust, const struct stat *st, const char *base) {
        if (sf_safedir_owner_ok(trust, st->st_uid))
                return false;
        return S_ISLNK(st->st_mode) || (S_ISSOCK(st->st_mode) && !sf_sockpath_is_mount_point(base));
}

/* A foreign socket or link is never used: the link to the listen socket replaces it (in a
 * sticky directory only root may replace another user's entry); where that is not possible
 * run must not start, since its clients would talk to that user. */
static enum sf_alias_result replace_foreign(const struct sf_forward *f, const struct at *a, const struct stat *st) {
        char owner[96];
        const char *what = S_ISLNK(st->st_mode) ? "symbolic link" : "socket";
        sf_safedir_user_name(st->st_uid, owner, sizeof owner);
        int r = swap_in_link(f, a);
        if (r < 0) {
                sf_log(SF_LOG_ERROR, f->name, 0,
                       "alias %s: a %s owned by %s is at the path and cannot be replaced (%s); clients there would "
                       "reach that user's process, so nothing is started. Remove it (rm %s), or put the alias "
                       "where only root and the relay's user can create files",
                       f->alias, what, owner, strerror(-r), f->alias);
                return SF_ALIAS_FOREIGN;
        }
        sf_log(SF_LOG_WARN, f->name, 0,
               "alias %s: a %s owned by %s was at the path, a user the relay does not trust; replaced by a link to "
               "%s, so clients never reach it",
               f->alias, what, owner, f->listen.path);
        return SF_ALIAS_LINKED;
}

static enum sf_alias_result check_link(const struct sf_forward *f, const struct at *a) {
        char target[PATH_MAX];
        ssize_t n = readlinkat(a->dirfd, a->base, target, sizeof target - 1);
        target[n >= 0 ? n : 0] = '\0';
        if (strcmp(target, f->listen.path) == 0 || same_file(a, f->listen.path)) {
                sf_log(SF_LOG_INFO, f->name, 0, "alias %s: already a link to %s", f->alias, f->listen.path);
                return SF_ALIAS_LINKED;
        }
        sf_log(SF_LOG_WARN, f->name, 0, "alias %s: a link to %s, not to the listen socket; left alone", f->alias,
               target);
        return SF_ALIAS_LEFT;
}

static enum sf_alias_result apply_at(const struct sf_forward *f, const struct sf_safedir_policy *trust,
                                     const struct at *a) {
        struct stat st;
        bool there = fstatat(a->dirfd, a->base, &st, AT_SYMLINK_NOFOLLOW) == 0;
        if (there && is_foreign(trust, &st, a->base))
                return replace_foreign(f, a, &st);
        if (there && S_ISLNK(st.st_mode))
                return check_link(f, a);
        if (same_file(a, f->listen.path))
                return SF_ALIAS_IS_LISTEN;

        switch (sf_sockpath_probe_settled(a->base)) {
        case SF_PATH_MISSING:
                return create_link(f, a);
        case SF_PATH_LIVE_SOCKET:
                sf_log(SF_LOG_INFO, f->name, 0, "alias %s: a live socket (the bind mount worked); left alone, clients use it directly",
                       f->alias);
                return SF_ALIAS_LIVE_SOCKET;
        case SF_PATH_STALE_SOCKET:
                return replace_socket(f, a);
        case SF_PATH_EMPTY_DIR:
                return replace_dir(f, a);
        case SF_PATH_MOUNT_DIR:
                return mount_point(f);
        case SF_PATH_DIR:
                sf_log(SF_LOG_WARN, f->name, 0, "alias %s: a directory that is not empty; left alone", f->alias);
                return SF_ALIAS_LEFT;
        case SF_PATH_REGULAR:
        case SF_PATH_OTHER:
                sf_log(SF_LOG_WARN, f->name, 0, "alias %s: not a socket, a directory or a link; left alone", f->alias);
                return SF_ALIAS_LEFT;
        case SF_PATH_ERROR:
                break;
        }
        return link_failed(f, "cannot look at the path", errno);
}

enum sf_alias_result sf_alias_apply(const struct sf_forward *f, const struct sf_conf *c) {
        if (f->listen.kind != SF_EP_UNIX) {
                sf_log(SF_LOG_INFO, f->name, 0, "alias %s: listen endpoint %s is not a path to link to; clients there are redirected by the preload library",
                       f->alias, f->listen.text);
                return SF_ALIAS_NOT_A_PATH;
        }
        struct sf_safedir_policy trust;
        struct at a;
        char what[SF_UNIX_PATH_MAX + 8];
        sf_listener_policy(f, c, &trust);
        snprintf(what, sizeof what, "alias %s", f->alias);
        /* Its directory is made 0755 like a listen path's. */
        a.dirfd = sf_safedir_open(&trust, f->alias, true, f->name, what, &a.base, NULL);
        if (a.dirfd == -EPERM)
                return SF_ALIAS_UNSAFE;
        if (a.dirfd < 0)
                return link_failed(f, "cannot open its directory", -a.dirfd);
        int cwd = sf_safedir_enter(a.dirfd);
        enum sf_alias_result r = cwd < 0 ? link_failed(f, "cannot enter its directory", -cwd) : RACED;
        for (int tries = 0; r == RACED && tries < RACE_TRIES; tries++)
                r = apply_at(f, &trust, &a);
        if (r == RACED) {
                sf_log(SF_LOG_ERROR, f->name, 0,
                       "alias %s: something else kept creating the path while it was examined (%d times); nothing "
                       "is started. Find out what else manages it, or put the alias where only root and the "
                       "relay's user can create files",
                       f->alias, RACE_TRIES);
                r = SF_ALIAS_FOREIGN;
        }
        if (cwd >= 0)
                sf_safedir_leave(cwd);
        close(a.dirfd);
        return r;
}

bool sf_alias_needs_preload(enum sf_alias_result r) {
        return r == SF_ALIAS_MOUNT_POINT || r == SF_ALIAS_NOT_A_PATH || r == SF_ALIAS_FAILED;
}
