/* What a client can observe about its fd across a redirect, checked from inside the client.
 * Prints one "ok - ..." or "not ok - ...: why" line per check; the test script numbers them.
 *
 *   sfp-fdcheck flags PATH FAMILY        8 ways to set O_NONBLOCK/FD_CLOEXEC, then connect,
 *                                        echo a line; the fd must keep the flags, timeouts and
 *                                        number, be of FAMILY, and errno survive a success
 *   sfp-fdcheck swap PATH FAMILY         non-blocking connect whatever its outcome: the fd
 *                                        is of FAMILY and kept its flags (vsock, no peer)
 *   sfp-fdcheck leak OK_PATH BAD_PATH N  N rounds of connect/echo/close on OK_PATH and of
 *                                        refused connects on BAD_PATH: no fd left behind
 *   sfp-fdcheck reconnect PATH PORT      connect() again on a redirected fd answers what a
 *                                        TCP socket connected to 127.0.0.1:PORT answers
 *   sfp-fdcheck refused PATH             a refused TCP target gives ECONNREFUSED, blocking
 *                                        and not, and the fd stays valid
 *   sfp-fdcheck dgram PATH               a datagram socket mapped to TCP gives EPROTOTYPE */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define SENTINEL 4242

static int failures;

static void check(bool cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void check(bool cond, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        fputs(cond ? "ok - " : "not ok - ", stdout);
        vprintf(fmt, ap);
        putchar('\n');
        fflush(stdout);
        va_end(ap);
        if (!cond)
                failures++;
}

static int family_of(const char *name) {
        if (strcmp(name, "unix") == 0)
                return AF_UNIX;
        if (strcmp(name, "inet") == 0)
                return AF_INET;
        if (strcmp(name, "inet6") == 0)
                return AF_INET6;
        if (strcmp(name, "vsock") == 0)
                return AF_VSOCK;
        return -1;
}

static struct sockaddr_un address(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        strncpy(sa.sun_path, path, sizeof sa.sun_path - 1);
        return sa;
}

static int domain_of(int fd) {
        int d = -1;
        socklen_t l = sizeof d;
        return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &d, &l) < 0 ? -1 : d;
}

static int count_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        int n = 0;
        if (!d)
                return -1;
        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

static bool wait_for(int fd, short events) {
        struct pollfd p = { .fd = fd, .events = events };
        return poll(&p, 1, 10000) == 1;
}

/* Waits for a non-blocking connect to finish; returns its SO_ERROR. */
static int finish_connect(int fd) {
        int err = ETIMEDOUT;
        socklen_t l = sizeof err;
        if (!wait_for(fd, POLLOUT) || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
                return ETIMEDOUT;
        return err;
}

/* Sends a line and checks the server's LABEL:LINE answer. */
static bool echo(int fd, const char *line) {
        char got[256];
        size_t have = 0, len = strlen(line);
        if (!wait_for(fd, POLLOUT) || write(fd, line, len) != (ssize_t)len)
                return false;
        while (have < sizeof got - 1 && !memchr(got, '\n', have)) {
                if (!wait_for(fd, POLLIN))
                        return false;
                ssize_t n = read(fd, got + have, sizeof got - 1 - have);
                if (n <= 0)
                        return false;
                have += (size_t)n;
        }
        got[have] = '\0';
        const char *colon = strchr(got, ':');
        return colon && strcmp(colon + 1, line) == 0;
}

static int make_socket(int type, bool nonblock, bool cloexec, bool via_fcntl) {
        int fd = socket(AF_UNIX, type | (via_fcntl ? 0 : (nonblock ? SOCK_NONBLOCK : 0) | (cloexec ? SOCK_CLOEXEC : 0)), 0);
        if (fd >= 0 && via_fcntl) {
                if (nonblock)
                        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
                if (cloexec)
                        fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
        return fd;
}

static bool flags_kept(int fd, bool nonblock, bool cloexec, char *why, size_t whylen) {
        int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
        if (fl < 0 || fdfl < 0) {
                snprintf(why, whylen, "fcntl: %s", strerror(errno));
                return false;
        }
        if (!!(fl & O_NONBLOCK) != nonblock || !!(fdfl & FD_CLOEXEC) != cloexec) {
                snprintf(why, whylen, "O_NONBLOCK %d (want %d), FD_CLOEXEC %d (want %d)",
                         !!(fl & O_NONBLOCK), nonblock, !!(fdfl & FD_CLOEXEC), cloexec);
                return false;
        }
        return true;
}

static void flags(const char *path, int family) {
        struct sockaddr_un sa = address(path);
        for (int i = 0; i < 8; i++) {
                bool nonblock = i & 1, cloexec = i & 2, via_fcntl = i & 4;
                char what[96], why[160] = "";
                struct timeval rcv = { .tv_sec = 7 }, snd = { .tv_sec = 9 }, got_rcv, got_snd;
                socklen_t l1 = sizeof got_rcv, l2 = sizeof got_snd;
                bool good = true;

                snprintf(what, sizeof what, "%s%s set by %s", nonblock ? "O_NONBLOCK" : "blocking",
                         cloexec ? "+FD_CLOEXEC" : "", via_fcntl ? "fcntl()" : "socket()");
                int fd = make_socket(SOCK_STREAM, nonblock, cloexec, via_fcntl);
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rcv, sizeof rcv);
                setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &snd, sizeof snd);
                errno = SENTINEL;
                int r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
                int e = errno;
                if (r == 0 && e != SENTINEL) {
                        snprintf(why, sizeof why, "errno changed to %d by a successful connect", e);
                        good = false;
                } else if (r < 0 && !(nonblock && e == EINPROGRESS)) {
                        snprintf(why, sizeof why, "connect: %s", strerror(e));
                        good = false;
                } else if (r < 0 && (e = finish_connect(fd)) != 0) {
                        snprintf(why, sizeof why, "non-blocking connect finished with %s", strerror(e));
                        good = false;
                } else if (domain_of(fd) != family) {
                        snprintf(why, sizeof why, "fd family %d, want %d", domain_of(fd), family);
                        good = false;
                } else if (!flags_kept(fd, nonblock, cloexec, why, sizeof why)) {
                        good = false;
                } else if (getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &got_rcv, &l1) < 0 ||
                           getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &got_snd, &l2) < 0 ||
                           got_rcv.tv_sec != 7 || got_snd.tv_sec != 9) {
                        snprintf(why, sizeof why, "timeouts not kept (rcv %lds, snd %lds)",
                                 (long)got_rcv.tv_sec, (long)got_snd.tv_sec);
                        good = false;
                } else if (!echo(fd, "fdcheck\n")) {
                        snprintf(why, sizeof why, "no echo through the fd");
                        good = false;
                }
                check(good, "%s: connect %s; the same fd number is now the target's family, connected, with its flags and timeouts%s%s",
                      what, r == 0 ? "returned 0" : "returned EINPROGRESS", good ? "" : ": ", why);
                close(fd);
        }
}

static void swap(const char *path, int family) {
        struct sockaddr_un sa = address(path);
        char why[160] = "";
        int fd = make_socket(SOCK_STREAM, true, true, false);
        int r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
        int e = errno;
        bool good = domain_of(fd) == family && flags_kept(fd, true, true, why, sizeof why);
        check(good, "non-blocking connect (%s) left an fd of family %d with O_NONBLOCK and FD_CLOEXEC%s%s",
              r == 0 ? "0" : strerror(e), domain_of(fd), good ? "" : ": ", why);
        close(fd);
}

static void leak(const char *ok_path, const char *bad_path, int rounds) {
        struct sockaddr_un ok = address(ok_path), bad = address(bad_path);
        int base = count_fds(), during_max = 0, echo_failures = 0, unexpected = 0;

        for (int i = 0; i < rounds; i++) {
                bool nonblock = i & 1;
                int fd = make_socket(SOCK_STREAM, nonblock, i & 2, false);
                int r = connect(fd, (struct sockaddr *)&ok, sizeof ok);
                if (r < 0 && !(nonblock && errno == EINPROGRESS))
                        unexpected++;
                int n = count_fds();
                if (n - base > during_max)
                        during_max = n - base;
                if (!echo(fd, "leak\n"))
                        echo_failures++;
                close(fd);

                fd = make_socket(SOCK_STREAM, nonblock, false, false);
                r = connect(fd, (struct sockaddr *)&bad, sizeof bad);
                if (r == 0 || (errno != ECONNREFUSED && !(nonblock && errno == EINPROGRESS)))
                        unexpected++;
                close(fd);

                fd = make_socket(SOCK_DGRAM, nonblock, false, false);
                if (connect(fd, (struct sockaddr *)&ok, sizeof ok) == 0 || errno != EPROTOTYPE)
                        unexpected++;
                close(fd);
        }
        check(during_max == 1, "while connected only the client's own fd is open (%d extra fds seen)", during_max);
        check(count_fds() == base, "after %d redirected, refused and rejected connects the fd count is back to %d (now %d)",
              rounds, base, count_fds());
        check(echo_failures == 0 && unexpected == 0, "every round behaved (%d echo failures, %d unexpected connect results)",
              echo_failures, unexpected);
}

/* connect(), then (once it finished) connect() twice more: returns the three results. */
static void connect_sequence(const struct sockaddr *sa, socklen_t len, bool nonblock, int out[3]) {
        int fd = make_socket(SOCK_STREAM, nonblock, false, false);
        if (sa->sa_family != AF_UNIX) {
                close(fd);
                fd = socket(sa->sa_family, SOCK_STREAM | (nonblock ? SOCK_NONBLOCK : 0), 0);
        }
        for (int i = 0; i < 3; i++) {
                out[i] = connect(fd, sa, len) == 0 ? 0 : errno;
                if (i == 0 && out[i] == EINPROGRESS && finish_connect(fd) != 0)
                        out[i] = -1;
        }
        close(fd);
}

/* The kernel's answers to connect() again on a TCP socket are its own business (0 once
 * after a non-blocking connect completed, then EISCONN): a redirected fd must give the same
 * ones as a TCP socket connected natively to the same server. */
static void reconnect(const char *path, const char *port) {
        struct sockaddr_un un = address(path);
        struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        for (int nonblock = 0; nonblock < 2; nonblock++) {
                int redirected[3], native[3];
                connect_sequence((struct sockaddr *)&un, sizeof un, nonblock, redirected);
                connect_sequence((struct sockaddr *)&in, sizeof in, nonblock, native);
                check(memcmp(redirected, native, sizeof native) == 0,
                      "%s: connect() three times gives what a native TCP socket gets (%d %d %d, native %d %d %d)",
                      nonblock ? "non-blocking" : "blocking", redirected[0], redirected[1], redirected[2],
                      native[0], native[1], native[2]);
        }
}

static void refused(const char *path) {
        struct sockaddr_un sa = address(path);
        int fd = make_socket(SOCK_STREAM, false, false, false);
        int r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
        int e = errno;
        check(r < 0 && e == ECONNREFUSED, "blocking connect to a closed TCP port gives ECONNREFUSED (got %s)",
              r == 0 ? "0" : strerror(e));
        check(fcntl(fd, F_GETFD) >= 0 && domain_of(fd) != AF_UNIX, "the fd stays open, swapped to the target's family");
        close(fd);

        fd = make_socket(SOCK_STREAM, true, false, false);
        r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
        e = errno;
        if (r < 0 && e == EINPROGRESS)
                e = finish_connect(fd);
        check(r < 0 && e == ECONNREFUSED, "non-blocking: ECONNREFUSED, at once or through SO_ERROR (got %s)",
              r == 0 ? "0" : strerror(e));
        close(fd);
}

static void dgram(const char *path) {
        struct sockaddr_un sa = address(path);
        int fd = make_socket(SOCK_DGRAM, false, false, false);
        int r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
        int e = errno;
        check(r < 0 && e == EPROTOTYPE, "a datagram socket mapped to TCP gets EPROTOTYPE (got %s)", r == 0 ? "0" : strerror(e));
        check(domain_of(fd) == AF_UNIX, "and its fd is left alone");
        close(fd);
}

int main(int argc, char **argv) {
        if (argc == 4 && strcmp(argv[1], "flags") == 0 && family_of(argv[3]) > 0)
                flags(argv[2], family_of(argv[3]));
        else if (argc == 4 && strcmp(argv[1], "swap") == 0 && family_of(argv[3]) > 0)
                swap(argv[2], family_of(argv[3]));
        else if (argc == 5 && strcmp(argv[1], "leak") == 0)
                leak(argv[2], argv[3], atoi(argv[4]));
        else if (argc == 4 && strcmp(argv[1], "reconnect") == 0)
                reconnect(argv[2], argv[3]);
        else if (argc == 3 && strcmp(argv[1], "refused") == 0)
                refused(argv[2]);
        else if (argc == 3 && strcmp(argv[1], "dgram") == 0)
                dgram(argv[2]);
        else {
                fprintf(stderr, "usage: see the comment at the top of sfp_fdcheck.c\n");
                return 64;
        }
        return failures ? 1 : 0;
}
