#include "relay/sys/sandbox.h"

#include <errno.h>
#include <string.h>

#include "conf/log.h"

#ifdef SF_HAVE_SECCOMP

#include <fcntl.h>
#include <linux/landlock.h>
#include <linux/netlink.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>
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

/* Landlock is in force (sf_sandbox_confine): bind, linkat and unlinkat may be allowed. */
static bool confined;

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
        /* a token file read again at a reload: whether a directory on its path is on a
         * read-only mount (fstatvfs, relay/listen/safedir.c) */
        SCMP_SYS(fstatfs),
#ifdef __NR_stat
        SCMP_SYS(stat), SCMP_SYS(lstat),
#endif
        SCMP_SYS(getrlimit), SCMP_SYS(sysinfo),
        /* a reload binding a new listener (relay/listen/listener.c): listen() on it, the umask
         * around bind() that gives the socket its mode from the first instant, and fchdir() into
         * the pinned directory and back (bind() takes a bare name there). Which directories
         * may get a socket Landlock decides; fchownat() stays refused, so a new socket with an
         * owner or group needs a restart. */
        SCMP_SYS(listen), SCMP_SYS(umask), SCMP_SYS(fchdir),
};

/* Kill the whole process whatever their arguments: running other code, reaching into another
 * process, changing who we are or which namespaces we see. No library has a fallback for these
 * in the relay's steady state; an exploit that tries them gets no second attempt. */
static const int hostile[] = {
        SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(fork), SCMP_SYS(vfork), SCMP_SYS(ptrace),
        SCMP_SYS(process_vm_readv), SCMP_SYS(process_vm_writev), SCMP_SYS(kill), SCMP_SYS(tkill),
        SCMP_SYS(pidfd_open), SCMP_SYS(pidfd_send_signal), SCMP_SYS(pidfd_getfd), SCMP_SYS(setuid),
        SCMP_SYS(setgid), SCMP_SYS(setreuid), SCMP_SYS(setregid), SCMP_SYS(setresuid),
        SCMP_SYS(setresgid), SCMP_SYS(setfsuid), SCMP_SYS(setfsgid), SCMP_SYS(setgroups),
        SCMP_SYS(capset), SCMP_SYS(unshare), SCMP_SYS(setns), SCMP_SYS(chroot), SCMP_SYS(pivot_root),
        SCMP_SYS(mount), SCMP_SYS(umount2), SCMP_SYS(bpf), SCMP_SYS(init_module),
        SCMP_SYS(finit_module), SCMP_SYS(delete_module), SCMP_SYS(kexec_load), SCMP_SYS(kexec_file_load),
};

/* io_uring submits system calls the filter never sees (io_uring_enter runs them in the
 * kernel): allowing it would be a way around the filter. libuv >= 1.45 sets up a ring in
 * uv_loop_init and falls back to epoll_ctl and its threadpool when io_uring_setup fails with
 * ENOSYS, as on kernels without io_uring. */
static const int io_uring[] = {
        SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_enter), SCMP_SYS(io_uring_register),
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static int add_action(scmp_filter_ctx ctx, uint32_t action, int nr, unsigned n, const struct scmp_arg_cmp *cmp) {
        if (nr < 0) /* __NR_SCMP_ERROR: not on this architecture */
                return 0;
        int r = seccomp_rule_add_array(ctx, action, nr, n, cmp);
        /* A system call this architecture does not have is no hole to close. */
        return r == -EDOM || r == -EFAULT ? 0 : r;
}

static int add(scmp_filter_ctx ctx, int nr, unsigned n, const struct scmp_arg_cmp *cmp) {
        return add_action(ctx, SCMP_ACT_ALLOW, nr, n, cmp);
}

static int deny_io_uring(scmp_filter_ctx ctx) {
        int r = 0;
        for (size_t i = 0; i < N(io_uring) && r == 0; i++)
                r = add_action(ctx, SCMP_ACT_ERRNO(ENOSYS), io_uring[i], 0, NULL);
        return r;
}

static int build(scmp_filter_ctx ctx) {
        int r = deny_io_uring(ctx);

        for (size_t i = 0; i < N(allowed) && r == 0; i++)
                r = add(ctx, allowed[i], 0, NULL);
        for (size_t i = 0; i < N(hostile) && r == 0; i++)
                r = add_action(ctx, SCMP_ACT_KILL_PROCESS, hostile[i], 0, NULL);

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

        /* Threads, never processes: clone() must carry CLONE_THREAD (without it: a fork, which
         * kills). clone3() passes its flags in memory a filter cannot read: it fails with ENOSYS
         * and glibc falls back to clone(). */
        if (r == 0) {
                struct scmp_arg_cmp cmp[] = { SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD) };
                r = add(ctx, SCMP_SYS(clone), 1, cmp);
        }
        if (r == 0) {
                struct scmp_arg_cmp cmp[] = { SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0) };
                r = add_action(ctx, SCMP_ACT_KILL_PROCESS, SCMP_SYS(clone), 1, cmp);
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

        /* Signals to this process only (abort(), raise()); to another one: kills. */
        if (r == 0) {
                struct scmp_arg_cmp cmp[] = { SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)getpid()) };
                r = add(ctx, SCMP_SYS(tgkill), 1, cmp);
        }
        if (r == 0) {
                struct scmp_arg_cmp cmp[] = { SCMP_A0(SCMP_CMP_NE, (scmp_datum_t)getpid()) };
                r = add_action(ctx, SCMP_ACT_KILL_PROCESS, SCMP_SYS(tgkill), 1, cmp);
        }

        /* bind(): getaddrinfo's AI_ADDRCONFIG binds its netlink socket, and a socket bound to a
         * path is a new file; linkat(): a new listener's socket gets its path once it listens
         * (relay/listen/listener.c), never following a symbolic link (no AT_SYMLINK_FOLLOW);
         * unlinkat(): the relay removes its sockets through the pinned directory fds (never a
         * directory: no AT_REMOVEDIR). Which paths they may touch a filter cannot see; Landlock
         * decides that (sf_sandbox_confine). Without it all three are refused, silently:
         * glibc's address check then assumes both families, and the sockets stay on disk at
         * exit. */
        if (r == 0 && confined)
                r = add(ctx, SCMP_SYS(bind), 0, NULL);
        if (r == 0 && confined) {
                struct scmp_arg_cmp cmp[] = { SCMP_A4(SCMP_CMP_EQ, 0) };
                r = add(ctx, SCMP_SYS(linkat), 1, cmp);
        }
        if (r == 0 && confined) {
                struct scmp_arg_cmp cmp[] = { SCMP_A2(SCMP_CMP_EQ, 0) };
                r = add(ctx, SCMP_SYS(unlinkat), 1, cmp);
        }
        if (r == 0 && !confined)
                r = add_action(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(bind), 0, NULL);
        if (r == 0 && !confined)
                r = add_action(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(linkat), 0, NULL);
        if (r == 0 && !confined)
                r = add_action(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(unlinkat), 0, NULL);

        /* Naming a thread: libuv >= 1.50 calls its threadpool threads "libuv-worker". */
        if (r == 0) {
                struct scmp_arg_cmp cmp[] = { SCMP_A0(SCMP_CMP_EQ, PR_SET_NAME) };
                r = add(ctx, SCMP_SYS(prctl), 1, cmp);
        }
        return r;
}

/* ---- the file system: Landlock --------------------------------------------------------------
 *
 * seccomp sees a system call's numbers, not the path a pointer leads to: it can allow bind()
 * and unlinkat() or refuse them, not say where they may act (unlinkat's dirfd can be compared
 * with the pinned fds, but a name such as "../../etc/passwd" or a link on the way leaves them).
 * Landlock judges the file the kernel resolved. Once confined, the process may create sockets
 * and remove files only beneath the pinned socket directories, and change nothing else in the
 * file system (no file written, no directory, link, FIFO or device made, nothing removed).
 * Reading stays allowed (/etc/hosts, /proc for stats). A socket bound later, by a reload, in
 * one of those directories is allowed; one in a new directory is not. */

/* The rights Landlock knows since its first version that change the file system, and REFER
 * (renames and links across directories, version 2). */
#define FS_CHANGES                                                                                            \
        (LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |   \
         LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |          \
         LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |       \
         LANDLOCK_ACCESS_FS_MAKE_SYM)
#define SOCKET_DIR_RIGHTS (LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_REMOVE_FILE)

/* Threads of this process (-1: unknown): Landlock confines the calling thread and those it
 * starts later. */
static long thread_count(void) {
        FILE *f = fopen("/proc/self/status", "re");
        char line[128];
        long n = -1;
        while (f && fgets(line, sizeof line, f))
                if (sscanf(line, "Threads: %ld", &n) == 1)
                        break;
        if (f)
                fclose(f);
        return n;
}

int sf_sandbox_confine(const int *dirfds, size_t n) {
        if (SF_UNDER_VALGRIND())
                return -ENOTSUP;
        /* The relay starts no thread before this; the count checks it where /proc is there to
         * say (a bare chroot has none). */
        long threads = thread_count();
        if (threads > 1) {
                sf_log_error("seccomp sandbox: %ld threads run already, and Landlock would confine only this one", threads);
                return -EINVAL;
        }
        long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
        if (abi < 0) {
                /* Not built in, off at boot (lsm=), or refused by a container's own seccomp
                 * profile. */
                sf_log_info("seccomp sandbox: no Landlock here (%s): once started, the relay creates and removes "
                            "no files, so its sockets stay on disk at exit (the next start replaces them)",
                            strerror(errno));
                return 0;
        }
        struct landlock_ruleset_attr attr = {
                .handled_access_fs = FS_CHANGES | (abi >= 2 ? LANDLOCK_ACCESS_FS_REFER : 0),
        };
        int ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
        if (ruleset < 0) {
                int e = errno;
                sf_log_error("seccomp sandbox: cannot create a Landlock ruleset: %s (set seccomp = no in [sockferry] "
                             "to run without the sandbox)",
                             strerror(e));
                return -e;
        }
        int r = 0;
        for (size_t i = 0; i < n && r == 0; i++) {
                struct landlock_path_beneath_attr dir = { .allowed_access = SOCKET_DIR_RIGHTS, .parent_fd = dirfds[i] };
                if (syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &dir, 0) < 0)
                        r = -errno;
        }
        /* Landlock needs no_new_privs; sf_sandbox_prepare set it already, and again is harmless. */
        if (r == 0 && (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || syscall(SYS_landlock_restrict_self, ruleset, 0) < 0))
                r = -errno;
        close(ruleset);
        if (r < 0) {
                sf_log_error("seccomp sandbox: Landlock refused to confine the relay: %s (set seccomp = no in "
                             "[sockferry] to run without the sandbox)",
                             strerror(-r));
                return r;
        }
        confined = true;
        sf_log_debug("seccomp sandbox: Landlock (ABI %ld) lets the relay create sockets and remove files only in its "
                     "%zu socket director%s",
                     abi, n, n == 1 ? "y" : "ies");
        return 0;
}

bool sf_sandbox_confined(void) {
        return confined;
}

int sf_sandbox_landlock_abi(void) {
        if (SF_UNDER_VALGRIND())
                return -ENOTSUP; /* memcheck knows no Landlock call and warns about it */
        long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
        return abi < 0 ? -errno : (int)abi;
}

int sf_sandbox_probe(void) {
        if (SF_UNDER_VALGRIND())
                return -ENOTSUP;
        pid_t child = fork();
        if (child < 0)
                return -errno;
        if (child == 0) {
                /* Quiet: the parent says what the failure means. */
                int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
                if (null >= 0)
                        dup2(null, STDERR_FILENO);
                int r = sf_sandbox_prepare();
                _exit(r < 0 ? -r & 0xff : 0);
        }
        int st;
        while (waitpid(child, &st, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        return WIFEXITED(st) ? -WEXITSTATUS(st) : -ECHILD;
}

/* ---- refused system calls: ENOSYS, and one log line per number ---------------------------
 *
 * Anything neither allowed nor hostile traps (SECCOMP_RET_TRAP): the kernel skips the call and
 * sends SIGSYS to the thread that made it. The handler makes the call return -ENOSYS, as on a
 * kernel that lacks it (libraries fall back), and notes its number in a bitmap of atomics; the
 * loop logs each new number once from a prepare handle (it runs before every poll, and a
 * threadpool thread's work wakes the loop anyway). The handler touches nothing but lock-free
 * atomics, so it is async-signal-safe and needs no wakeup channel that could be closed under
 * it at exit. */

#if defined(__x86_64__)
#define SET_RETURN(uc, v) ((uc)->uc_mcontext.gregs[REG_RAX] = (greg_t)(v))
#elif defined(__aarch64__)
#define SET_RETURN(uc, v) ((uc)->uc_mcontext.regs[0] = (unsigned long long)(v))
#endif

#define REFUSED_MAX 1024
#define WORD_BITS (sizeof(unsigned long) * 8)

static atomic_ulong refused[REFUSED_MAX / WORD_BITS];
static atomic_bool refused_new;
static unsigned long logged[REFUSED_MAX / WORD_BITS];
static uv_prepare_t reporter;
static bool reporter_on;
static bool applied;

#ifdef SET_RETURN
static void on_sigsys(int sig, siginfo_t *info, void *context) {
        (void)sig;
        SET_RETURN((ucontext_t *)context, -ENOSYS);
        unsigned nr = (unsigned)info->si_syscall;
        if (nr >= REFUSED_MAX)
                nr = REFUSED_MAX - 1; /* not a native system call number; logged as that slot */
        unsigned long bit = 1UL << (nr % WORD_BITS);
        if (!(atomic_fetch_or(&refused[nr / WORD_BITS], bit) & bit))
                atomic_store(&refused_new, true);
}
#endif

static void report_refused(uv_prepare_t *h) {
        (void)h;
        if (!atomic_load(&refused_new) || !atomic_exchange(&refused_new, false))
                return;
        for (unsigned w = 0; w < REFUSED_MAX / WORD_BITS; w++) {
                unsigned long fresh = atomic_load(&refused[w]) & ~logged[w];
                logged[w] |= fresh;
                for (unsigned b = 0; fresh; b++, fresh >>= 1) {
                        if (!(fresh & 1))
                                continue;
                        int nr = (int)(w * WORD_BITS + b);
                        char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
                        sf_log_warn("seccomp sandbox: refused system call %s (%d); it failed with ENOSYS",
                                    name ? name : "?", nr);
                        free(name);
                }
        }
}

bool sf_sandbox_available(void) {
        return true;
}

static int load(uint32_t default_action, int (*rules)(scmp_filter_ctx)) {
        scmp_filter_ctx ctx = seccomp_init(default_action);
        if (!ctx) {
                sf_log_error("seccomp sandbox: cannot set up a filter (out of memory?)");
                return -ENOMEM;
        }
        int r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1);
        if (r == 0)
                r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
        if (r == 0)
                r = rules(ctx);
        if (r == 0)
                r = seccomp_load(ctx);
        seccomp_release(ctx);
        if (r < 0)
                sf_log_error("seccomp sandbox: the kernel refused the filter: %s (set seccomp = no in [sockferry] "
                             "to run without it)",
                             strerror(-r));
        return r;
}

int sf_sandbox_prepare(void) {
        if (SF_UNDER_VALGRIND())
                return -ENOTSUP;
        return load(SCMP_ACT_ALLOW, deny_io_uring);
}

int sf_sandbox_apply(uv_loop_t *loop) {
        if (SF_UNDER_VALGRIND()) {
                sf_log_info("seccomp sandbox: off under valgrind (its own system calls would be refused)");
                return -ENOTSUP;
        }
#ifdef SET_RETURN
        struct sigaction sa = { .sa_sigaction = on_sigsys, .sa_flags = SA_SIGINFO };
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGSYS, &sa, NULL) < 0) {
                int e = errno;
                sf_log_error("seccomp sandbox: cannot handle SIGSYS: %s", strerror(e));
                return -e;
        }
        const uint32_t refuse = SCMP_ACT_TRAP;
#else
        /* No handler that knows this architecture's return register: refused calls still fail
         * with ENOSYS, without a log line. */
        const uint32_t refuse = SCMP_ACT_ERRNO(ENOSYS);
#endif
        uv_prepare_init(loop, &reporter);
        uv_prepare_start(&reporter, report_refused);
        uv_unref((uv_handle_t *)&reporter);
        reporter_on = true;
        int r = load(refuse, build);
        if (r < 0) {
                sf_sandbox_close();
                return r;
        }
        applied = true;
        sf_log_debug("seccomp sandbox: on (a system call the relay does not use fails with ENOSYS and is "
                     "logged; execve, fork, ptrace, setuid and the like kill it)");
        return 0;
}

bool sf_sandbox_applied(void) {
        return applied;
}

void sf_sandbox_close(void) {
        if (!reporter_on)
                return;
        reporter_on = false;
        report_refused(&reporter);
        uv_close((uv_handle_t *)&reporter, NULL);
}

#else

bool sf_sandbox_available(void) {
        return false;
}

int sf_sandbox_confine(const int *dirfds, size_t n) {
        (void)dirfds;
        (void)n;
        return -ENOSYS;
}

bool sf_sandbox_confined(void) {
        return false;
}

int sf_sandbox_landlock_abi(void) {
        return -ENOSYS;
}

int sf_sandbox_probe(void) {
        return -ENOSYS;
}

int sf_sandbox_prepare(void) {
        return -ENOSYS;
}

int sf_sandbox_apply(uv_loop_t *loop) {
        (void)loop;
        return -ENOSYS;
}

bool sf_sandbox_applied(void) {
        return false;
}

void sf_sandbox_close(void) {
}

#endif
