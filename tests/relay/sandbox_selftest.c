/* The relay's seccomp sandbox (relay/sys/sandbox.c), from outside: each case runs in a child that
 * sets the sandbox up as the relay does (sf_sandbox_prepare, a libuv loop, sf_sandbox_confine
 * with one pinned socket directory, sf_sandbox_apply) and then makes its system calls. What the
 * relay does at steady state must still work, with the loop running (libuv >= 1.45 would use
 * io_uring there); hostile calls must kill the child
 * with SIGSYS; any other call must fail with ENOSYS and be logged once, by name, while the
 * child lives on. TAP on stdout. (That the allowlist is enough for the real relay is shown by
 * the e2e suites, which run with the sandbox on.) */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "conf/log.h"
#include "relay/sys/sandbox.h"

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

static void *thread_main(void *arg) {
        return arg;
}

static uv_loop_t loop;
static pid_t parent; /* getppid() itself is refused */
static bool have_landlock; /* this kernel has it (probed before the cases) */

/* The pinned socket directory (DIR/pinned) and another one (DIR/other), each holding a file
 * named victim, made afresh for each case. */
static char dir[64], pinned[96], other[96];
static int pinned_fd = -1;

static int bind_at(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                return -1;
        int r = bind(s, (struct sockaddr *)&sa, sizeof sa);
        int e = errno;
        close(s);
        errno = e;
        return r;
}

static bool exists(const char *d, const char *name) {
        char p[160];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", d, name);
        return lstat(p, &st) == 0;
}

/* The loop at work: a pipe through libuv (epoll_ctl, which libuv >= 1.45 batches
 * through io_uring) and a name resolved on the threadpool (libuv >= 1.50 names its threads). */
struct loop_check {
        uv_pipe_t a, b;
        uv_write_t w;
        uv_getaddrinfo_t gai;
        char buf[8];
        size_t got;
        int resolved;
};

static void on_loop_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
        struct loop_check *c = h->data;
        (void)suggested;
        *buf = uv_buf_init(c->buf + c->got, (unsigned)(sizeof c->buf - c->got));
}

static void on_loop_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
        struct loop_check *c = s->data;
        (void)buf;
        if (n > 0)
                c->got += (size_t)n;
        if (n < 0 || c->got >= 4)
                uv_read_stop(s);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
        struct loop_check *c = req->data;
        c->resolved = status == 0 ? 1 : -1;
        uv_freeaddrinfo(res);
}

static int loop_at_work(void) {
        struct loop_check c = { 0 };
        int sv[2];
        if (pipe2(sv, O_CLOEXEC) < 0)
                return 6;
        uv_pipe_init(&loop, &c.a, 0);
        uv_pipe_init(&loop, &c.b, 0);
        c.a.data = c.b.data = c.gai.data = &c;
        uv_buf_t out = uv_buf_init("ping", 4);
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
        if (uv_pipe_open(&c.a, sv[1]) < 0 || uv_pipe_open(&c.b, sv[0]) < 0 ||
            uv_read_start((uv_stream_t *)&c.b, on_loop_alloc, on_loop_read) < 0 ||
            uv_write(&c.w, (uv_stream_t *)&c.a, &out, 1, NULL) < 0 ||
            uv_getaddrinfo(&loop, &c.gai, on_resolved, "localhost", "80", &hints) < 0)
                return 7;
        uv_run(&loop, UV_RUN_DEFAULT);
        if (c.got != 4 || memcmp(c.buf, "ping", 4) != 0 || c.resolved != 1)
                return 8;
        uv_close((uv_handle_t *)&c.a, NULL);
        uv_close((uv_handle_t *)&c.b, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        return 0;
}

/* Allowed: what the relay does once it runs. Exits 0 when all of it worked. */
static int steady_state(void) {
        int sv[2];
        char b = 0;
        pthread_t t;
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG }, *res;
        void *ret = NULL;

        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s < 0 || close(s) < 0)
                return 1;
        s = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s >= 0)
                close(s);
        if (pipe2(sv, O_CLOEXEC) < 0 || write(sv[1], "x", 1) != 1 || read(sv[0], &b, 1) != 1 || b != 'x')
                return 2;
        /* Bulk transfers splice through a pipe sized with fcntl. */
        int sp[2];
        if (pipe2(sp, O_CLOEXEC) < 0 || fcntl(sv[1], F_SETPIPE_SZ, 1 << 16) < 0 || write(sp[1], "y", 1) != 1 ||
            splice(sp[0], NULL, sv[1], NULL, 1, SPLICE_F_NONBLOCK) != 1 || read(sv[0], &b, 1) != 1 || b != 'y')
                return 5;
        close(sp[0]);
        close(sp[1]);
        close(sv[0]);
        close(sv[1]);
        /* The libuv threadpool starts threads and resolves names there. */
        if (pthread_create(&t, NULL, thread_main, &b) != 0 || pthread_join(t, &ret) != 0 || ret != &b)
                return 3;
        if (getaddrinfo("localhost", "80", &hints, &res) == 0)
                freeaddrinfo(res);
        int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || close(fd) < 0)
                return 4;
        void *p = malloc(1 << 20);
        free(p);
        return loop_at_work();
}

static int forbidden_execve(void) {
        char *argv[] = { "/bin/true", NULL };
        execve(argv[0], argv, NULL);
        return 10;
}

static int forbidden_fork(void) {
        pid_t p = fork(); /* clone() without CLONE_THREAD */
        if (p == 0)
                _exit(0);
        return 11;
}

static int forbidden_ptrace(void) {
        ptrace(PTRACE_TRACEME, 0, NULL, NULL);
        return 12;
}

/* With Landlock: a socket made in the pinned directory under a hidden name, linked to its path
 * and the hidden name removed, as the relay's listeners (and a reload's) are, then removed
 * through the pinned fd. */
static int socket_made_and_removed_in_the_pinned_directory(void) {
        char p[160];
        snprintf(p, sizeof p, "%s/.hidden", pinned);
        if (bind_at(p) < 0)
                return 30;
        if (linkat(pinned_fd, ".hidden", pinned_fd, "s.sock", 0) < 0 || unlinkat(pinned_fd, ".hidden", 0) < 0)
                return 29;
        if (!exists(pinned, "s.sock") || unlinkat(pinned_fd, "s.sock", 0) < 0 || exists(pinned, "s.sock"))
                return 31;
        return 0;
}

/* Nothing removed outside it, not through ".." from the pinned fd, not by an absolute path. */
static int nothing_removed_elsewhere(void) {
        char p[160];
        snprintf(p, sizeof p, "%s/victim", other);
        if (unlinkat(pinned_fd, "../other/victim", 0) == 0 || errno != EACCES)
                return 32;
        if (unlinkat(AT_FDCWD, p, 0) == 0 || errno != EACCES)
                return 33;
        return exists(other, "victim") ? 0 : 35;
}

/* No socket planted outside it: not bound there, not linked there from the pinned directory;
 * nothing else linked into it. */
static int no_socket_bound_elsewhere(void) {
        char p[160];
        snprintf(p, sizeof p, "%s/planted.sock", other);
        if (bind_at(p) == 0 || errno != EACCES)
                return 36;
        snprintf(p, sizeof p, "%s/../planted.sock", pinned);
        if (bind_at(p) == 0 || errno != EACCES)
                return 37;
        snprintf(p, sizeof p, "%s/s.sock", pinned);
        if (bind_at(p) < 0)
                return 39;
        /* EXDEV where only the right to link across directories is missing, else EACCES. */
        if (linkat(pinned_fd, "s.sock", pinned_fd, "../other/planted.sock", 0) == 0 ||
            (errno != EACCES && errno != EXDEV))
                return 43;
        if (linkat(pinned_fd, "../other/victim", pinned_fd, "victim2", 0) == 0 || (errno != EACCES && errno != EXDEV))
                return 44;
        return exists(other, "planted.sock") || exists(dir, "planted.sock") || exists(pinned, "victim2") ? 38 : 0;
}

/* Where the kernel (or a container's profile) has no Landlock: no socket bound and no file
 * removed once started, anywhere; names still resolve (getaddrinfo's AI_ADDRCONFIG binds a
 * netlink socket, and assumes both families when it cannot). */
static int without_landlock_nothing_bound_or_removed(void) {
        char p[160];
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG }, *res;
        snprintf(p, sizeof p, "%s/s.sock", pinned);
        if (bind_at(p) == 0 || errno != EACCES)
                return 40;
        if (unlinkat(pinned_fd, "victim", 0) == 0 || errno != EACCES || !exists(pinned, "victim"))
                return 41;
        if (linkat(pinned_fd, "victim", pinned_fd, "victim2", 0) == 0 || errno != EACCES || exists(pinned, "victim2"))
                return 45;
        if (getaddrinfo("localhost", "80", &hints, &res) != 0)
                return 42;
        freeaddrinfo(res);
        return loop_at_work();
}

/* Refused calls: 0 when the call failed with ENOSYS. */
static int enosys(long r) {
        return r == -1 && errno == ENOSYS ? 0 : 20;
}

static int refused_open_for_writing(void) {
        return enosys(open("/tmp/sf-sandbox-selftest", O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
}

static int refused_unlink_by_path(void) {
        char p[160];
        snprintf(p, sizeof p, "%s/victim", pinned);
        return enosys(unlink(p)) || !exists(pinned, "victim");
}

static int refused_packet_socket(void) {
        return enosys(socket(AF_PACKET, SOCK_RAW, 0));
}

static int refused_raw_inet_socket(void) {
        return enosys(socket(AF_INET, SOCK_RAW, 1));
}

/* Made three times, logged once; the loop goes on working afterwards. */
static int refused_getppid_repeatedly(void) {
        for (int i = 0; i < 3; i++)
                if (enosys(syscall(SYS_getppid)) != 0)
                        return 21;
        uv_run(&loop, UV_RUN_NOWAIT);
        if (enosys(syscall(SYS_getppid)) != 0)
                return 22;
        return loop_at_work();
}

/* From a threadpool thread: the same ENOSYS, and the log line once the work is done. */
static void getppid_work(uv_work_t *req) {
        req->data = (void *)(intptr_t)enosys(syscall(SYS_getppid));
}

static int refused_in_a_worker_thread(void) {
        uv_work_t req;
        if (uv_queue_work(&loop, &req, getppid_work, NULL) < 0)
                return 23;
        uv_run(&loop, UV_RUN_DEFAULT);
        return (int)(intptr_t)req.data;
}

/* io_uring is refused silently: libuv >= 1.45 tries it on every loop. */
static int io_uring_setup_silently_enosys(void) {
#ifdef SYS_io_uring_setup
        char params[120] = { 0 };
        return enosys(syscall(SYS_io_uring_setup, 4, params));
#else
        return 0;
#endif
}

static int forbidden_kill_other(void) {
        kill(parent, 0);
        return 16;
}

static int forbidden_setuid(void) {
        syscall(SYS_setuid, 0);
        return 17;
}

static int forbidden_tgkill_other(void) {
        syscall(SYS_tgkill, parent, parent, 0);
        return 18;
}

/* As a container's seccomp profile that does not know Landlock: landlock_create_ruleset fails
 * with ENOSYS (native system calls only, as in tests/relay/deny_vsock.c). */
static int deny_landlock(void) {
        struct sock_filter filter[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_landlock_create_ruleset, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = { .len = sizeof filter / sizeof filter[0], .filter = filter };
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
                return -errno;
        return 0;
}

static const struct {
        const char *name;
        int (*fn)(void);
        int expect_signal; /* 0: must exit 0 */
        const char *logged; /* with expect_signal 0: the refused call logged exactly once */
        int landlock;       /* 1: a test of Landlock (SKIP without it); -1: the child cannot use it */
} cases[] = {
        { "steady state: sockets, pipes and splice, threads, getaddrinfo, reading /proc, malloc, a libuv loop "
          "with its threadpool",
          steady_state, 0, NULL },
        { "execve kills", forbidden_execve, SIGSYS, NULL },
        { "fork (clone without CLONE_THREAD) kills", forbidden_fork, SIGSYS, NULL },
        { "ptrace kills", forbidden_ptrace, SIGSYS, NULL },
        { "kill() of another process kills", forbidden_kill_other, SIGSYS, NULL },
        { "tgkill() of another process kills", forbidden_tgkill_other, SIGSYS, NULL },
        { "setuid kills", forbidden_setuid, SIGSYS, NULL },
        { "open for writing fails with ENOSYS, logged", refused_open_for_writing, 0, " open" },
        { "AF_PACKET socket fails with ENOSYS, logged", refused_packet_socket, 0, " socket (" },
        { "raw AF_INET socket fails with ENOSYS, logged", refused_raw_inet_socket, 0, " socket (" },
        { "getppid four times: ENOSYS each time, logged once, the loop works on", refused_getppid_repeatedly, 0,
          " getppid (" },
        { "getppid in a threadpool thread: ENOSYS, logged", refused_in_a_worker_thread, 0, " getppid (" },
        { "io_uring_setup fails with ENOSYS, not logged", io_uring_setup_silently_enosys, 0, "" },
        { "Landlock: a socket is bound, linked to its path and removed in the pinned directory",
          socket_made_and_removed_in_the_pinned_directory, 0, "", 1 },
        { "Landlock: no file removed outside the pinned directory, not through .. either",
          nothing_removed_elsewhere, 0, "", 1 },
        { "Landlock: no socket bound or linked outside the pinned directory", no_socket_bound_elsewhere, 0, "", 1 },
        { "unlink() by path fails with ENOSYS, logged", refused_unlink_by_path, 0, " unlink (" },
        { "without Landlock: nothing bound, linked or removed once started, names still resolve",
          without_landlock_nothing_bound_or_removed, 0, "", -1 },
};

/* The child: the relay's order (prepare, loop, confine, apply), the case, then the loop's last
 * round, which logs what was refused. Its stderr (the log) goes to log_fd. */
static int child(size_t i, int log_fd) {
        dup2(log_fd, STDERR_FILENO);
        pinned_fd = open(pinned, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (pinned_fd < 0 || (cases[i].landlock < 0 && deny_landlock() < 0))
                return 101;
        bool landlock = have_landlock && cases[i].landlock >= 0;
        if (sf_sandbox_prepare() < 0 || uv_loop_init(&loop) < 0 || sf_sandbox_confine(&pinned_fd, 1) < 0 ||
            sf_sandbox_confined() != landlock || sf_sandbox_apply(&loop) < 0)
                return 100;
        int r = cases[i].fn();
        sf_sandbox_close();
        uv_run(&loop, UV_RUN_DEFAULT);
        return r;
}

/* DIR/pinned and DIR/other, each with a file named victim. */
static int fresh_dirs(void) {
        char p[160];
        snprintf(p, sizeof p, "rm -rf %s/pinned %s/other", dir, dir);
        if (system(p) != 0 || mkdir(pinned, 0755) < 0 || mkdir(other, 0755) < 0)
                return -1;
        for (int k = 0; k < 2; k++) {
                snprintf(p, sizeof p, "%s/victim", k ? other : pinned);
                int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
                if (fd < 0)
                        return -1;
                close(fd);
        }
        return 0;
}

static size_t count(const char *hay, const char *needle) {
        size_t n = 0;
        for (const char *p = hay; (p = strstr(p, needle)); p++)
                n++;
        return n;
}

/* A refused call's log line: "refused system call NAME (NR); it failed with ENOSYS", once,
 * and no other refusal. */
static bool log_ok(const char *log, const char *logged) {
        size_t lines = count(log, "seccomp sandbox: refused system call");
        if (!logged || !*logged)
                return lines == 0;
        char want[96];
        snprintf(want, sizeof want, "seccomp sandbox: refused system call%s", logged);
        return lines == 1 && count(log, want) == 1 && count(log, "it failed with ENOSYS") == 1;
}

int main(void) {
        size_t n = sizeof cases / sizeof cases[0];
        int failed = 0;

        sf_log_setup(SF_LOG_WARN, SF_LOG_TEXT);
        parent = getpid();
        if (!sf_sandbox_available()) {
                printf("1..0 # SKIP built without libseccomp (-Dseccomp=disabled or a sanitizer build)\n");
                return 0;
        }
        snprintf(dir, sizeof dir, "/tmp/sf-sandbox-selftest.XXXXXX");
        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                return 1;
        }
        chmod(dir, 0755);
        have_landlock = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) >= 0;
        snprintf(pinned, sizeof pinned, "%s/pinned", dir);
        snprintf(other, sizeof other, "%s/other", dir);
        printf("TAP version 13\n1..%zu\n", n);
        fflush(stdout);
        for (size_t i = 0; i < n; i++) {
                if (fresh_dirs() < 0) {
                        perror(dir);
                        return 1;
                }
                if (cases[i].landlock > 0 && !have_landlock) {
                        printf("ok %zu - %s # SKIP this kernel has no Landlock\n", i + 1, cases[i].name);
                        continue;
                }
                FILE *log = tmpfile();
                if (!log) {
                        perror("tmpfile");
                        return 1;
                }
                fflush(stdout);
                pid_t pid = fork();
                if (pid < 0) {
                        perror("fork");
                        return 1;
                }
                if (pid == 0)
                        _exit(child(i, fileno(log)));
                int st = 0;
                while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                        ;
                char text[4096] = "";
                rewind(log);
                text[fread(text, 1, sizeof text - 1, log)] = '\0';
                fclose(log);
                bool ok = cases[i].expect_signal ? WIFSIGNALED(st) && WTERMSIG(st) == cases[i].expect_signal
                                                 : WIFEXITED(st) && WEXITSTATUS(st) == 0 &&
                                                           log_ok(text, cases[i].logged);
                if (!ok)
                        failed++;
                printf("%s %zu - %s\n", ok ? "ok" : "not ok", i + 1, cases[i].name);
                for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
                        printf("# log: %s\n", line);
                if (WIFSIGNALED(st))
                        printf("# killed by signal %d (%s)\n", WTERMSIG(st), strsignal(WTERMSIG(st)));
                else
                        printf("# exited %d%s\n", WEXITSTATUS(st),
                               WEXITSTATUS(st) == 100 ? " (the sandbox could not be set up as expected)" : "");
                fflush(stdout);
        }
        unlink("/tmp/sf-sandbox-selftest");
        char rm[96];
        snprintf(rm, sizeof rm, "rm -rf %s", dir);
        if (system(rm) != 0)
                fprintf(stderr, "cannot remove %s\n", dir);
        return failed ? 1 : 0;
}
