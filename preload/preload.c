/* sockferry-preload.so: makes connect() on a unix socket path that turned out to be a
 * directory (the host socket bind mount that carried no socket) reach the endpoint that
 * SOCKFERRY_PRELOAD_MAP names for that path, without touching the client.
 *
 * The contract is in doc/sockferry-preload.8.scd. In short:
 *  - the real connect() always runs first, so a live socket at a mapped path is used as is
 *    and a connect that succeeds costs one pointer indirection;
 *  - only a failure that means "nobody listens at this path" on a mapped path is redirected;
 *  - a TCP or vsock target needs a socket of another family: a new socket is swapped onto
 *    the caller's fd number with dup3(), keeping O_NONBLOCK, FD_CLOEXEC and the timeouts;
 *  - every piece of state is written by the constructor and only read afterwards (but for
 *    two "already said it" flags), so there are no locks; connect() does not allocate and
 *    does only async-signal-safe work, as callers of connect() may rely on. */
#include "conf/endpoint.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#if __has_include(<linux/vm_sockets.h>)
#include <linux/vm_sockets.h>
#else
/* musl-gcc sees no kernel headers. This is the kernel's ABI for the vsock address. */
struct sockaddr_vm {
        sa_family_t svm_family;
        unsigned short svm_reserved1;
        unsigned int svm_port;
        unsigned int svm_cid;
        unsigned char svm_zero[sizeof(struct sockaddr) - sizeof(sa_family_t) -
                               sizeof(unsigned short) - 2 * sizeof(unsigned int)];
};
#endif

#define MAP_MAX 32
#define PREFIX "sockferry-preload: "

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

struct target {
        int family;
        socklen_t len;
        union {
                struct sockaddr sa;
                struct sockaddr_un un;
                struct sockaddr_in in;
                struct sockaddr_in6 in6;
                struct sockaddr_vm vm;
        } addr;
        char text[SF_ENDPOINT_TEXT_MAX]; /* the endpoint as written, for messages */
};

struct mapping {
        char path[SF_UNIX_PATH_MAX];   /* absolute, lexically normalised */
        char parent[SF_UNIX_PATH_MAX]; /* its directory, to compare by identity */
        size_t base;                   /* offset of the last component in path */
        struct target target;
};

static int raw_connect(int fd, const struct sockaddr *addr, socklen_t len);

/* Until the constructor runs (another library's constructor may connect before ours), the
 * system call itself stands in for libc's connect(). */
static connect_fn real_connect = raw_connect;
static struct mapping map[MAP_MAX];
static size_t map_len;
static bool quiet, debug;
static atomic_bool dir_warned, redirect_warned;

static int raw_connect(int fd, const struct sockaddr *addr, socklen_t len) {
        return (int)syscall(SYS_connect, fd, addr, len);
}

/* Messages are built in a fixed buffer and written with write(2): no stdio, no allocation,
 * usable in any thread and after fork(). Long input is truncated, never overflows. */
struct line {
        char buf[1024];
        size_t len;
};

static void add_n(struct line *l, const char *s, size_t n) {
        size_t room = sizeof l->buf - 1 - l->len; /* keep one byte for the newline */
        if (n > room)
                n = room;
        memcpy(l->buf + l->len, s, n);
        l->len += n;
}

static void add(struct line *l, const char *s) {
        add_n(l, s, strlen(s));
}

static void add_uint(struct line *l, unsigned long v) {
        char d[24];
        size_t i = sizeof d;
        do
                d[--i] = (char)('0' + v % 10);
        while ((v /= 10) > 0 && i > 0);
        add_n(l, d + i, sizeof d - i);
}

static const char *errno_name(int e) {
        switch (e) {
        case EACCES: return "EACCES";
        case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
        case EAFNOSUPPORT: return "EAFNOSUPPORT";
        case EAGAIN: return "EAGAIN";
        case EALREADY: return "EALREADY";
        case EBADF: return "EBADF";
        case ECONNREFUSED: return "ECONNREFUSED";
        case ECONNRESET: return "ECONNRESET";
        case EHOSTUNREACH: return "EHOSTUNREACH";
        case EINPROGRESS: return "EINPROGRESS";
        case EINTR: return "EINTR";
        case EISCONN: return "EISCONN";
        case ELOOP: return "ELOOP";
        case EMFILE: return "EMFILE";
        case ENETUNREACH: return "ENETUNREACH";
        case ENFILE: return "ENFILE";
        case ENODEV: return "ENODEV";
        case ENOENT: return "ENOENT";
        case ENOTDIR: return "ENOTDIR";
        case EPERM: return "EPERM";
        case EPROTOTYPE: return "EPROTOTYPE";
        case ETIMEDOUT: return "ETIMEDOUT";
        }
        return NULL;
}

static void add_errno(struct line *l, int e) {
        const char *name = errno_name(e);
        if (name) {
                add(l, name);
        } else {
                add(l, "errno ");
                add_uint(l, (unsigned long)e);
        }
}

static void emit(struct line *l) {
        int saved = errno;
        l->buf[l->len++] = '\n';
        for (size_t off = 0; off < l->len;) {
                ssize_t n = write(STDERR_FILENO, l->buf + off, l->len - off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                off += (size_t)n;
        }
        errno = saved;
}

/* The lexical normalisation of sockferry-preload(8): collapses "//", "." and "..", drops a trailing
 * '/'. A relative path stays relative (a leading ".." is kept). Returns -1 when the result
 * would not fit in cap bytes with its NUL. */
static int normalise(const char *in, size_t n, char *out, size_t cap) {
        bool absolute = n > 0 && in[0] == '/';
        size_t o = 0, root, i = 0;

        if (absolute)
                out[o++] = '/';
        root = o;
        while (i < n) {
                while (i < n && in[i] == '/')
                        i++;
                size_t start = i;
                while (i < n && in[i] != '/')
                        i++;
                size_t len = i - start;
                if (len == 0 || (len == 1 && in[start] == '.'))
                        continue;
                if (len == 2 && in[start] == '.' && in[start + 1] == '.') {
                        size_t k = o;
                        while (k > root && out[k - 1] != '/')
                                k--;
                        bool last_is_dotdot = o - k == 2 && out[k] == '.' && out[k + 1] == '.';
                        if (o > root && !last_is_dotdot) {
                                o = k > root ? k - 1 : root;
                                continue;
                        }
                        if (absolute)
                                continue; /* "/.." is "/" */
                }
                if (o > root) {
                        if (o + 1 >= cap)
                                return -1;
                        out[o++] = '/';
                }
                if (o + len >= cap)
                        return -1;
                memcpy(out + o, in + start, len);
                o += len;
        }
        if (o == 0)
                out[o++] = '.';
        out[o] = '\0';
        return 0;
}

/* Offset of the last component of a normalised path ("/" and "." have an empty one). */
static size_t base_offset(const char *path) {
        const char *slash = strrchr(path, '/');
        if (!slash)
                return strcmp(path, ".") == 0 ? strlen(path) : 0;
        return (size_t)(slash - path) + 1;
}

/* The directory holding the last component, as a path stat() can take. */
static void parent_of(const char *path, size_t base, char *out) {
        if (base == 0) {
                strcpy(out, ".");
        } else if (base == 1) {
                strcpy(out, "/");
        } else {
                memcpy(out, path, base - 1);
                out[base - 1] = '\0';
        }
}

static bool same_dir(const char *a, const char *b) {
        struct stat sa, sb;
        return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
               sa.st_ino == sb.st_ino;
}

/* The mapping for a connect path: the same normalised text, or the same last component in
 * the same directory (so /var/run/x.sock finds /run/x.sock, and a relative path finds its
 * absolute form). stat() runs only when a last component matches: an unmapped path costs
 * string compares. Leaves errno as it found it. */
static const struct mapping *lookup(const char *path, size_t n) {
        char norm[SF_UNIX_PATH_MAX + 1], parent[SF_UNIX_PATH_MAX + 1];
        int saved = errno;
        const struct mapping *found = NULL;

        if (normalise(path, n, norm, sizeof norm) < 0)
                return NULL;
        for (size_t i = 0; i < map_len; i++)
                if (strcmp(norm, map[i].path) == 0)
                        return &map[i];

        size_t base = base_offset(norm);
        if (norm[base] == '\0')
                return NULL;
        parent_of(norm, base, parent);
        for (size_t i = 0; i < map_len && !found; i++)
                if (strcmp(norm + base, map[i].path + map[i].base) == 0 &&
                    same_dir(parent, map[i].parent))
                        found = &map[i];
        errno = saved;
        return found;
}

static void log_redirect(int fd, const char *path, size_t n, int err, const struct mapping *m,
                         int r, int result_errno) {
        struct line l = { .len = 0 };
        add(&l, PREFIX "connect(");
        add_uint(&l, (unsigned long)fd);
        add(&l, ", ");
        add_n(&l, path, n);
        add(&l, "): ");
        add_errno(&l, err);
        add(&l, ", redirected to ");
        add(&l, m->target.text);
        add(&l, ": ");
        if (r == 0) {
                add(&l, "connected");
        } else if (result_errno == EINPROGRESS) {
                add(&l, "in progress");
        } else {
                add(&l, "failed (");
                add_errno(&l, result_errno);
                add(&l, ")");
        }
        emit(&l);
}

/* Results the caller sees later or that are not about the target (EINPROGRESS, EAGAIN,
 * EINTR) are not failures of the redirect. */
static void warn_redirect_failed(const char *path, size_t n, const struct mapping *m, int e) {
        if (quiet || e == EINPROGRESS || e == EAGAIN || e == EINTR || e == EALREADY ||
            e == EISCONN || atomic_exchange(&redirect_warned, true))
                return;
        struct line l = { .len = 0 };
        add(&l, PREFIX);
        add_n(&l, path, n);
        add(&l, " is mapped to ");
        add(&l, m->target.text);
        add(&l, ", and connecting there failed (");
        add_errno(&l, e);
        add(&l, "). Is sockferry's relay running?");
        emit(&l);
}

static bool env_true(const char *name) {
        const char *v = getenv(name);
        return v && (strcmp(v, "1") == 0 || strcasecmp(v, "yes") == 0 ||
                     strcasecmp(v, "true") == 0 || strcasecmp(v, "on") == 0);
}

/* Replaces the AF_UNIX socket at fd by a fresh socket of the target's family, keeping the fd
 * number, O_NONBLOCK, FD_CLOEXEC and the send/receive timeouts (SO_SNDTIMEO also bounds a
 * blocking connect). The temporary fd is close-on-exec from birth, so a fork+exec in another
 * thread cannot inherit it, and it is closed on every path. */
static int swap_socket(int fd, const struct target *t) {
        int type, status, fdflags, tmp, r = 0;
        struct timeval rcv, snd;
        socklen_t tl = sizeof type, rl = sizeof rcv, sl = sizeof snd;

        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0)
                return -1;
        if (t->family != AF_VSOCK && type != SOCK_STREAM) {
                /* What the kernel answers for a socket type the peer does not speak. */
                errno = EPROTOTYPE;
                return -1;
        }
        status = fcntl(fd, F_GETFL);
        fdflags = fcntl(fd, F_GETFD);
        if (status < 0 || fdflags < 0 ||
            getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rcv, &rl) < 0 ||
            getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &snd, &sl) < 0)
                return -1;

        tmp = socket(t->family, type | SOCK_CLOEXEC | ((status & O_NONBLOCK) ? SOCK_NONBLOCK : 0), 0);
        if (tmp < 0)
                return -1;
        if (setsockopt(tmp, SOL_SOCKET, SO_RCVTIMEO, &rcv, sizeof rcv) < 0 ||
            setsockopt(tmp, SOL_SOCKET, SO_SNDTIMEO, &snd, sizeof snd) < 0)
                r = -1;
        if (r == 0 && t->family != AF_VSOCK) {
                /* A unix socket has no Nagle delay; request/response clients written for
                 * one would stall on delayed ACKs without this. */
                int one = 1;
                r = setsockopt(tmp, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        if (r == 0 && dup3(tmp, fd, (fdflags & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0)
                r = -1;
        int saved = errno;
        /* The raw system call: libc's close() is a cancellation point, and a cancelled
         * thread must not leave the temporary fd behind. */
        syscall(SYS_close, tmp);
        errno = saved;
        return r;
}

/* Failures of the real connect() that mean nobody listens at the path: the directory of a
 * failed bind mount (ECONNREFUSED, or EACCES without write permission on it), a stale
 * socket, a missing path. EAFNOSUPPORT is what connect() with a unix address gives on an fd
 * already swapped to TCP or vsock, when a client calls connect() again. */
static bool redirectable(int e) {
        return e == ECONNREFUSED || e == ENOENT || e == ENOTDIR || e == EACCES ||
               e == EPERM || e == ELOOP || e == EAFNOSUPPORT;
}

static int redirect(int fd, const char *path, size_t n, int err, const struct mapping *m) {
        const struct target *t = &m->target;
        int domain, r;
        socklen_t dl = sizeof domain;

        if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dl) < 0) {
                errno = err;
                return -1;
        }
        if (domain != t->family) {
                /* Not ours to touch: a non-unix socket the client passed a unix address to. */
                if (domain != AF_UNIX) {
                        errno = err;
                        return -1;
                }
                if (swap_socket(fd, t) < 0) {
                        int e = errno;
                        if (debug)
                                log_redirect(fd, path, n, err, m, -1, e);
                        warn_redirect_failed(path, n, m, e);
                        errno = e;
                        return -1;
                }
        }
        r = real_connect(fd, &t->addr.sa, t->len);
        int e = errno;
        if (debug)
                log_redirect(fd, path, n, err, m, r, e);
        if (r < 0)
                warn_redirect_failed(path, n, m, e);
        errno = e;
        return r;
}

static void diagnose_directory(const char *path, size_t n) {
        char p[SF_UNIX_PATH_MAX + 1];
        struct stat st;

        if (atomic_load(&dir_warned))
                return;
        memcpy(p, path, n);
        p[n] = '\0';
        if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode) || atomic_exchange(&dir_warned, true))
                return;
        struct line l = { .len = 0 };
        add(&l, PREFIX);
        add(&l, p);
        add(&l, " is a directory, not a socket: the host socket bind mount did not carry a "
                "socket (Docker Desktop?). Map it with alias= in sockferry's config.");
        emit(&l);
}

int sf_preload_connect(int fd, const struct sockaddr *addr, socklen_t len)
        __asm__("connect") __attribute__((visibility("default")));

/* Exported as connect (the assembler name): <sys/socket.h> declares connect() with glibc's
 * transparent-union argument under _GNU_SOURCE, and this keeps one plain signature for
 * glibc and musl. */
int sf_preload_connect(int fd, const struct sockaddr *addr, socklen_t len) {
        int saved = errno, r, err;
        const struct sockaddr_un *un;
        const struct mapping *m;
        size_t n;

        r = real_connect(fd, addr, len);
        if (r == 0)
                return 0;
        err = errno;
        /* A redirectable errno also means the kernel could read addr, so we can. */
        if (!redirectable(err) || (map_len == 0 && quiet) ||
            len <= offsetof(struct sockaddr_un, sun_path) || len > sizeof(struct sockaddr_un) ||
            addr->sa_family != AF_UNIX)
                goto out;
        un = (const struct sockaddr_un *)addr;
        n = strnlen(un->sun_path, len - offsetof(struct sockaddr_un, sun_path));
        if (n == 0) /* abstract or unnamed */
                goto out;

        m = map_len > 0 ? lookup(un->sun_path, n) : NULL;
        if (m) {
                r = redirect(fd, un->sun_path, n, err, m);
                if (r == 0)
                        errno = saved;
                return r;
        }
        if (!quiet && (err == ECONNREFUSED || err == EACCES))
                diagnose_directory(un->sun_path, n);
out:
        errno = err;
        return r;
}

static void report_entry(size_t index, const char *entry, size_t len, const char *why) {
        struct line l = { .len = 0 };
        add(&l, PREFIX "SOCKFERRY_PRELOAD_MAP entry ");
        add_uint(&l, (unsigned long)index);
        add(&l, " \"");
        add_n(&l, entry, len);
        add(&l, "\": ");
        add(&l, why);
        add(&l, "; entry ignored");
        emit(&l);
}

/* Fills t from a parsed endpoint. Returns NULL, or why the endpoint cannot be a target.
 * Names are not resolved: resolving inside connect() would block non-blocking callers and
 * allocate, and resolving here would cost every process that inherits the map a lookup it
 * may never use. */
static const char *make_target(const struct sf_endpoint *ep, struct target *t) {
        memset(t, 0, sizeof *t);
        memcpy(t->text, ep->text, sizeof t->text);
        switch (ep->kind) {
        case SF_EP_UNIX:
        case SF_EP_ABSTRACT: {
                size_t n = strlen(ep->path), skip = ep->kind == SF_EP_ABSTRACT;
                t->family = AF_UNIX;
                t->addr.un.sun_family = AF_UNIX;
                memcpy(t->addr.un.sun_path + skip, ep->path, n);
                /* A path carries its NUL; an abstract name is exactly its bytes. */
                t->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + skip + n + !skip);
                return NULL;
        }
        case SF_EP_TCP: {
                const char *host = strcasecmp(ep->host, "localhost") == 0 ? "127.0.0.1" : ep->host;
                if (inet_pton(AF_INET, host, &t->addr.in.sin_addr) == 1) {
                        t->family = AF_INET;
                        t->addr.in.sin_family = AF_INET;
                        t->addr.in.sin_port = htons((uint16_t)ep->port);
                        t->len = sizeof t->addr.in;
                        return NULL;
                }
                if (inet_pton(AF_INET6, host, &t->addr.in6.sin6_addr) == 1) {
                        t->family = AF_INET6;
                        t->addr.in6.sin6_family = AF_INET6;
                        t->addr.in6.sin6_port = htons((uint16_t)ep->port);
                        t->len = sizeof t->addr.in6;
                        return NULL;
                }
                if (strchr(host, '%'))
                        return "a scoped IPv6 address is not supported here, use a global or loopback address";
                return "the preload does not resolve host names, use an IP address (or map the path to the unix socket of sockferry's relay)";
        }
        case SF_EP_VSOCK:
                if (ep->cid == SF_VSOCK_CID_ANY)
                        return "vsock:any is a listen address, expected vsock:host:PORT or vsock:CID:PORT";
                t->family = AF_VSOCK;
                t->addr.vm.svm_family = AF_VSOCK;
                t->addr.vm.svm_cid = ep->cid;
                t->addr.vm.svm_port = ep->port;
                t->len = sizeof t->addr.vm;
                return NULL;
        case SF_EP_NPIPE:
                return "named pipes (npipe:) are Windows', expected unix:, tcp: or vsock:";
        case SF_EP_SYSTEMD:
        case SF_EP_FD:
                break;
        }
        return "a systemd: or fd: endpoint cannot be connected to, expected unix:, tcp: or vsock:";
}

static void load_entry(size_t index, const char *entry, size_t len) {
        char err[SF_ENDPOINT_TEXT_MAX + 256];
        const char *why;
        struct mapping *m = &map[map_len];
        struct sf_endpoint ep;
        const char *eq = memchr(entry, '=', len);

        if (!eq || eq == entry) {
                report_entry(index, entry, len, "expected /expected/path.sock=ENDPOINT");
                return;
        }
        size_t plen = (size_t)(eq - entry);
        if (entry[0] != '/') {
                report_entry(index, entry, len, "the path must be absolute");
                return;
        }
        if (normalise(entry, plen, m->path, sizeof m->path) < 0) {
                report_entry(index, entry, len, "the path is too long for a unix socket (107 bytes at most)");
                return;
        }
        if (strcmp(m->path, "/") == 0) {
                report_entry(index, entry, len, "the path names the root directory, not a socket");
                return;
        }
        for (size_t i = 0; i < map_len; i++)
                if (strcmp(map[i].path, m->path) == 0) {
                        report_entry(index, entry, len, "the path is mapped already, the first mapping wins");
                        return;
                }
        if (sf_endpoint_parse_n(eq + 1, len - plen - 1, &ep, err, sizeof err) < 0) {
                report_entry(index, entry, len, err);
                return;
        }
        why = make_target(&ep, &m->target);
        if (why) {
                report_entry(index, entry, len, why);
                return;
        }
        if (ep.kind == SF_EP_UNIX) {
                char target[SF_UNIX_PATH_MAX + 1];
                if (normalise(ep.path, strlen(ep.path), target, sizeof target) == 0 &&
                    strcmp(target, m->path) == 0) {
                        report_entry(index, entry, len, "the path is mapped to itself");
                        return;
                }
        }
        m->base = base_offset(m->path);
        parent_of(m->path, m->base, m->parent);
        map_len++;
}

static void load_map(const char *s) {
        size_t index = 0;

        while (*s) {
                const char *end = strchr(s, ';');
                size_t len = end ? (size_t)(end - s) : strlen(s);
                if (len > 0) {
                        index++;
                        if (map_len == MAP_MAX) {
                                report_entry(index, s, len, "more than 32 entries");
                        } else {
                                load_entry(index, s, len);
                        }
                }
                s += len + (end != NULL);
        }
}

__attribute__((constructor))
static void preload_init(void) {
        connect_fn fn = (connect_fn)dlsym(RTLD_NEXT, "connect");
        const char *s;

        if (fn)
                real_connect = fn;
        quiet = env_true("SOCKFERRY_PRELOAD_QUIET");
        /* A set-user-ID or file-capability program must not be steered by its caller's
         * environment. */
        if (getauxval(AT_SECURE))
                return;
        debug = env_true("SOCKFERRY_PRELOAD_DEBUG");
        s = getenv("SOCKFERRY_PRELOAD_MAP");
        if (s)
                load_map(s);
        if (debug) {
                /* Answers "is the preload active in this process at all?". */
                struct line l = { .len = 0 };
                add(&l, PREFIX "loaded into pid ");
                add_uint(&l, (unsigned long)getpid());
                add(&l, " with ");
                add_uint(&l, (unsigned long)map_len);
                add(&l, map_len == 1 ? " mapping" : " mappings");
                if (!fn)
                        add(&l, "; libc's connect() was not found, using the system call");
                emit(&l);
        }
}

#ifdef SF_PRELOAD_FUZZ
/* Only for tests/fuzz/fuzz_preload_map.c, which compiles this file with -DSF_PRELOAD_FUZZ;
 * the library never has it. Loads text as SOCKFERRY_PRELOAD_MAP would be loaded, checks that
 * every mapping is found again by its own path, looks probe up, and returns how many
 * mappings were kept. */
size_t sf_preload_fuzz_map(const char *text, const char *probe, size_t probe_len);
size_t sf_preload_fuzz_map(const char *text, const char *probe, size_t probe_len) {
        map_len = 0;
        load_map(text);
        if (map_len > MAP_MAX)
                abort();
        for (size_t i = 0; i < map_len; i++) {
                if (map[i].path[0] != '/' || lookup(map[i].path, strlen(map[i].path)) != &map[i])
                        abort();
        }
        (void)lookup(probe, probe_len);
        return map_len;
}
#endif
