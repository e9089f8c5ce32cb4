#pragma once
/* The relay's seccomp sandbox (libseccomp; the `seccomp` meson feature).
 *
 * Once the listen sockets are bound, the token files read, privileges dropped and the loop's
 * own handles set up, the relay only moves bytes between sockets. sf_sandbox_apply() then
 * installs a filter that allows the system calls of that steady state (the libuv loop, the
 * threadpool that runs getaddrinfo, the control socket's /proc reads, the clean-up at exit)
 * and kills the whole process with SIGSYS on any other: no execve, no fork, no ptrace, no
 * file opened for writing, no raw or packet socket. The list and the reason for each entry
 * are in sandbox.c; doc/SECURITY.md says what it protects. */
#include <stdbool.h>

/* True when this build has the sandbox (libseccomp found at build time). */
bool sf_sandbox_available(void);

/* Installs the filter on every thread of the process (and on those it starts later); it
 * cannot be removed. Also sets no_new_privs. Returns 0; -ENOSYS when the build has no
 * sandbox; -ENOTSUP (logged) under valgrind, whose own system calls the filter would kill;
 * another -errno (logged) when the kernel refused the filter. */
int sf_sandbox_apply(void);
