#include "relay/listen/safedir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "conf/log.h"
#include "relay/listen/sockdir.h"
#include "relay/sys/platform.h"
#include "relay/sys/sandbox.h"

/* As the kernel's own limit on links followed in one lookup. */
#define MAX_LINKS 40

void sf_safedir_policy_init(struct sf_safedir_policy *p, bool user_set, uid_t user, gid_t gid) {
        *p = (struct sf_safedir_policy){ .user_set = user_set, .user = user, .gid = gid };
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

/* In a sticky directory only an entry's owner (and root) may rename or remove it, so others
 * can add their own names there but never take over ours; the directory itself must then be
 * root's, or its owner could still do anything in it. */
static bool writable_by_others(const struct stat *st) {
        return (st->st_mode & (S_IWGRP | S_IWOTH)) && !((st->st_mode & S_ISVTX) && st->st_uid == 0);
}

bool sf_safedir_dir_ok(const struct sf_safedir_policy *p, const struct stat *st) {
        return S_ISDIR(st->st_mode) && sf_safedir_owner_ok(p, st->st_uid) && !writable_by_others(st);
}

int sf_safedir_as_user(const struct sf_safedir_policy *p, const char *name, const char *what) {
        if (sf_sandbox_applied()) {
                sf_log(SF_LOG_ERROR, name, 0,
                       "%s: its directory is uid %u's, so it is made as that user, which the sandbox no longer "
                       "allows; restart the relay to make it (or set seccomp = no)",
                       what, (unsigned)p->user);
                return -ENOSYS;
        }
        if (sf_fs_user_enter(p->user, p->gid) < 0) {
                sf_log(SF_LOG_ERROR, name, 0,
                       "%s: its directory is uid %u's, so it is made as that user, and this process cannot act as "
                       "uid %u, gid %u (that needs root: CAP_SETUID and CAP_SETGID)",
                       what, (unsigned)p->user, (unsigned)p->user, (unsigned)p->gid);
                return -EPERM;
        }
        return 0;
}

struct walk {
        const struct sf_safedir_policy *p;
        const char *name, *what, *path;
        const char *place; /* a place that is safe for what the path is for: for messages */
        bool socket;       /* a socket's path (owner = decides who it is for): for messages */
        bool parent_shared; /* others may add names to the directory above the one reached */
        char where[PATH_MAX]; /* the directory reached so far, links resolved: for messages */
        struct sf_safedir_found found;
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
        char owner[96], mode[32] = "", fix[2 * PATH_MAX + 64], user[64] = "";
        bool link = S_ISLNK(st->st_mode), bad_owner = !sf_safedir_owner_ok(w->p, st->st_uid);
        bool writable = !link && writable_by_others(st);
        if (link) {
                snprintf(fix, sizeof fix, "chown -h root %s", path);
        } else {
                snprintf(mode, sizeof mode, " with mode %04o", (unsigned)(st->st_mode & 07777));
                if (bad_owner && writable)
                        snprintf(fix, sizeof fix, "chown root %s; chmod go-w %s", path, path);
                else
                        snprintf(fix, sizeof fix, "%s %s", bad_owner ? "chown root" : "chmod go-w", path);
        }
        /* A user's own directory is the place for a socket that is that user's. */
        if (w->socket && bad_owner && !writable && st->st_uid != 0)
                snprintf(user, sizeof user, ", set owner = %u if the socket is for that user",
                         (unsigned)st->st_uid);
        const char *who = bad_owner ? "its owner" : (st->st_mode & S_IWOTH) ? "any user" : "its group";
        sf_safedir_user_name(st->st_uid, owner, sizeof owner);
        sf_log(SF_LOG_ERROR, w->name, 0,
               "%s: the %s %s is owned by %s%s, so %s could change where the path leads; refusing to use "
               "it. Use a place only root or the relay's user can change (run %s%s, or pick a path under "
               "%s)",
               w->what, link ? "symbolic link" : "directory", path, owner, mode, who, fix, user, w->place);
        return -EPERM;
}

static int fail(const struct walk *w, const char *what, const char *path, int e) {
        sf_log(SF_LOG_ERROR, w->name, 0, "%s: %s %s: %s", w->what, what, path, strerror(e));
        return -e;
}

/* The directory at fd (w->where) does not let this process search it: says whose it is. */
static int fail_search(const struct walk *w, int fd, const char *path) {
        struct stat st;
        char owner[96];
        if (fstat(fd, &st) < 0)
                return fail(w, "cannot examine", path, EACCES);
        sf_safedir_user_name(st.st_uid, owner, sizeof owner);
        sf_log(SF_LOG_ERROR, w->name, 0,
               "%s: cannot examine %s: %s: the directory %s (owner %s, group %u, mode %04o) does not let uid %u "
               "(gid %u) search it; give that user search access (chmod o+x %s), or run as a user it admits",
               w->what, path, strerror(EACCES), w->where, owner, (unsigned)st.st_gid, (unsigned)(st.st_mode & 07777),
               (unsigned)geteuid(), (unsigned)getegid(), w->where);
        return -EACCES;
}

/* A missing directory this process may not make: a user that is not root has a place of its own. */
static int fail_mkdir(const struct walk *w, int e) {
        char own[PATH_MAX];
        if ((e != EACCES && e != EPERM && e != EROFS) || geteuid() == 0)
                return fail(w, "cannot create the directory", w->where, e);
        sf_sockdir_own(own, sizeof own, NULL, 0);
        sf_log(SF_LOG_ERROR, w->name, 0,
               "%s: cannot create the directory %s: %s: uid %u may not make it there. A user that is not root "
               "makes its sockets in a directory of its own: listen under %s (made for it; paths under "
               SF_SOCKDIR_DEFAULT " go there by themselves), or make %s in the image for uid %u (install -d -o %u "
               "%s)",
               w->what, w->where, strerror(e), (unsigned)geteuid(), own, w->where, (unsigned)geteuid(),
               (unsigned)geteuid(), w->where);
        return -e;
}

static bool read_only(int fd) {
        struct statvfs sv;
        return fstatvfs(fd, &sv) == 0 && (sv.f_flag & ST_RDONLY);
}

/* Whether others may add names to the directory at fd (a sticky one of root's passes the rule
 * with that): what is in it may have been put there by anyone. */
static bool others_add(int fd) {
        struct stat st;
        return fstat(fd, &st) == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) && !read_only(fd);
}

/* others_add() of the directory above the one at fd. */
static bool parent_shared(int fd) {
        int up = openat(fd, "..", SF_O_DIRPATH | O_DIRECTORY | O_CLOEXEC);
        bool shared = up < 0 || others_add(up);
        if (up >= 0)
                close(up);
        return shared;
}

/* Whether the directory or link st at path may decide where the path leads: fd is the directory
 * itself, or the one holding the link. Notes on the way what the caller needs to know. 0 or
 * -EPERM, logged. */
static int judge(struct walk *w, int fd, const char *path, const struct stat *st) {
        bool link = S_ISLNK(st->st_mode);
        if (sf_safedir_owner_ok(w->p, st->st_uid) && (link || !writable_by_others(st))) {
                if (st->st_uid != 0 && st->st_uid != geteuid())
                        w->found.users = true;
                return 0;
        }
        if (!w->p->any_owner)
                return refuse(w, path, st);
        /* Nobody here can change what is on a read-only mount, whoever owns it. */
        if (read_only(fd))
                return 0;
        /* Only a directory's owner (a trusted one, or the other owner) puts names in it, but
         * where others may add names too: there the owner of a link, or of a directory, is
         * whoever made it (nobody's /tmp/x is not the Mac user's home). */
        if (!link ? writable_by_others(st) || w->parent_shared : others_add(fd))
                return refuse(w, path, st);
        if (!w->found.other) {
                w->found.other = true;
                w->found.other_link = link;
                w->found.other_uid = st->st_uid;
                snprintf(w->found.other_path, sizeof w->found.other_path, "%s", path);
                return 0;
        }
        return w->found.other_uid == st->st_uid ? 0 : refuse(w, path, st);
}

/* The directory at fd is where `where` says; it must pass the policy. */
static int check_dir(struct walk *w, int fd) {
        struct stat st;
        if (fstat(fd, &st) < 0)
                return fail(w, "cannot examine the directory", w->where, errno);
        return judge(w, fd, w->where, &st);
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
        int r = judge(w, fd, link, st);
        if (r < 0)
                return r;
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
                                /* Made by the euid in a directory checked above, or as the path's
                                 * user below a directory that user could change; EEXIST means
                                 * someone was quicker, and the check below judges what is there. */
                                if (w->found.users && (r = sf_safedir_as_user(w->p, w->name, w->what)) < 0)
                                        break;
                                int made = mkdirat(fd, comp, 0755), e = errno;
                                if (w->found.users)
                                        sf_fs_user_leave();
                                if (made < 0 && e != EEXIST) {
                                        where_push(w, comp);
                                        r = fail_mkdir(w, e);
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
                                char entry[PATH_MAX];
                                snprintf(entry, sizeof entry, "%s%s%s", w->where, strlen(w->where) > 1 ? "/" : "", comp);
                                r = e == EACCES ? fail_search(w, fd, entry)
                                                : fail(w, e == ENOENT ? "there is no directory" : "cannot examine", entry, e);
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
                if (w->p->any_owner)
                        w->parent_shared = strcmp(comp, "..") != 0 ? others_add(fd) : parent_shared(nfd);
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
                    const char *what, const char **base, struct sf_safedir_found *found) {
        struct walk w = { .p = p, .name = name, .what = what, .path = path, .place = SF_SOCKDIR_DEFAULT, .socket = true };
        const char *slash = strrchr(path, '/');
        if (path[0] != '/' || !slash[1])
                return fail(&w, "not the absolute path of a file:", path, EINVAL);
        *base = slash + 1;

        char todo[PATH_MAX];
        if ((size_t)(slash - path) >= sizeof todo)
                return fail(&w, "the path is too long:", path, ENAMETOOLONG);
        memcpy(todo, path, (size_t)(slash - path));
        todo[slash - path] = '\0';
        int fd = walk(&w, todo, sizeof todo, create, NULL, 0);
        if (found)
                *found = w.found;
        return fd;
}

int sf_safedir_open_file(const struct sf_safedir_policy *p, const char *path, int flags, const char *name,
                         const char *what, struct sf_safedir_found *found, struct stat *denied) {
        struct walk w = { .p = p, .name = name, .what = what, .path = path, .place = "/etc/sockferry" };
        char todo[PATH_MAX], leaf[NAME_MAX + 1];
        if (path[0] != '/')
                return fail(&w, "not an absolute path:", path, EINVAL);
        if ((size_t)snprintf(todo, sizeof todo, "%s", path) >= sizeof todo)
                return fail(&w, "the path is too long:", path, ENAMETOOLONG);
        int dirfd = walk(&w, todo, sizeof todo, false, leaf, sizeof leaf);
        if (dirfd >= 0 && p->any_owner)
                w.found.shared_dir = others_add(dirfd);
        if (found)
                *found = w.found;
        if (dirfd < 0)
                return dirfd;
        /* The directory passed the policy: only an owner it lets decide can put a link here now
         * (which O_NOFOLLOW refuses, ELOOP). */
        int fd = openat(dirfd, leaf, flags | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        bool explained = fd < 0 && e == EACCES && denied && fstatat(dirfd, leaf, denied, AT_SYMLINK_NOFOLLOW) == 0;
        close(dirfd);
        if (fd < 0 && e != ENOENT && !explained)
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
