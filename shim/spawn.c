#include "shim/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shim/privs.h"

enum stage { STAGE_PRIVS = 1, STAGE_EXEC };

/* What the child writes to the close-on-exec pipe when it cannot exec; a successful exec
 * closes the pipe with nothing written. */
struct report {
        int stage;
        int err;
};

static void report_write(int fd, enum stage stage, int err) {
        struct report r = { .stage = stage, .err = err };
        ssize_t w = write(fd, &r, sizeof r);
        (void)w;
}

/* Runs in the child between fork() and exec(), with every signal blocked. */
__attribute__((noreturn)) static void child_run(char *const *argv, const struct sf_conf *c, int fd) {
        setpgid(0, 0);
        /* With SIGTTOU blocked a background process group may take the terminal. */
        if (isatty(STDIN_FILENO) && tcsetpgrp(STDIN_FILENO, getpgrp()) < 0 && errno != ENOTTY && errno != ENXIO)
                sf_log_warn("cannot give the payload the terminal's foreground: %s", strerror(errno));

        int r = sf_privs_drop(c);
        if (r < 0) {
                report_write(fd, STAGE_PRIVS, -r);
                _exit(1);
        }

        struct sigaction sa = { .sa_handler = SIG_DFL };
        for (int sig = 1; sig < NSIG; sig++)
                if (sig != SIGKILL && sig != SIGSTOP)
                        sigaction(sig, &sa, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);

        execvp(argv[0], argv);
        int err = errno;
        report_write(fd, STAGE_EXEC, err);
        _exit(err == ENOENT ? 127 : 126);
}

static int exec_failed(const char *cmd, int err) {
        switch (err) {
        case ENOENT:
                if (strchr(cmd, '/'))
                        sf_log_error("cannot run %s: no such file", cmd);
                else
                        sf_log_error("cannot run %s: command not found in PATH (%s)", cmd,
                                     getenv("PATH") ? getenv("PATH") : "unset");
                return 127;
        case EACCES:
                sf_log_error("cannot run %s: permission denied (not an executable file, or a directory on the way is not searchable)",
                             cmd);
                return 126;
        case ENOEXEC:
                sf_log_error("cannot run %s: not an executable format", cmd);
                return 126;
        default:
                sf_log_error("cannot run %s: %s", cmd, strerror(err));
                return 126;
        }
}

int sf_spawn(char *const *argv, const struct sf_conf *c, pid_t *pid) {
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) < 0) {
                sf_log_error("cannot start %s: pipe: %s", argv[0], strerror(errno));
                return 1;
        }

        /* Blocked across fork() so that no handler of this process (libuv's among them) runs
         * in the child before the child has reset them all. */
        sigset_t all, old;
        sigfillset(&all);
        sigprocmask(SIG_SETMASK, &all, &old);
        pid_t child = fork();
        if (child == 0) {
                close(fds[0]);
                child_run(argv, c, fds[1]);
        }
        int fork_err = errno;
        sigprocmask(SIG_SETMASK, &old, NULL);
        close(fds[1]);
        if (child < 0) {
                close(fds[0]);
                sf_log_error("cannot start %s: fork: %s", argv[0], strerror(fork_err));
                return 1;
        }
        /* Also set here: whichever of the two runs first, the group exists before anyone
         * signals it. The child may have exec'd already, which makes this fail harmlessly. */
        setpgid(child, child);

        struct report r;
        ssize_t n;
        do
                n = read(fds[0], &r, sizeof r);
        while (n < 0 && errno == EINTR);
        close(fds[0]);
        if (n != (ssize_t)sizeof r) {
                *pid = child;
                return 0;
        }

        while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
                ;
        if (r.stage == STAGE_EXEC)
                return exec_failed(argv[0], r.err);
        sf_log_error("%s not started: cannot drop privileges (%s)", argv[0], strerror(r.err));
        return 1;
}
