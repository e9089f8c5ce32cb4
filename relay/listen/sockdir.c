#include "relay/listen/sockdir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/log.h"
#include "relay/listen/safedir.h"

#define DEFAULT_LEN (sizeof SF_SOCKDIR_DEFAULT - 1)

const char *sf_sockdir_own(char *buf, size_t cap, char *why, size_t why_cap) {
        uid_t me = geteuid();
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        char reason[PATH_MAX + 128] = "";
        struct stat st;
        if (!xdg || !*xdg)
                snprintf(reason, sizeof reason, "XDG_RUNTIME_DIR is not set");
        else if (xdg[0] != '/')
                snprintf(reason, sizeof reason, "XDG_RUNTIME_DIR=%s is not an absolute path", xdg);
        else if (stat(xdg, &st) < 0)
                snprintf(reason, sizeof reason, "XDG_RUNTIME_DIR=%s: %s", xdg, strerror(errno));
        else if (!S_ISDIR(st.st_mode) || st.st_uid != me || (st.st_mode & 077))
                snprintf(reason, sizeof reason,
                         "XDG_RUNTIME_DIR=%s is not a directory of uid %u with mode 0700 (uid %u, mode %04o)", xdg,
                         (unsigned)me, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
        if (why)
                snprintf(why, why_cap, "%s", reason);
        if (reason[0] || (size_t)snprintf(buf, cap, "%s/sockferry", xdg) >= cap)
                snprintf(buf, cap, "/tmp/sockferry-%u", (unsigned)me);
        return buf;
}

/* Whether this process can create files in the directory of path, or make it: the deepest
 * directory of it that exists lets the effective user write and search. *blocked: that
 * directory when it does not; *err why. */
static bool can_make(const char *path, char *blocked, size_t cap, int *err) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", path);
        for (char *slash = strrchr(dir, '/'); slash; slash = strrchr(dir, '/')) {
                *slash = '\0';
                const char *d = dir[0] ? dir : "/";
                if (faccessat(AT_FDCWD, d, W_OK | X_OK, AT_EACCESS) == 0)
                        return true;
                if (errno != ENOENT) {
                        *err = errno;
                        snprintf(blocked, cap, "%s", d);
                        return false;
                }
        }
        return true;
}

/* The own directory must be this user's, made by it: a directory (not a link), its owner the
 * effective uid, writable by nobody else. Made 0700 with create. 0 or -errno, logged. */
static int own_dir_check(const char *dir, bool create) {
        if (create && mkdir(dir, 0700) == 0)
                return 0;
        if (create && errno != EEXIST) {
                int e = errno;
                sf_log_error("cannot make the socket directory %s: %s", dir, strerror(e));
                return -e;
        }
        struct stat st;
        if (lstat(dir, &st) < 0)
                return errno == ENOENT && !create ? 0 : -errno;
        if (S_ISDIR(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & (S_IWGRP | S_IWOTH)))
                return 0;
        char owner[96];
        sf_safedir_user_name(st.st_uid, owner, sizeof owner);
        sf_log_error("the socket directory %s exists and is not this user's own (%s owned by %s, mode %04o): "
                     "someone else may have made it to catch the sockets; remove it as root (rm -r %s), or set "
                     "XDG_RUNTIME_DIR to a directory of your own with mode 0700",
                     dir, S_ISDIR(st.st_mode) ? "a directory" : S_ISLNK(st.st_mode) ? "a symbolic link" : "a file",
                     owner, (unsigned)(st.st_mode & 07777), dir);
        return -EPERM;
}

/* ep's path, under the default directory, moved to own. */
static int move(struct sf_endpoint *ep, const char *own) {
        char path[sizeof ep->path];
        const char *rest = ep->path + DEFAULT_LEN;
        if ((size_t)snprintf(path, sizeof path, "%s%s", own, rest) >= sizeof path) {
                sf_log_error("%s: in %s the path %s%s would be longer than a unix socket path may be (%zu bytes); "
                             "give a shorter listen path, or set XDG_RUNTIME_DIR to a shorter directory",
                             ep->text, own, own, rest, sizeof path - 1);
                return -ENAMETOOLONG;
        }
        memcpy(ep->path, path, sizeof path);
        snprintf(ep->text, sizeof ep->text, "unix:%s", path);
        return 0;
}

static bool in_default(const struct sf_endpoint *ep) {
        return ep->kind == SF_EP_UNIX && strncmp(ep->path, SF_SOCKDIR_DEFAULT "/", DEFAULT_LEN + 1) == 0;
}

/* The i-th endpoint that may be in the default directory: the listen endpoints, then control. */
static struct sf_endpoint *endpoint(struct sf_conf *c, size_t i) {
        if (i < c->n_forwards)
                return &c->forwards[i].listen;
        return c->control_set ? &c->control : NULL;
}

int sf_sockdir_apply(struct sf_conf *c, enum sf_sockdir_use use) {
        if (geteuid() == 0)
                return 0;
        char blocked[PATH_MAX] = "", where[PATH_MAX];
        int err = 0, e;
        bool any = false;
        for (size_t i = 0; i <= c->n_forwards && !any; i++) {
                struct sf_endpoint *ep = endpoint(c, i);
                any = ep && in_default(ep) && !can_make(ep->path, blocked, sizeof blocked, &err);
        }
        if (!any)
                return 0;

        char own[PATH_MAX], why[PATH_MAX + 128];
        sf_sockdir_own(own, sizeof own, why, sizeof why);
        int r = own_dir_check(own, use == SF_SOCKDIR_BIND);
        for (size_t i = 0; r == 0 && i <= c->n_forwards; i++) {
                struct sf_endpoint *ep = endpoint(c, i);
                if (ep && in_default(ep) && !can_make(ep->path, where, sizeof where, &e))
                        r = move(ep, own);
        }
        if (r < 0)
                return r;
        sf_log(use == SF_SOCKDIR_FIND ? SF_LOG_DEBUG : SF_LOG_WARN, NULL, 0,
               "uid %u may not create files in %s (%s), so the sockets configured under " SF_SOCKDIR_DEFAULT
               " %s made in %s instead%s%s%s; give listen paths there, or start as root, to choose the place",
               (unsigned)geteuid(), blocked, strerror(err), use == SF_SOCKDIR_BIND ? "are" : "would be", own,
               why[0] ? " (" : "", why, why[0] ? ")" : "");
        return 0;
}
