#include "shim/env.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PRELOAD_NAME "sockferry-preload.so"

/* snprintf that reports truncation as an error instead of handing on a cut value. */
__attribute__((format(printf, 3, 4)))
static int format(char *buf, size_t len, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf, len, fmt, ap);
        va_end(ap);
        if (n < 0 || (size_t)n >= len)
                return -ENAMETOOLONG;
        return 0;
}

int sf_env_value(const struct sf_forward *f, char *buf, size_t len) {
        bool url = f->env_format == SF_ENV_UNIX_URL;
        const struct sf_endpoint *ep = &f->listen;

        switch (ep->kind) {
        case SF_EP_UNIX:
                return format(buf, len, url ? "unix://%s" : "%s", ep->path);
        case SF_EP_ABSTRACT:
                return format(buf, len, url ? "unix://@%s" : "@%s", ep->path);
        case SF_EP_TCP:
                if (strchr(ep->host, ':'))
                        return format(buf, len, url ? "tcp://[%s]:%u" : "[%s]:%u", ep->host, (unsigned)ep->port);
                return format(buf, len, url ? "tcp://%s:%u" : "%s:%u", ep->host, (unsigned)ep->port);
        case SF_EP_VSOCK:
        case SF_EP_SYSTEMD:
        case SF_EP_FD:
        case SF_EP_NPIPE:
                break;
        }
        return -EINVAL;
}

/* setenv that says when it replaces something the container already had, because a silently
 * replaced DOCKER_HOST is a long afternoon for someone. */
static int env_set(const char *forward, const char *name, const char *value) {
        const char *old = getenv(name);
        if (old && strcmp(old, value) == 0)
                return 0;
        if (old)
                sf_log(SF_LOG_INFO, forward, 0, "overriding %s=%s with %s", name, old, value);
        else
                sf_log(SF_LOG_DEBUG, forward, 0, "exporting %s=%s", name, value);
        if (setenv(name, value, 1) < 0) {
                int err = errno;
                sf_log(SF_LOG_ERROR, forward, 0, "cannot set %s: %s", name, strerror(err));
                return -err;
        }
        return 0;
}

int sf_env_export(const struct sf_conf *c) {
        for (size_t i = 0; i < c->n_forwards; i++) {
                const struct sf_forward *f = &c->forwards[i];
                char value[PATH_MAX];
                if (!f->env[0])
                        continue;
                int r = sf_env_value(f, value, sizeof value);
                if (r == -EINVAL) {
                        sf_log(SF_LOG_WARN, f->name, 0, "env %s: listen endpoint %s has no address a client can use; not exported",
                               f->env, f->listen.text);
                        continue;
                }
                if (r < 0)
                        return r;
                r = env_set(f->name, f->env, value);
                if (r < 0)
                        return r;
        }
        return 0;
}

bool sf_env_preload_wanted(const struct sf_conf *c) {
        for (size_t i = 0; i < c->n_forwards; i++)
                if (c->forwards[i].alias[0])
                        return true;
        return false;
}

/* An LD_PRELOAD entry must be absolute: the payload may chdir before it execs anything. */
static int candidate(const char *path, const char *from, bool required, char *out, size_t len) {
        char abs[PATH_MAX];
        if (!realpath(path, abs) || access(abs, R_OK) < 0) {
                int err = errno;
                if (required) {
                        sf_log_error("preload library %s (from %s): %s", path, from, strerror(err));
                        return -EINVAL;
                }
                sf_log_debug("preload library not at %s (%s): %s", path, from, strerror(err));
                return -ENOENT;
        }
        if (strlen(abs) >= len)
                return -ENAMETOOLONG;
        strcpy(out, abs);
        sf_log_debug("preload library %s (from %s)", abs, from);
        return 0;
}

int sf_env_preload_find(const char *explicit_path, char *out, size_t len) {
        if (explicit_path)
                return candidate(explicit_path, "--preload", true, out, len);
        const char *env = getenv("SOCKFERRY_PRELOAD");
        if (env && env[0])
                return candidate(env, "$SOCKFERRY_PRELOAD", true, out, len);
        if (candidate(SF_PRELOAD_DIR "/" PRELOAD_NAME, "the installed path", false, out, len) == 0)
                return 0;

        char exe[PATH_MAX], tree[PATH_MAX + 32];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n < 0)
                return -ENOENT;
        exe[n] = '\0';
        snprintf(tree, sizeof tree, "%s/../preload/" PRELOAD_NAME, dirname(exe));
        return candidate(tree, "the build tree", false, out, len);
}

int sf_env_preload_map(const struct sf_conf *c, char *buf, size_t len) {
        size_t o = 0;
        int n = 0;
        if (len)
                buf[0] = '\0';
        for (size_t i = 0; i < c->n_forwards; i++) {
                const struct sf_forward *f = &c->forwards[i];
                if (!f->alias[0])
                        continue;
                if (f->listen.kind == SF_EP_SYSTEMD || f->listen.kind == SF_EP_FD) {
                        sf_log(SF_LOG_WARN, f->name, 0, "alias %s: listen endpoint %s cannot be connected to; left out of the preload map",
                               f->alias, f->listen.text);
                        continue;
                }
                /* ';' separates entries and the first '=' ends the path, so neither can be
                 * carried inside them. */
                if (strpbrk(f->alias, ";=") || strchr(f->listen.text, ';')) {
                        sf_log(SF_LOG_WARN, f->name, 0, "alias %s: a path with ';' or '=' cannot go into SOCKFERRY_PRELOAD_MAP; left out",
                               f->alias);
                        continue;
                }
                int w = snprintf(buf + o, len - o, "%s%s=%s", n ? ";" : "", f->alias, f->listen.text);
                if (w < 0 || (size_t)w >= len - o)
                        return -ENAMETOOLONG;
                o += (size_t)w;
                n++;
        }
        return n;
}

int sf_env_ld_preload_add(const char *list, const char *lib, char *buf, size_t len) {
        if (!list || !list[0])
                return format(buf, len, "%s", lib);
        /* ld.so separates entries with spaces or colons. */
        size_t lib_len = strlen(lib);
        for (const char *p = list; *p;) {
                size_t n = strcspn(p, ": \t");
                if (n == lib_len && memcmp(p, lib, n) == 0)
                        return format(buf, len, "%s", list);
                p += n;
                p += strspn(p, ": \t");
        }
        /* Appended, not prepended: a sanitizer runtime already in the list must stay first. */
        return format(buf, len, "%s:%s", list, lib);
}

int sf_env_preload_export(const struct sf_conf *c, const char *lib) {
        char map[8192], list[8192];
        int n = sf_env_preload_map(c, map, sizeof map);
        if (n < 0) {
                sf_log_error("SOCKFERRY_PRELOAD_MAP would be longer than %zu bytes", sizeof map);
                return n;
        }
        if (n == 0)
                return 0;
        int r = sf_env_ld_preload_add(getenv("LD_PRELOAD"), lib, list, sizeof list);
        if (r < 0) {
                sf_log_error("LD_PRELOAD would be longer than %zu bytes", sizeof list);
                return r;
        }
        sf_log_info("preload: %s added to LD_PRELOAD for %d alias%s", lib, n, n == 1 ? "" : "es");
        r = env_set(NULL, "LD_PRELOAD", list);
        if (r < 0)
                return r;
        return env_set(NULL, "SOCKFERRY_PRELOAD_MAP", map);
}

/* sd_listen_fds(3): the first passed descriptor. */
#define LISTEN_FDS_START 3

int sf_env_activation_clear(bool (*in_use)(int fd, void *data), void *data) {
        const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
        int closed = 0;
        if (pid && fds && strtol(pid, NULL, 10) == (long)getpid()) {
                long n = strtol(fds, NULL, 10);
                for (long i = 0; i < n && i < INT_MAX - LISTEN_FDS_START; i++) {
                        int fd = LISTEN_FDS_START + (int)i;
                        if (!in_use(fd, data) && close(fd) == 0)
                                closed++;
                }
                if (closed)
                        sf_log_debug("socket activation: closed %d passed socket%s no forward listens on", closed,
                                     closed == 1 ? "" : "s");
        }
        static const char *const vars[] = { "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET" };
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
                unsetenv(vars[i]);
        return closed;
}
