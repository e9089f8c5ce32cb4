#include "relay/token.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/log.h"

#define TOKEN_GEN_BYTES 32
/* Twice the largest key as hex, plus generous room for surrounding whitespace: anything
 * bigger is not a token file and is refused before it is read. */
#define TOKEN_FILE_MAX 1024

#define KEYGEN_HINT "create one with sockferry keygen -o"

static bool is_space(char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool is_hex(char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

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

/* Reads at most cap bytes; *n is how many. A file that grew past cap after fstat is refused
 * by the caller through n == cap. */
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

/* Decodes the hex text in buf[0..n) into key, logging what is wrong with it. */
static int token_decode(const char *path, const char *buf, size_t n, struct sf_hs_key *key) {
        size_t b = 0, e = n, bin_len = 0;

        while (b < e && is_space(buf[b]))
                b++;
        while (e > b && is_space(buf[e - 1]))
                e--;
        if (b == e) {
                sf_log_error("token file %s is empty; " KEYGEN_HINT " %s", path, path);
                return -EINVAL;
        }
        for (size_t i = b; i < e; i++)
                if (!is_hex(buf[i])) {
                        /* The position only, never the character: it may be part of a secret. */
                        sf_log_error("token file %s is not a hex token (byte %zu is not a hex digit); "
                                     KEYGEN_HINT " %s", path, i + 1, path);
                        return -EINVAL;
                }
        if ((e - b) % 2 != 0) {
                sf_log_error("token file %s holds an odd number of hex digits (%zu); " KEYGEN_HINT " %s",
                             path, e - b, path);
                return -EINVAL;
        }
        if ((e - b) / 2 > SF_HS_KEY_MAX) {
                sf_log_error("token file %s holds %zu bytes of key material, at most %d are allowed; "
                             KEYGEN_HINT " %s", path, (e - b) / 2, SF_HS_KEY_MAX, path);
                return -EINVAL;
        }
        if ((e - b) / 2 < SF_HS_KEY_MIN) {
                sf_log_error("token file %s holds %zu bytes of key material, at least %d are needed; "
                             KEYGEN_HINT " %s", path, (e - b) / 2, SF_HS_KEY_MIN, path);
                return -EINVAL;
        }
        if (sodium_hex2bin(key->bytes, sizeof key->bytes, buf + b, e - b, NULL, &bin_len, NULL) < 0 ||
            bin_len != (e - b) / 2) {
                sf_log_error("token file %s: cannot decode the hex token; " KEYGEN_HINT " %s", path, path);
                return -EINVAL;
        }
        key->len = bin_len;
        return 0;
}

int sf_token_load(const char *path, struct sf_hs_key *key) {
        char buf[TOKEN_FILE_MAX + 1];
        struct stat st;
        size_t n = 0;
        int fd, r;

        sodium_memzero(key, sizeof *key);
        r = sf_hs_init();
        if (r < 0)
                return r;

        /* Links are followed on purpose: Docker and Kubernetes secrets are symlinks into a
         * tmpfs. The checks below apply to the target, through fstat on what was opened.
         * O_NONBLOCK keeps a FIFO at the path from blocking the open. */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0) {
                r = -errno;
                if (r == -ENOENT)
                        sf_log_error("cannot open token file %s: %s; " KEYGEN_HINT " %s", path, strerror(-r), path);
                else
                        sf_log_error("cannot open token file %s: %s", path, strerror(-r));
                return r;
        }
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
        if (st.st_mode & (S_IRGRP | S_IROTH)) {
                sf_log_error("token file %s: mode %04o lets other users read the token; run chmod 600 %s", path,
                             (unsigned)(st.st_mode & 07777), path);
                r = -EPERM;
                goto out;
        }
        if (st.st_mode & (S_IWGRP | S_IWOTH)) {
                sf_log_error("token file %s: mode %04o lets other users change the token; run chmod 600 %s", path,
                             (unsigned)(st.st_mode & 07777), path);
                r = -EPERM;
                goto out;
        }
        if (st.st_size > TOKEN_FILE_MAX) {
                sf_log_error("token file %s is %lld bytes, too large for a token (at most %d); " KEYGEN_HINT " %s",
                             path, (long long)st.st_size, TOKEN_FILE_MAX, path);
                r = -EFBIG;
                goto out;
        }
        r = read_all(fd, buf, sizeof buf, &n);
        if (r < 0) {
                sf_log_error("cannot read token file %s: %s", path, strerror(-r));
                goto out;
        }
        if (n > TOKEN_FILE_MAX) {
                sf_log_error("token file %s grew past %d bytes while being read; a token is smaller", path,
                             TOKEN_FILE_MAX);
                r = -EFBIG;
                goto out;
        }
        r = token_decode(path, buf, n, key);
out:
        sodium_memzero(buf, sizeof buf);
        if (r < 0)
                sodium_memzero(key, sizeof *key);
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

/* Opens path for a new token with mode 0600. Without force the file must not exist (O_EXCL
 * also never follows a symlink); with force an existing regular file is reused, so its owner
 * stays, but never through a symlink and never a device or FIFO. *created says whether this
 * call made the file, so a failed write can remove it again. */
static int token_open(const char *path, bool force, bool *created) {
        struct stat st;
        int fd, r;

        *created = false;
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
        if (fd >= 0) {
                *created = true;
        } else if (errno == EEXIST && !force) {
                sf_log_error("%s exists; use --force to replace it", path);
                return -EEXIST;
        } else if (errno == EEXIST) {
                fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK);
                if (fd < 0) {
                        r = -errno;
                        if (r == -ELOOP)
                                sf_log_error("%s is a symbolic link; refusing to write a token through it, "
                                             "remove it first", path);
                        else
                                sf_log_error("cannot replace token file %s: %s", path, strerror(-r));
                        return r;
                }
        } else {
                r = -errno;
                sf_log_error("cannot create token file %s: %s", path, strerror(-r));
                return r;
        }

        if (fstat(fd, &st) < 0) {
                r = -errno;
                sf_log_error("cannot stat token file %s: %s", path, strerror(-r));
                goto fail;
        }
        if (!S_ISREG(st.st_mode)) {
                sf_log_error("%s is %s; refusing to replace it with a token", path, file_type_name(st.st_mode));
                r = -EINVAL;
                goto fail;
        }
        /* open()'s mode goes through the umask and an existing file keeps its own: set 0600
         * explicitly, before the old content goes and the new one arrives. */
        if (fchmod(fd, 0600) < 0 || ftruncate(fd, 0) < 0) {
                r = -errno;
                sf_log_error("cannot prepare token file %s: %s", path, strerror(-r));
                goto fail;
        }
        return fd;
fail:
        close(fd);
        if (*created)
                unlink(path);
        return r;
}

int sf_token_generate(const char *path, bool force) {
        uint8_t raw[TOKEN_GEN_BYTES];
        char hex[TOKEN_GEN_BYTES * 2 + 2];
        bool created = false;
        int fd = STDOUT_FILENO, r;

        r = sf_hs_init();
        if (r < 0)
                return r;

        randombytes_buf(raw, sizeof raw);
        sodium_bin2hex(hex, sizeof hex, raw, sizeof raw);
        sodium_memzero(raw, sizeof raw);
        hex[TOKEN_GEN_BYTES * 2] = '\n';

        if (path) {
                fd = token_open(path, force, &created);
                if (fd < 0) {
                        r = fd;
                        goto out;
                }
        }
        r = write_all(fd, hex, TOKEN_GEN_BYTES * 2 + 1);
        if (r == 0 && path && fsync(fd) < 0)
                r = -errno;
        if (r < 0)
                sf_log_error("cannot write the token to %s: %s", path ? path : "standard output", strerror(-r));
        if (path && close(fd) < 0 && r == 0) {
                r = -errno;
                sf_log_error("cannot write the token to %s: %s", path, strerror(-r));
        }
        /* Half a token is worse than none: a relay would refuse it with a confusing length. */
        if (r < 0 && path && created)
                unlink(path);
out:
        sodium_memzero(hex, sizeof hex);
        return r;
}
