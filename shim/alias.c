#include "shim/alias.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "relay/sockpath.h"

static bool same_file(const char *a, const char *b) {
        struct stat sa, sb;
        return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* mkdir -p of the alias's directory, 0755 like a listen path's. */
static int make_parents(const char *path) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", path);
        for (char *p = dir + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = '\0';
                if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                        return -errno;
                *p = '/';
        }
        return 0;
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

static enum sf_alias_result create_link(const struct sf_forward *f) {
        int r = make_parents(f->alias);
        if (r < 0)
                return link_failed(f, "cannot create its directory", -r);
        if (symlink(f->listen.path, f->alias) < 0)
                return link_failed(f, "cannot create the link", errno);
        return linked(f, "was missing");
}

static enum sf_alias_result replace_dir(const struct sf_forward *f) {
        if (rmdir(f->alias) < 0) {
                /* A bind mount the mount-point check could not see (no statx attribute and a
                 * mount table we cannot read) still refuses rmdir(). */
                if (errno == EBUSY)
                        return mount_point(f);
                return link_failed(f, "cannot remove the empty directory", errno);
        }
        if (symlink(f->listen.path, f->alias) < 0)
                return link_failed(f, "cannot create the link", errno);
        return linked(f, "was an empty directory");
}

/* The stale socket is swapped for the link in one rename(), so a client never finds the path
 * missing. */
static enum sf_alias_result replace_socket(const struct sf_forward *f) {
        if (sf_sockpath_is_mount_point(f->alias)) {
                sf_log(SF_LOG_WARN, f->name, 0, "alias %s: a bind-mounted socket nothing accepts on; left alone, clients there are redirected by the preload library",
                       f->alias);
                return SF_ALIAS_MOUNT_POINT;
        }
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof tmp, "%s.sockferry-%ld", f->alias, (long)getpid());
        unlink(tmp);
        if (symlink(f->listen.path, tmp) < 0)
                return link_failed(f, "cannot create the link", errno);
        if (rename(tmp, f->alias) < 0) {
                int err = errno;
                unlink(tmp);
                return link_failed(f, "cannot replace the stale socket", err);
        }
        return linked(f, "was a stale socket");
}

static enum sf_alias_result check_link(const struct sf_forward *f) {
        char target[PATH_MAX];
        ssize_t n = readlink(f->alias, target, sizeof target - 1);
        target[n >= 0 ? n : 0] = '\0';
        if (strcmp(target, f->listen.path) == 0 || same_file(f->alias, f->listen.path)) {
                sf_log(SF_LOG_INFO, f->name, 0, "alias %s: already a link to %s", f->alias, f->listen.path);
                return SF_ALIAS_LINKED;
        }
        sf_log(SF_LOG_WARN, f->name, 0, "alias %s: a link to %s, not to the listen socket; left alone", f->alias,
               target);
        return SF_ALIAS_LEFT;
}

enum sf_alias_result sf_alias_apply(const struct sf_forward *f) {
        if (f->listen.kind != SF_EP_UNIX) {
                sf_log(SF_LOG_INFO, f->name, 0, "alias %s: listen endpoint %s is not a path to link to; clients there are redirected by the preload library",
                       f->alias, f->listen.text);
                return SF_ALIAS_NOT_A_PATH;
        }
        struct stat st;
        if (lstat(f->alias, &st) == 0 && S_ISLNK(st.st_mode))
                return check_link(f);
        if (same_file(f->alias, f->listen.path))
                return SF_ALIAS_IS_LISTEN;

        switch (sf_sockpath_probe(f->alias)) {
        case SF_PATH_MISSING:
                return create_link(f);
        case SF_PATH_LIVE_SOCKET:
                sf_log(SF_LOG_INFO, f->name, 0, "alias %s: a live socket (the bind mount worked); left alone, clients use it directly",
                       f->alias);
                return SF_ALIAS_LIVE_SOCKET;
        case SF_PATH_STALE_SOCKET:
                return replace_socket(f);
        case SF_PATH_EMPTY_DIR:
                return replace_dir(f);
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

bool sf_alias_needs_preload(enum sf_alias_result r) {
        return r == SF_ALIAS_MOUNT_POINT || r == SF_ALIAS_NOT_A_PATH || r == SF_ALIAS_FAILED;
}
