#include "relay/sandbox.h"

#include <errno.h>
#include <string.h>

#include "conf/log.h"

#ifdef SF_HAVE_SECCOMP

#include <fcntl.h>
#include <linux/netlink.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define SF_UNDER_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#else
#include <stdlib.h>
#define SF_UNDER_VALGRIND() (getenv("LD_PRELOAD") && strstr(getenv("LD_PRELOAD"), "/vgpreload_"))
#endif

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

/* Allowed whatever their arguments. Collected with strace -f over the relay, auth and fault
 * suites (a relay pair with auth, DNS names, the control socket, drain and stop). */
static const int allowed[] = {
        /* the loop and moving bytes */
        SCMP_SYS(epoll_wait), SCMP_SYS(epoll_pwait), SCMP_SYS(epoll_ctl), SCMP_SYS(epoll_create1),
        SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev), SCMP_SYS(close),
        SCMP_SYS(accept4), SCMP_SYS(connect), SCMP_SYS(shutdown), SCMP_SYS(getsockopt),
        SCMP_SYS(setsockopt), SCMP_SYS(getsockname), SCMP_SYS(getpeername), SCMP_SYS(sendto),
        SCMP_SYS(recvfrom), SCMP_SYS(sendmsg), SCMP_SYS(recvmsg), SCMP_SYS(sendmmsg),
        SCMP_SYS(recvmmsg), SCMP_SYS(fcntl), SCMP_SYS(poll), SCMP_SYS(ppoll), SCMP_SYS(eventfd2),
        SCMP_SYS(pipe2), SCMP_SYS(splice), SCMP_SYS(timerfd_create), SCMP_SYS(timerfd_settime),
        /* getaddrinfo: the netlink address dump of AI_ADDRCONFIG binds its socket; files below */
        SCMP_SYS(bind),
        /* time */
        SCMP_SYS(clock_gettime), SCMP_SYS(clock_getres), SCMP_SYS(gettimeofday), SCMP_SYS(time),
        SCMP_SYS(nanosleep), SCMP_SYS(clock_nanosleep),
        /* memory (malloc, thread stacks, NSS modules getaddrinfo may load) */
        SCMP_SYS(brk), SCMP_SYS(mmap), SCMP_SYS(munmap), SCMP_SYS(mremap), SCMP_SYS(mprotect),
        SCMP_SYS(madvise),
        /* the libuv threadpool (getaddrinfo runs there) */
        SCMP_SYS(futex), SCMP_SYS(set_robust_list), SCMP_SYS(get_robust_list), SCMP_SYS(rseq),
        SCMP_SYS(sched_yield), SCMP_SYS(sched_getaffinity), SCMP_SYS(exit), SCMP_SYS(exit_group),
        SCMP_SYS(gettid), SCMP_SYS(getpid), SCMP_SYS(getuid), SCMP_SYS(geteuid), SCMP_SYS(getgid),
        SCMP_SYS(getegid), SCMP_SYS(uname), SCMP_SYS(getrandom),
        /* signals: uv_signal handlers, their removal at stop, abort() */
        SCMP_SYS(rt_sigreturn), SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigaction),
        SCMP_SYS(sigaltstack),
        /* reading files: /etc/hosts, resolv.conf, nsswitch.conf, gai.conf for getaddrinfo;
         * /proc/self/{fd,status,stat,mountinfo} for stats and diagnostics (openat: read only) */
        SCMP_SYS(fstat), SCMP_SYS(newfstatat), SCMP_SYS(statx), SCMP_SYS(lseek), SCMP_SYS(pread64),
        SCMP_SYS(getdents64), SCMP_SYS(readlink), SCMP_SYS(readlinkat), SCMP_SYS(access),
        SCMP_SYS(faccessat), SCMP_SYS(faccessat2),
#ifdef __NR_stat
        SCMP_SYS(stat), SCMP_SYS(lstat),
#endif
        /* removing our unix sockets at exit */
        SCMP_SYS(unlink), SCMP_SYS(unlinkat),
        SCMP_SYS(getrlimit), SCMP_SYS(sysinfo),
};

static int add(scmp_filter_ctx ctx, int nr, unsigned n, const struct scmp_arg_cmp *cmp) {
        int r = seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, nr, n, cmp);
        /* A system call this architecture does not have is no hole to close. */
        return r == -EDOM || r == -EFAULT ? 0 : r;
}

static int build(scmp_filter_ctx ctx) {
        int r = 0;

        for (size_t i = 0; i < sizeof allowed / sizeof allowed[0] && r == 0; i++)
                if (allowed[i] >= 0) /* __NR_SCMP_ERROR: not on this architecture */
                        r = add(ctx, allowed[i], 0, NULL);

        /* socket(): the families of the endpoints (and DNS over UDP, sd_notify datagrams), stream
         * or datagram only; no raw, packet or other family. getaddrinfo's AI_ADDRCONFIG reads
         * the interface addresses over NETLINK_ROUTE. */
        static const int families[] = { AF_UNIX, AF_INET, AF_INET6, AF_VSOCK };
        static const int types[] = { SOCK_STREAM, SOCK_DGRAM };
        const scmp_datum_t type_mask = ~(scmp_datum_t)(SOCK_NONBLOCK | SOCK_CLOEXEC) & 0xffffffffu;
        for (size_t f = 0; f < sizeof families / sizeof families[0] && r == 0; f++)
                for (size_t t = 0; t < sizeof types / sizeof types[0] && r == 0; t++) {
                        struct scmp_arg_cmp cmp[] = {
                                SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)families[f]),
                                SCMP_A1(SCMP_CMP_MASKED_EQ, type_mask, (scmp_datum_t)types[t]),
                        };
                        r = add(ctx, SCMP_SYS(socket), 2, cmp);
                }
        if (r == 0) {
                struct scmp_arg_cmp cmp[] = {
                        SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
                        SCMP_A1(SCMP_CMP_MASKED_EQ, type_mask, SOCK_RAW),
                        SCMP_A2(SCMP_CMP_EQ, NETLINK_ROUTE),
                };
                r = add(ctx, SCMP_SYS(socket), 3, cmp);
        }

        /* openat(): read only, nothing created or truncated. */
        if (r == 0) {
                struct scmp_arg_cmp cmp[] = {
                        SCMP_A2(SCMP_CMP_MASKED_EQ, O_ACCMODE | O_CREAT | O_TRUNC, O_RDONLY),
                };
                r = add(ctx, SCMP_SYS(openat), 1, cmp);
        }
#ifdef __NR_open
        if (r == 0) {
                struct scmp_arg_cmp cmp[] = {
                        SCMP_A1(SCMP_CMP_MASKED_EQ, O_ACCMODE | O_CREAT | O_TRUNC, O_RDONLY),
                };
                r = add(ctx, SCMP_SYS(open), 1, cmp);
        }
#endif

        /* ioctl(): what libuv and the resolver use on their own sockets. */
        static const unsigned long ioctls[] = { FIONBIO, FIOCLEX, FIONCLEX, FIONREAD };
        for (size_t i = 0; i < sizeof ioctls / sizeof ioctls[0] && r == 0; i++) {
                struct scmp_arg_cmp cmp[] = { SCMP_A1(SCMP_CMP_EQ, (scmp_datum_t)ioctls[i]) };
                r = add(ctx, SCMP_SYS(ioctl), 1, cmp);
        }

        /* Threads, never processes: clone() must carry CLONE_THREAD. clone3() passes its flags
         * in memory a filter cannot read: it fails with ENOSYS and glibc falls back to clone(). */
        if (r == 0) {
                struct scmp_arg_cmp cmp[] = { SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD) };
                r = add(ctx, SCMP_SYS(clone), 1, cmp);
        }
        if (r == 0) {
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
                if (r == -EDOM || r == -EFAULT)
                        r = 0;
        }

        /* Reading this process's limits (glibc's getrlimit is prlimit64 on pid 0); no setting. */
        if (r == 0) {
                struct scmp_arg_cmp cmp[] = { SCMP_A0(SCMP_CMP_EQ, 0), SCMP_A2(SCMP_CMP_EQ, 0) };
                r = add(ctx, SCMP_SYS(prlimit64), 2, cmp);
        }

        /* Signals to this process only (abort(), raise()). */
        if (r == 0) {
                struct scmp_arg_cmp cmp[] = { SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)getpid()) };
                r = add(ctx, SCMP_SYS(tgkill), 1, cmp);
        }
        return r;
}

bool sf_sandbox_available(void) {
        return true;
}

int sf_sandbox_apply(void) {
        if (SF_UNDER_VALGRIND()) {
                sf_log_info("seccomp sandbox: off under valgrind (its own system calls would be killed)");
                return -ENOTSUP;
        }
        /* Anything else: the process is killed, all threads, with SIGSYS (a core dump where
         * those are enabled, and an audit record naming the system call). */
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
        if (!ctx) {
                sf_log_error("seccomp sandbox: cannot set up a filter (out of memory?)");
                return -ENOMEM;
        }
        int r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1);
        if (r == 0)
                r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
        if (r == 0)
                r = build(ctx);
        if (r == 0)
                r = seccomp_load(ctx);
        seccomp_release(ctx);
        if (r < 0) {
                sf_log_error("seccomp sandbox: the kernel refused the filter: %s (set seccomp = no in [sockferry] "
                             "to run without it)",
                             strerror(-r));
                return r;
        }
        sf_log_debug("seccomp sandbox: on (any system call the relay does not use kills it)");
        return 0;
}

#else

bool sf_sandbox_available(void) {
        return false;
}

int sf_sandbox_apply(void) {
        return -ENOSYS;
}

#endif
