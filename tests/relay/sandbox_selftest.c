/* The relay's seccomp sandbox (relay/sandbox.c), from outside: each case runs in a child that
 * applies the filter and then makes one system call. What the relay does at steady state must
 * still work; what it never does must kill the child with SIGSYS. TAP on stdout.
 * (That the allowlist is enough for the real relay is shown by the e2e suites, which run with
 * the sandbox on.) */
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
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf/log.h"
#include "relay/sandbox.h"

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

static void *thread_main(void *arg) {
        return arg;
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
        return 0;
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

static int forbidden_open_for_writing(void) {
        open("/tmp/sf-sandbox-selftest", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        return 13;
}

static int forbidden_packet_socket(void) {
        socket(AF_PACKET, SOCK_RAW, 0);
        return 14;
}

static int forbidden_raw_inet_socket(void) {
        socket(AF_INET, SOCK_RAW, 1);
        return 15;
}

static int forbidden_kill_other(void) {
        kill(getppid(), 0);
        return 16;
}

static int forbidden_setuid(void) {
        syscall(SYS_setuid, 0);
        return 17;
}

static const struct {
        const char *name;
        int (*fn)(void);
        int expect_signal; /* 0: must exit 0 */
} cases[] = {
        { "steady state: sockets, pipes and splice, threads, getaddrinfo, reading /proc, malloc", steady_state, 0 },
        { "execve kills", forbidden_execve, SIGSYS },
        { "fork (clone without CLONE_THREAD) kills", forbidden_fork, SIGSYS },
        { "ptrace kills", forbidden_ptrace, SIGSYS },
        { "open for writing kills", forbidden_open_for_writing, SIGSYS },
        { "AF_PACKET socket kills", forbidden_packet_socket, SIGSYS },
        { "raw AF_INET socket kills", forbidden_raw_inet_socket, SIGSYS },
        { "kill() of another process kills", forbidden_kill_other, SIGSYS },
        { "setuid kills", forbidden_setuid, SIGSYS },
};

int main(void) {
        size_t n = sizeof cases / sizeof cases[0];
        int failed = 0;

        sf_log_setup(SF_LOG_ERROR, SF_LOG_TEXT);
        if (!sf_sandbox_available()) {
                printf("1..0 # SKIP built without libseccomp (-Dseccomp=disabled or a sanitizer build)\n");
                return 0;
        }
        printf("TAP version 13\n1..%zu\n", n);
        fflush(stdout);
        for (size_t i = 0; i < n; i++) {
                pid_t pid = fork();
                if (pid < 0) {
                        perror("fork");
                        return 1;
                }
                if (pid == 0) {
                        int r = sf_sandbox_apply();
                        if (r < 0)
                                _exit(100);
                        _exit(cases[i].fn());
                }
                int st = 0;
                while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                        ;
                bool ok = cases[i].expect_signal ? WIFSIGNALED(st) && WTERMSIG(st) == cases[i].expect_signal
                                                 : WIFEXITED(st) && WEXITSTATUS(st) == 0;
                if (!ok)
                        failed++;
                printf("%s %zu - %s\n", ok ? "ok" : "not ok", i + 1, cases[i].name);
                if (WIFSIGNALED(st))
                        printf("# killed by signal %d (%s)\n", WTERMSIG(st), strsignal(WTERMSIG(st)));
                else
                        printf("# exited %d%s\n", WEXITSTATUS(st),
                               WEXITSTATUS(st) == 100 ? " (the filter could not be applied)" : "");
                fflush(stdout);
        }
        unlink("/tmp/sf-sandbox-selftest");
        return failed ? 1 : 0;
}
