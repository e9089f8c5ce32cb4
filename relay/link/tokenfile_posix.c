/* Token files on Linux, macOS and the BSDs: the mode decides who can read the token, and the
 * file's owner with the owners of the directories on its path who can change it
 * (relay/link/tokenfile.h). */
#include "relay/link/tokenfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/conf.h"
#include "conf/log.h"
#include "relay/link/token.h"
#include "relay/listen/safedir.h"

const char sf_token_protection[] = "mode 0600";

#define KEYGEN_HINT SF_TOKENFILE_KEYGEN_HINT
/* A secret mounted by Docker or Kubernetes cannot be chmod-ed in place: its mode is set where
 * the secret is declared. */
#define SECRET_HINT                                                                                   \
        " (a secret: Compose mounts a file secret with the host file's mode, so chmod 600 it there; " \
        "Swarm: mode: 0400 in the long secrets: syntax; Kubernetes: defaultMode: 0400)"

static const char *file_type_name(mode_t m) {
        if (S_ISDIR(m))
                return "a directory";
        if (S_ISFIFO(m))
                return "a FIFO";
        if (S_ISSOCK(m))
                return "a socket";
        if (S_ISCHR(m))
                return "a character device";
        if (S_ISBLK(m))
                return "a block device";
        return "not a regular file";
}

/* Reads at most cap bytes; *n is how many. */
static int read_all(int fd, char *buf, size_t cap, size_t *n) {
        size_t got = 0;
        while (got < cap) {
                ssize_t r = read(fd, buf + got, cap - got);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return -errno;
                if (r == 0)
                        break;
                got += (size_t)r;
        }
        *n = got;
        return 0;
}

/* The file is there but this process may not read it: say whose it is and what makes it
 * readable, where the file comes from (st: its lstat). */
static void unreadable(const char *path, const struct stat *st) {
        unsigned me = (unsigned)geteuid(), gid = (unsigned)getegid();
        char owner[96], fix[PATH_MAX + 128], run[160];
        sf_safedir_user_name(st->st_uid, owner, sizeof owner);
        if (st->st_uid == me)
                snprintf(fix, sizeof fix, "chmod 400 %s", path);
        else
                snprintf(fix, sizeof fix, "chown %u %s where the file is made (the host's file of a bind mount)", me,
                         path);
        if (st->st_uid == 0)
                snprintf(run, sizeof run,
                         "start sockferry as root (-u 0) with user = %u: it reads the token, then runs as that user",
                         me);
        else
                snprintf(run, sizeof run, "run as its owner (-u %u)", (unsigned)st->st_uid);
        sf_log_error("token file %s: uid %u (gid %u) cannot read it: it is owned by %s, gid %u, mode %04o. Make it "
                     "readable by uid %u alone: %s; a Compose file secret keeps the host file's owner and mode "
                     "(uid:, gid: and mode: are ignored for it), so chown that file, or give the secret from "
                     "environment: with uid: \"%u\" and mode: 0400 (Compose v2); Swarm: uid: \"%u\" and mode: 0400 "
                     "in the long secrets: syntax; Podman: --secret NAME,uid=%u,mode=0400; or %s",
                     path, me, gid, owner, (unsigned)st->st_gid, (unsigned)(st->st_mode & 07777), me, fix, me, me, me,
                     run);
}

int sf_tokenfile_read(const char *path, const struct sf_conf *c, char *buf, size_t cap, size_t *n) {
        struct sf_safedir_policy owners;
        struct sf_safedir_found found;
        struct stat st, denied = { .st_mode = 0 };
        char extra;
        size_t more = 0;
        int fd, r;

        *n = 0;
        /* Judged by who can change the token, not by who owns it (doc/SECURITY.md, "Token file
         * ownership"): the path is walked as a listen path is (relay/listen/safedir.h), so
         * whoever could change a directory or a link on the way could point the relay at
         * another token; but directories and links of one other owner pass, and the file must
         * then be that owner's too: a Mac user's files seen through virtiofs (uid 501), a
         * secret bind-mounted from the host. What is on a read-only mount passes whoever owns
         * it. Links are followed where the rule lets their owner decide, as Kubernetes secrets
         * need (token -> ..data/token, ..data -> ..2024_...). The checks below apply to what was
         * opened, through fstat. O_NONBLOCK keeps a FIFO at the path from blocking the open. */
        sf_safedir_policy_init(&owners, c->user_set, c->uid, c->gid);
        owners.any_owner = true;
        char what[PATH_MAX + 16];
        snprintf(what, sizeof what, "token file %s", path);
        fd = sf_safedir_open_file(&owners, path, O_RDONLY | O_NOCTTY | O_NONBLOCK, NULL, what, &found, &denied);
        if (fd == -ENOENT)
                sf_log_error("cannot open token file %s: %s; " KEYGEN_HINT " %s", path, strerror(ENOENT), path);
        if (fd == -EACCES && denied.st_mode)
                unreadable(path, &denied);
        if (fd < 0)
                return fd;
        if (fstat(fd, &st) < 0) {
                r = -errno;
                sf_log_error("cannot stat token file %s: %s", path, strerror(-r));
                goto out;
        }
        if (S_ISDIR(st.st_mode)) {
                /* What Docker creates at the target of a bind mount whose source is missing. */
                sf_log_error("token file %s is a directory, not a file (a bind mount of a missing host "
                             "file creates one); check the path, or " KEYGEN_HINT " FILE", path);
                r = -EISDIR;
                goto out;
        }
        if (!S_ISREG(st.st_mode)) {
                sf_log_error("token file %s is %s, not a regular file; " KEYGEN_HINT " FILE", path,
                             file_type_name(st.st_mode));
                r = -EINVAL;
                goto out;
        }
        if (found.shared_dir && !sf_safedir_owner_ok(&owners, st.st_uid)) {
                char who[96];
                sf_safedir_user_name(st.st_uid, who, sizeof who);
                sf_log_error("token file %s is owned by %s, in a directory where anyone may create files, so that "
                             "user may have put it there; refusing to use it. Run chown root %s, or move the token "
                             "to a directory of its own (/etc/sockferry)",
                             path, who, path);
                r = -EPERM;
                goto out;
        }
        if (found.other && st.st_uid != found.other_uid) {
                char who[96], theirs[96];
                sf_safedir_user_name(found.other_uid, who, sizeof who);
                sf_safedir_user_name(st.st_uid, theirs, sizeof theirs);
                sf_log_error("token file %s: the %s %s is owned by %s, who could put another file in its place, "
                             "and the token there is %s's; refusing to use it. Keep the token where only its owner, "
                             "root or the relay's user can change the path: run chown %sroot %s, or move the token "
                             "under /etc/sockferry",
                             path, found.other_link ? "symbolic link" : "directory", found.other_path, who, theirs,
                             found.other_link ? "-h " : "", found.other_path);
                r = -EPERM;
                goto out;
        }
        if (st.st_mode & (S_IRGRP | S_IROTH)) {
                sf_log_error("token file %s: mode %04o lets other users read the token; run chmod 600 %s" SECRET_HINT,
                             path, (unsigned)(st.st_mode & 07777), path);
                r = -EPERM;
                goto out;
        }
        if (st.st_mode & (S_IWGRP | S_IWOTH)) {
                sf_log_error("token file %s: mode %04o lets other users change the token; run chmod 600 %s" SECRET_HINT,
                             path, (unsigned)(st.st_mode & 07777), path);
                r = -EPERM;
                goto out;
        }
        if (!sf_safedir_owner_ok(&owners, st.st_uid)) {
                char who[96];
                sf_safedir_user_name(st.st_uid, who, sizeof who);
                sf_log_info("token file %s belongs to %s, who can change it: taken, since nobody else can (mode "
                            "%04o); whoever runs as that uid here holds the token too",
                            path, who, (unsigned)(st.st_mode & 07777));
        }
        if (st.st_size < 0 || (unsigned long long)st.st_size > cap) {
                sf_log_error("token file %s is %lld bytes, too large for a token (at most %zu); " KEYGEN_HINT " %s",
                             path, (long long)st.st_size, cap, path);
                r = -EFBIG;
                goto out;
        }
        r = read_all(fd, buf, cap, n);
        /* One byte more than fstat allowed means the file grew after it was checked. */
        if (r == 0 && *n == cap)
                r = read_all(fd, &extra, 1, &more);
        if (r < 0) {
                sf_log_error("cannot read token file %s: %s", path, strerror(-r));
                goto out;
        }
        if (more > 0) {
                sf_log_error("token file %s grew past %zu bytes while being read; a token is smaller", path, cap);
                r = -EFBIG;
        }
out:
        close(fd);
        return r;
}

static int write_all(int fd, const char *buf, size_t len) {
        while (len > 0) {
                ssize_t w = write(fd, buf, len);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0)
                        return -errno;
                buf += w;
                len -= (size_t)w;
        }
        return 0;
}

/* mkdir -p of the token's directory, 0700: only its owner needs to see in. keygen runs once,
 * by hand, as the user who will own the token, so the names are taken as given. */
static int make_parents(const char *path) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", path);
        for (char *p = dir + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = '\0';
                if (mkdir(dir, 0700) == 0)
                        sf_log_info("created the directory %s (mode 0700) for the token", dir);
                else if (errno != EEXIST) {
                        int e = errno;
                        sf_log_error("cannot write the token to %s: the directory %s is missing and cannot be "
                                     "created: %s",
                                     path, dir, strerror(e));
                        return -e;
                }
                *p = '/';
        }
        return 0;
}

/* Fills the new file at fd (named `file` in messages) with the token for path: mode 0600, the
 * token, fsync, close: a token is whole on disk or not there. Closes fd in every case. */
static int token_write(int fd, const char *file, const char *path, const char *hex, size_t len) {
        /* open()'s mode went through the umask, which may leave less than 0600 to the owner. */
        int r = fchmod(fd, 0600) < 0 ? -errno : 0;
        if (r < 0) {
                sf_log_error("cannot set mode 0600 on %s: %s", file, strerror(-r));
                close(fd);
                return r;
        }
        r = write_all(fd, hex, len);
        if (r == 0 && fsync(fd) < 0)
                r = -errno;
        if (close(fd) < 0 && r == 0)
                r = -errno;
        if (r < 0)
                sf_log_error("cannot write the token to %s: %s", path, strerror(-r));
        return r;
}

/* Without force: a new file at path (O_EXCL, which also never follows a symlink). Removed
 * again if the token cannot be written whole. */
static int token_create(const char *path, const char *hex, size_t len) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
        if (fd < 0) {
                int e = errno;
                if (e == EEXIST)
                        sf_log_error("%s exists; use --force to replace it", path);
                else
                        sf_log_error("cannot create token file %s: %s", path, strerror(e));
                return -e;
        }
        char file[PATH_MAX + 16];
        snprintf(file, sizeof file, "token file %s", path);
        int r = token_write(fd, file, path, hex, len);
        /* Half a token is worse than none: a relay would refuse it with a confusing length. */
        if (r < 0)
                unlink(path);
        return r;
}

/* With force: what is at path must be a regular file, never followed through a symlink. The
 * token goes to a new file beside it (O_EXCL, 0600, fsync) that replaces it in one rename, and
 * the directory is synced: the old inode is never written, so whoever owned it or holds it
 * open never sees the new token. */
static int token_replace(const char *path, const char *hex, size_t len) {
        char dir[PATH_MAX], tmp[NAME_MAX + 1];
        const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
        struct stat st;
        int r;

        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) {
                r = -errno;
                sf_log_error("cannot replace token file %s: cannot open its directory %s: %s", path, dir,
                             strerror(-r));
                return r;
        }
        if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
                r = S_ISDIR(st.st_mode) ? -EISDIR : S_ISLNK(st.st_mode) ? -ELOOP : -EINVAL;
                if (S_ISLNK(st.st_mode))
                        sf_log_error("%s is a symbolic link; refusing to write a token through it, remove it first",
                                     path);
                else
                        sf_log_error("%s is %s; refusing to replace it with a token", path,
                                     file_type_name(st.st_mode));
                close(dfd);
                return r;
        }
        int fd = -1;
        for (int tries = 0; fd < 0 && tries < 16; tries++) {
                snprintf(tmp, sizeof tmp, ".%.200s.%08x", base, randombytes_random());
                fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW, 0600);
                if (fd < 0 && errno != EEXIST)
                        break;
        }
        if (fd < 0) {
                r = -errno;
                sf_log_error("cannot create a new token file beside %s: %s", path, strerror(-r));
                close(dfd);
                return r;
        }
        char file[PATH_MAX + 32];
        snprintf(file, sizeof file, "a new token file beside %s", path);
        r = token_write(fd, file, path, hex, len);
        if (r == 0 && renameat(dfd, tmp, dfd, base) < 0) {
                r = -errno;
                sf_log_error("cannot replace token file %s: %s", path, strerror(-r));
        }
        if (r < 0)
                unlinkat(dfd, tmp, 0);
        else if (fsync(dfd) < 0) {
                r = -errno;
                sf_log_error("cannot sync the directory %s of the new token: %s", dir, strerror(-r));
        }
        close(dfd);
        return r;
}

int sf_tokenfile_write(const char *path, const char *hex, size_t len, bool force) {
        int r;

        if (!path) {
                r = write_all(STDOUT_FILENO, hex, len);
                if (r < 0)
                        sf_log_error("cannot write the token to standard output: %s", strerror(-r));
                return r;
        }
        r = make_parents(path);
        if (r < 0)
                return r;
        return force ? token_replace(path, hex, len) : token_create(path, hex, len);
}
