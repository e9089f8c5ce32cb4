/* sf-churn: the C side of tests/e2e/test_faults.py, where Python would be too slow.
 *
 *   sf-churn echo-server PATH   epoll echo server on a unix socket path (a stale socket there
 *                               is replaced); prints "listening" once it is; runs until killed
 *   sf-churn churn PATH N       N sequential connections: connect, 1 byte there and back, close;
 *                               prints "n=N errors=E seconds=S" (exit 1 on any error)
 *   sf-churn hold PATH N        N connections open at once, each checked with its own 4 bytes
 *                               twice (once as it opens, once more when all are open); prints
 *                               "open=N", waits for a line on stdin, closes them all, prints
 *                               "closed" (exit 1 on any error)
 *   sf-churn source-server PATH  epoll server on a unix socket path that writes pseudo-random
 *                               bytes to each client for as long as it takes them (a download)
 *   sf-churn abort PATH N P     N connections, P at a time (P processes): connect, read a few
 *                               bytes, close with the rest unread (a client that goes away mid-
 *                               stream); prints "n=N served=S closed=C errors=E seconds=T", where
 *                               served read bytes, closed got EOF or a reset first, errors could
 *                               not connect (exit 1 on any error)
 *
 * Every mode raises its descriptor limit to the hard limit and is bounded by an alarm. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void raise_nofile(void) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
}

static socklen_t unix_addr(const char *path, struct sockaddr_un *sa) {
        memset(sa, 0, sizeof *sa);
        sa->sun_family = AF_UNIX;
        if (strlen(path) >= sizeof sa->sun_path) {
                fprintf(stderr, "sf-churn: path too long: %s\n", path);
                exit(2);
        }
        strcpy(sa->sun_path, path);
        return (socklen_t)sizeof *sa;
}

static double now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A blocking client socket with 10 s send and receive timeouts. */
static int dial(const struct sockaddr_un *sa, socklen_t len) {
        struct timeval tv = { .tv_sec = 10 };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -1;
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, (const struct sockaddr *)sa, len) < 0) {
                int e = errno;
                close(fd);
                errno = e;
                return -1;
        }
        return fd;
}

static int recv_exact(int fd, void *buf, size_t n) {
        size_t got = 0;
        while (got < n) {
                ssize_t r = recv(fd, (char *)buf + got, n - got, 0);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0) {
                        if (r == 0)
                                errno = EPIPE;
                        return -1;
                }
                got += (size_t)r;
        }
        return 0;
}

/* A listening socket on path, a stale socket there replaced; -1 with the reason printed. */
static int listen_unix(const char *path, const char *who) {
        struct sockaddr_un sa;
        socklen_t len = unix_addr(path, &sa);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
                unlink(path);
        int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (ls < 0 || bind(ls, (struct sockaddr *)&sa, len) < 0 || listen(ls, 4096) < 0) {
                fprintf(stderr, "sf-churn %s: listen %s: %s\n", who, path, strerror(errno));
                return -1;
        }
        return ls;
}

/* A client's turn when epoll says it is ready; false when it is done (it is closed then). */
typedef bool (*turn_fn)(int fd);

/* An epoll server on a unix socket path: each client is watched for events and given turns. */
static int serve(const char *path, const char *who, uint32_t events, turn_fn turn) {
        int ls = listen_unix(path, who);
        if (ls < 0)
                return 1;
        int ep = epoll_create1(EPOLL_CLOEXEC);
        struct epoll_event ev = { .events = EPOLLIN, .data.fd = ls };
        epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
        signal(SIGPIPE, SIG_IGN);
        printf("listening\n");
        fflush(stdout);
        struct epoll_event evs[256];
        for (;;) {
                int n = epoll_wait(ep, evs, 256, -1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        fprintf(stderr, "sf-churn %s: epoll_wait: %s\n", who, strerror(errno));
                        return 1;
                }
                for (int i = 0; i < n; i++) {
                        int fd = evs[i].data.fd;
                        if (fd == ls) {
                                int c;
                                while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                                        struct epoll_event cev = { .events = events, .data.fd = c };
                                        epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                                }
                                continue;
                        }
                        if (!turn(fd))
                                close(fd); /* EOF, error: the kernel drops it from the epoll set */
                }
        }
}

/* Echo what is there; small messages only, so a short write is an error. */
static bool echo_turn(int fd) {
        static char buf[65536];
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r > 0 && send(fd, buf, (size_t)r, MSG_NOSIGNAL) == r)
                return true;
        return r < 0 && (errno == EAGAIN || errno == EINTR);
}

/* What the source server writes, again and again: pseudo-random bytes (xorshift32). */
static char chunk[65536];

static bool source_turn(int fd) {
        ssize_t w;
        while ((w = send(fd, chunk, sizeof chunk, MSG_NOSIGNAL)) > 0)
                ;
        return w < 0 && (errno == EAGAIN || errno == EINTR);
}

static int source_server(const char *path) {
        uint32_t x = 2463534242u;
        for (size_t i = 0; i < sizeof chunk; i++) {
                x ^= x << 13, x ^= x >> 17, x ^= x << 5;
                chunk[i] = (char)x;
        }
        return serve(path, "source-server", EPOLLOUT, source_turn);
}

static int churn(const char *path, long n) {
        struct sockaddr_un sa;
        socklen_t len = unix_addr(path, &sa);
        long errors = 0;
        double t0 = now_s();
        for (long i = 0; i < n; i++) {
                char b = (char)('a' + i % 26), r = 0;
                int fd = dial(&sa, len);
                if (fd < 0 || send(fd, &b, 1, MSG_NOSIGNAL) != 1 || recv_exact(fd, &r, 1) < 0 || r != b) {
                        if (errors++ < 5)
                                fprintf(stderr, "sf-churn: connection %ld: %s\n", i, strerror(errno));
                }
                if (fd >= 0)
                        close(fd);
        }
        printf("n=%ld errors=%ld seconds=%.3f\n", n, errors, now_s() - t0);
        return errors ? 1 : 0;
}

static int hold(const char *path, long n) {
        struct sockaddr_un sa;
        socklen_t len = unix_addr(path, &sa);
        int *fds = calloc((size_t)n, sizeof *fds);
        long errors = 0;
        if (!fds)
                return 2;
        for (long i = 0; i < n; i++) {
                uint32_t v = (uint32_t)i, r = 0;
                fds[i] = dial(&sa, len);
                if (fds[i] < 0 || send(fds[i], &v, 4, MSG_NOSIGNAL) != 4 || recv_exact(fds[i], &r, 4) < 0 || r != v) {
                        fprintf(stderr, "sf-churn hold: connection %ld: %s\n", i, strerror(errno));
                        errors++;
                        break;
                }
        }
        /* All open: every one of them still carries bytes. */
        for (long i = 0; i < n && !errors; i++) {
                uint32_t v = (uint32_t)(i ^ 0x5a5a5a5a);
                if (send(fds[i], &v, 4, MSG_NOSIGNAL) != 4)
                        errors++;
        }
        for (long i = 0; i < n && !errors; i++) {
                uint32_t r = 0;
                if (recv_exact(fds[i], &r, 4) < 0 || r != (uint32_t)(i ^ 0x5a5a5a5a)) {
                        fprintf(stderr, "sf-churn hold: second round, connection %ld: %s\n", i, strerror(errno));
                        errors++;
                }
        }
        if (!errors) {
                char line[16];
                printf("open=%ld\n", n);
                fflush(stdout);
                if (!fgets(line, sizeof line, stdin))
                        fprintf(stderr, "sf-churn hold: stdin closed\n");
        }
        for (long i = 0; i < n; i++)
                if (fds[i] > 0)
                        close(fds[i]);
        free(fds);
        printf("closed\n");
        return errors ? 1 : 0;
}


/* One process's share of abort: its counts go to out[0..2] (served, closed, errors). */
static void abort_some(const struct sockaddr_un *sa, socklen_t len, long n, long *out) {
        char buf[16];
        for (long i = 0; i < n; i++) {
                int fd = dial(sa, len);
                if (fd < 0) {
                        if (out[2]++ < 3)
                                fprintf(stderr, "sf-churn abort: connect: %s\n", strerror(errno));
                        continue;
                }
                ssize_t r;
                do
                        r = recv(fd, buf, sizeof buf, 0);
                while (r < 0 && errno == EINTR);
                if (r > 0)
                        out[0]++;
                else
                        out[1]++;
                close(fd); /* with the rest of the download unread */
        }
}

static int abort_clients(const char *path, long n, long procs) {
        struct sockaddr_un sa;
        socklen_t len = unix_addr(path, &sa);
        if (procs < 1)
                procs = 1;
        long *counts = mmap(NULL, (size_t)procs * 3 * sizeof *counts, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (counts == MAP_FAILED)
                return 2;
        memset(counts, 0, (size_t)procs * 3 * sizeof *counts);
        double t0 = now_s();
        for (long p = 0; p < procs; p++) {
                pid_t pid = fork();
                if (pid == 0) {
                        abort_some(&sa, len, n / procs + (p < n % procs), counts + 3 * p);
                        _exit(0);
                }
                if (pid < 0) {
                        perror("sf-churn abort: fork");
                        return 2;
                }
        }
        while (wait(NULL) > 0 || errno == EINTR)
                ;
        long served = 0, closed = 0, errors = 0;
        for (long p = 0; p < procs; p++) {
                served += counts[3 * p];
                closed += counts[3 * p + 1];
                errors += counts[3 * p + 2];
        }
        printf("n=%ld served=%ld closed=%ld errors=%ld seconds=%.3f\n", n, served, closed, errors, now_s() - t0);
        return errors ? 1 : 0;
}

int main(int argc, char **argv) {
        raise_nofile();
        if (argc == 3 && strcmp(argv[1], "echo-server") == 0)
                return serve(argv[2], "echo-server", EPOLLIN, echo_turn);
        if (argc == 3 && strcmp(argv[1], "source-server") == 0)
                return source_server(argv[2]);
        alarm(600);
        if (argc == 4 && strcmp(argv[1], "churn") == 0)
                return churn(argv[2], atol(argv[3]));
        if (argc == 4 && strcmp(argv[1], "hold") == 0)
                return hold(argv[2], atol(argv[3]));
        if (argc == 5 && strcmp(argv[1], "abort") == 0)
                return abort_clients(argv[2], atol(argv[3]), atol(argv[4]));
        fprintf(stderr, "usage: sf-churn echo-server PATH | source-server PATH | churn PATH N | hold PATH N | "
                        "abort PATH N P\n");
        return 64;
}
