#include "relay/listen/safedir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "conf/log.h"
#include "relay/sys/platform.h"

/* As the kernel's own limit on links followed in one lookup. */
#define MAX_LINKS 40

void sf_safedir_policy_init(struct sf_safedir_policy *p, bool user_set, uid_t user) {
        p->n_trusted = 0;
        p->trusted[p->n_trusted++] = geteuid();
        if (user_set)
                p->trusted[p->n_trusted++] = user;
}

bool sf_safedir_owner_ok(const struct sf_safedir_policy *p, uid_t uid) {
        if (uid == 0)
                return true;
        for (size_t i = 0; i < p->n_trusted; i++)
                if (p->trusted[i] == uid)
                        return true;
        return false;
}

bool sf_safedir_dir_ok(const struct sf_safedir_policy *p, const struct stat *st) {
        if (!S_ISDIR(st->st_mode) || !sf_safedir_owner_ok(p, st->st_uid))
                return false;
        /* In a sticky directory only an entry's owner (and root) may rename or remove it, so
         * others can add their own names there but never take over ours; the directory itself
         * must then be root's, or its owner could still do anything in it. */
        if (st->st_mode & (S_IWGRP | S_IWOTH))
                return (st->st_mode & S_ISVTX) && st->st_uid == 0;
        return true;
}

struct walk {
        const struct sf_safedir_policy *p;
        const char *name, *what, *path;
        const char *place; /* a place that is safe for what the path is for: for messages */
        char where[PATH_MAX]; /* the directory reached so far, links resolved: for messages */
};

const char *sf_safedir_user_name(uid_t uid, char *buf, size_t size) {
        struct passwd *pw = getpwuid(uid);
        if (pw)
                snprintf(buf, size, "%s (uid %u)", pw->pw_name, (unsigned)uid);
        else
                snprintf(buf, size, "uid %u", (unsigned)uid);
        return buf;
}

static int refuse(const struct walk *w, const char *path, const struct stat *st) {
        char owner[96], mode[32] = "", fix[2 * PATH_MAX + 64];
        bool link = S_ISLNK(st->st_mode), bad_owner = !sf_safedir_owner_ok(w->p, st->st_uid);
        bool writable = (st->st_mode & (S_IWGRP | S_IWOTH)) && !((st->st_mode & S_ISVTX) && st->st_uid == 0);
        if (link) {
                snprintf(fix, sizeof fix, "chown -h root %s", path);
        } else {
                snprintf(mode, sizeof mode, " with mode %04o", (unsigned)(st->st_mode & 07777));
                if (bad_owner && writable)
                        snprintf(fix, sizeof fix, "chown root %s; chmod go-w %s", path, path);
                else
                        snprintf(fix, sizeof fix, "%s %s", bad_owner ? "chown root" : "chmod go-w", path);
        }
        const char *who = bad_owner ? "its owner" : (st->st_mode & S_IWOTH) ? "any user" : "its group";
        sf_safedir_user_name(st->st_uid, owner, sizeof owner);
        sf_log(SF_LOG_ERROR, w->name, 0,
               "%s: the %s %s is owned by %s%s, so %s could change where the path leads; refusing to use "
               "it. Use a place only root or the relay's user can change (run %s, or pick a path under "
               "%s)",
               w->what, link ? "symbolic link" : "directory", path, owner, mode, who, fix, w->place);
        return -EPERM;
}

static int fail(const struct walk *w, const char *what, const char *path, int e) {
        sf_log(SF_LOG_ERROR, w->name, 0, "%s: %s %s: %s", w->what, what, path, strerror(e));
        return -e;
}

/* The directory at fd is where `where` says; it must pass the policy. */
static int check_dir(const struct walk *w, int fd) {
        struct stat st;
        if (fstat(fd, &st) < 0)
                return fail(w, "cannot examine the directory", w->where, errno);
        if (!sf_safedir_dir_ok(w->p, &st))
                return refuse(w, w->where, &st);
        return 0;
}

/* The socket's own directory is a volume mounted for it (a Kubernetes emptyDir shared by a
 * sidecar and its app, a directory bind-mounted into a container): such a mount is 0777, root's
 * and not sticky, and nobody can mount it otherwise. When the relay's user owns it, it is the
 * relay's to close: write access for group and others goes (0777 -> 0755) before anything is
 * examined or bound in it, so nobody else can rename or replace what the relay puts there;
 * clients keep connecting (search and the socket's own mode suffice). Only with apply (the
 * test mode changes nothing: it says what would be done, and true, so that the directory
 * passes as it will). */
static bool tighten_volume(const struct walk *w, int fd, bool apply) {
        struct stat st;
        if (fstat(fd, &st) < 0 || sf_safedir_dir_ok(w->p, &st) || st.st_uid != geteuid() ||
            (st.st_mode & S_ISVTX) || !sf_mount_point(w->where))
                return false;
        mode_t mode = st.st_mode & 07777 & ~(mode_t)(S_IWGRP | S_IWOTH);
        if (!apply) {
                sf_log(SF_LOG_WARN, w->name, 0, "%s: %s is a volume with mode %04o; the relay will make it %04o",
                       w->what, w->where, (unsigned)(st.st_mode & 07777), (unsigned)mode);
                return true;
        }
        int rfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (rfd < 0 || fchmod(rfd, mode) < 0) {
                sf_log(SF_LOG_WARN, w->name, 0, "%s: cannot take write access to %s from others: %s", w->what,
                       w->where, strerror(errno));
        } else {
                sf_log(SF_LOG_WARN, w->name, 0,
                       "%s: %s is a volume mounted with mode %04o: made it %04o so that only its owner can change "
                       "what is in it",
                       w->what, w->where, (unsigned)(st.st_mode & 07777), (unsigned)mode);
        }
        if (rfd >= 0)
                close(rfd);
        return false;
}

static void where_push(struct walk *w, const char *comp) {
        size_t n = strlen(w->where);
        snprintf(w->where + n, sizeof w->where - n, "%s%s", n > 1 ? "/" : "", comp);
}

static void where_pop(struct walk *w) {
        char *slash = strrchr(w->where, '/');
        if (slash)
                slash[slash == w->where ? 1 : 0] = '\0';
}

static int open_root(struct walk *w) {
        snprintf(w->where, sizeof w->where, "/");
        int fd = open("/", SF_O_DIRPATH | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return fail(w, "cannot open the directory", "/", errno);
        int r = check_dir(w, fd);
        if (r < 0) {
                close(fd);
                return r;
        }
        return fd;
}

/* Replaces the component at todo[comp..rest) with the link's target: the rest of the walk
 * continues there. */
static int follow(struct walk *w, int fd, const char *comp, const struct stat *st, char *todo, size_t size,
                  const char *rest) {
        char target[PATH_MAX], link[PATH_MAX], tail[PATH_MAX];
        snprintf(link, sizeof link, "%s%s%s", w->where, strlen(w->where) > 1 ? "/" : "", comp);
        if (!sf_safedir_owner_ok(w->p, st->st_uid))
                return refuse(w, link, st);
        ssize_t n = readlinkat(fd, comp, target, sizeof target - 1);
        if (n < 0)
                return fail(w, "cannot read the link", link, errno);
        target[n] = '\0';
        snprintf(tail, sizeof tail, "%s", rest);
        if ((size_t)snprintf(todo, size, "%s/%s", target, tail) >= size)
                return fail(w, "the path through the link is too long:", link, ENAMETOOLONG);
        return 0;
}

/* Walks todo (a path; modified) from /, checking every directory and link on the way. Without
 * leaf, todo names a directory, made when missing with create, and its fd is returned. With
 * leaf, the last component names a file: a link there is followed as one on the way is, and the
 * directory holding what it leads to is returned, its name in leaf (leaf_cap bytes); a missing
 * component is -ENOENT, not logged. O_PATH fd or -errno. */
static int walk(struct walk *w, char *todo, size_t todo_cap, bool create, char *leaf, size_t leaf_cap) {
        int fd = open_root(w), links = 0, r = 0;
        char *s = todo;
        while (fd >= 0) {
                while (*s == '/')
                        s++;
                if (!*s) {
                        if (!leaf)
                                return fd;
                        r = fail(w, "the path leads to a directory, not a file:", w->where, EISDIR);
                        break;
                }
                char *comp = s;
                s += strcspn(s, "/");
                if (*s)
                        *s++ = '\0';
                bool last = !s[strspn(s, "/")];
                if (strcmp(comp, ".") == 0)
                        continue;

                struct stat st;
                int nfd;
                if (strcmp(comp, "..") == 0) {
                        nfd = openat(fd, "..", SF_O_DIRPATH | O_DIRECTORY | O_CLOEXEC);
                        if (nfd < 0) {
                                r = fail(w, "cannot open the parent of", w->where, errno);
                                break;
                        }
                        where_pop(w);
                } else {
                        int sr = fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW);
                        if (sr < 0 && errno == ENOENT && create) {
                                /* Made by the euid in a directory checked above; EEXIST means
                                 * someone was quicker, and the check below judges what is there. */
                                if (mkdirat(fd, comp, 0755) < 0 && errno != EEXIST) {
                                        int e = errno;
                                        where_push(w, comp);
                                        r = fail(w, "cannot create the directory", w->where, e);
                                        break;
                                }
                                sr = fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW);
                        }
                        if (sr < 0 && errno == ENOENT && leaf) {
                                r = -ENOENT;
                                break;
                        }
                        if (sr < 0) {
                                int e = errno;
                                where_push(w, comp);
                                r = fail(w, e == ENOENT ? "there is no directory" : "cannot examine", w->where, e);
                                break;
                        }
                        if (S_ISLNK(st.st_mode)) {
                                if (++links > MAX_LINKS) {
                                        r = fail(w, "too many symbolic links on the way to", w->path, ELOOP);
                                        break;
                                }
                                if ((r = follow(w, fd, comp, &st, todo, todo_cap, s)) < 0)
                                        break;
                                s = todo;
                                if (todo[0] == '/') {
                                        close(fd);
                                        fd = open_root(w);
                                }
                                continue;
                        }
                        if (leaf && last) {
                                if ((size_t)snprintf(leaf, leaf_cap, "%s", comp) >= leaf_cap) {
                                        r = fail(w, "the name is too long:", comp, ENAMETOOLONG);
                                        break;
                                }
                                return fd;
                        }
                        nfd = openat(fd, comp, SF_O_DIRPATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        where_push(w, comp);
                        if (nfd < 0) {
                                if (leaf && errno == ENOENT) {
                                        r = -ENOENT;
                                        break;
                                }
                                r = fail(w, "cannot open the directory", w->where, errno);
                                break;
                        }
                }
                close(fd);
                fd = nfd;
                while (*s == '/')
                        s++;
                bool will_be_safe = !*s && !leaf && tighten_volume(w, fd, create);
                if (!will_be_safe && (r = check_dir(w, fd)) < 0)
                        break;
        }
        if (fd >= 0)
                close(fd);
        return fd < 0 ? fd : r;
}

int sf_safedir_open(const struct sf_safedir_policy *p, const char *path, bool create, const char *name,
                    const char *what, const char **base) {
        struct walk w = { .p = p, .name = name, .what = what, .path = path, .place = "/run/sockferry" };
        const char *slash = strrchr(path, '/');
        if (path[0] != '/' || !slash[1])
                return fail(&w, "not the absolute path of a file:", path, EINVAL);
        *base = slash + 1;

        char todo[PATH_MAX];
        if ((size_t)(slash - path) >= sizeof todo)
                return fail(&w, "the path is too long:", path, ENAMETOOLONG);
        memcpy(todo, path, (size_t)(slash - path));
        todo[slash - path] = '\0';
        return walk(&w, todo, sizeof todo, create, NULL, 0);
}

int sf_safedir_open_file(const struct sf_safedir_policy *p, const char *path, int flags, const char *name,
                         const char *what) {
        struct walk w = { .p = p, .name = name, .what = what, .path = path, .place = "/etc/sockferry" };
        char todo[PATH_MAX], leaf[NAME_MAX + 1];
        if (path[0] != '/')
                return fail(&w, "not an absolute path:", path, EINVAL);
        if ((size_t)snprintf(todo, sizeof todo, "%s", path) >= sizeof todo)
                return fail(&w, "the path is too long:", path, ENAMETOOLONG);
        int dirfd = walk(&w, todo, sizeof todo, false, leaf, sizeof leaf);
        if (dirfd < 0)
                return dirfd;
        /* The directory passed the policy: only root or a trusted user can put a link here now
         * (which O_NOFOLLOW refuses, ELOOP). */
        int fd = openat(dirfd, leaf, flags | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close(dirfd);
        if (fd < 0 && e != ENOENT)
                return fail(&w, "cannot open", path, e);
        return fd < 0 ? -e : fd;
}

int sf_safedir_enter(int dirfd) {
        int saved = open(".", SF_O_DIRPATH | O_DIRECTORY | O_CLOEXEC);
        if (saved < 0)
                return -errno;
        if (fchdir(dirfd) < 0) {
                int e = errno;
                close(saved);
                return -e;
        }
        return saved;
}

void sf_safedir_leave(int saved) {
        /* It was the working directory a moment ago; only a permission taken away since then
         * keeps it from being entered again. */
        if (fchdir(saved) < 0)
                sf_log_warn("cannot return to the previous working directory: %s", strerror(errno));
        close(saved);
}
