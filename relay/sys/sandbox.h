#pragma once
/* The relay's seccomp sandbox (libseccomp; the `seccomp` meson feature). Once the listen sockets
 * are bound, the token files read, privileges dropped and the loop's own handles set up, the relay
 * only moves bytes between sockets. sf_sandbox_apply() then installs a filter that allows the
 * system calls of that steady state (the libuv loop, the threadpool that runs getaddrinfo, the
 * control socket's /proc reads, the clean-up at exit). Calls that run other code, reach into
 * another process or change the process's identity (execve, fork, ptrace, kill of another process,
 * setuid, unshare...) kill the whole process with SIGSYS. Any other call fails with ENOSYS, as on a
 * kernel without it, and the relay logs its name once. io_uring is refused with ENOSYS from before
 * the first loop exists (sf_sandbox_prepare), so libuv >= 1.45 keeps to its plain event loop. The
 * lists and the reason for each entry are in sandbox.c; doc/SECURITY.md says what it protects. */
#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

/* True when this build has the sandbox (libseccomp found at build time). */
bool sf_sandbox_available(void);

/* Makes io_uring_setup/enter/register fail with ENOSYS in every thread, for good; call it
 * before the first uv_loop_init, which would otherwise set up an io_uring ring (libuv >= 1.45)
 * that the sandbox must not let it use. Sets no_new_privs. Returns 0; -ENOSYS when the build
 * has no sandbox; -ENOTSUP under valgrind; another -errno (logged) when the kernel refused. */
int sf_sandbox_prepare(void);

/* Confines the process's changes to the file system with Landlock, for good: from now on it
 * may create sockets and remove files only beneath the directories dirfds[0..n) (O_PATH fds
 * of the pinned socket directories; any number may name the same one), and change nothing
 * else anywhere. Reading is left alone. Call once the sockets are bound and before any other
 * thread exists (Landlock confines the calling thread and those it starts later; refused,
 * -EINVAL, when more run), and before sf_sandbox_apply, whose filter then allows bind() and
 * unlinkat(). Where the kernel has no Landlock (or a container's profile refuses it) it says
 * so (info) and returns 0: sf_sandbox_apply then refuses bind() and unlinkat() altogether.
 * Returns 0; -ENOSYS when the build has no sandbox; -ENOTSUP under valgrind; another -errno
 * (logged) when Landlock refused. */
int sf_sandbox_confine(const int *dirfds, size_t n);
/* True once sf_sandbox_confine put Landlock in force. */
bool sf_sandbox_confined(void);

/* For `sockferry version`: the Landlock ABI version this kernel offers, or -errno (-ENOSYS also
 * when the build has no sandbox; -ENOTSUP under valgrind). */
int sf_sandbox_landlock_abi(void);
/* For `sockferry version`: whether the sandbox would apply here, tried in a child process
 * (sf_sandbox_prepare's filter). 0, or the -errno it failed with (-ENOSYS: no sandbox in the
 * build; -ENOTSUP: under valgrind). */
int sf_sandbox_probe(void);

/* Installs the filter on every thread of the process (and on those it starts later); it
 * cannot be removed. Also sets no_new_privs, a SIGSYS handler and a handle on loop that logs
 * each refused system call once (closed by sf_sandbox_close). Returns 0; -ENOSYS when the
 * build has no sandbox; -ENOTSUP (logged) under valgrind, whose own system calls the filter
 * would refuse; another -errno (logged) when the kernel refused the filter. */
int sf_sandbox_apply(uv_loop_t *loop);

/* True once sf_sandbox_apply put the filter in force: from then on a change of identity, even of
 * the file-system ids alone, kills the process. */
bool sf_sandbox_applied(void);

/* Logs what was refused and not logged yet and closes the loop handle of sf_sandbox_apply
 * (the loop must run once more to release it). The filter stays. Safe to call twice, and
 * when the sandbox was never applied. */
void sf_sandbox_close(void);
