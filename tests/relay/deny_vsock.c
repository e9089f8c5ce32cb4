/* Runs a command the way Docker's default seccomp profile would: socket(AF_VSOCK, ...) fails
 * with EPERM, everything else is allowed. For the tests of the message that names the cause.
 * Usage: sf-deny-vsock CMD [ARG]... */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

int main(int argc, char **argv) {
        /* Only native system calls are filtered: the commands under test are native binaries. */
        struct sock_filter filter[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 3),
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_VSOCK, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = { .len = sizeof filter / sizeof filter[0], .filter = filter };

        if (argc < 2) {
                fprintf(stderr, "usage: sf-deny-vsock CMD [ARG]...\n");
                return 64;
        }
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0) {
                fprintf(stderr, "sf-deny-vsock: cannot install the seccomp filter: %s\n", strerror(errno));
                return 77;
        }
        execvp(argv[1], argv + 1);
        fprintf(stderr, "sf-deny-vsock: %s: %s\n", argv[1], strerror(errno));
        return 127;
}
