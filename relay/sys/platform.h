#pragma once
/* What differs between the systems the relay runs on, one call per mechanism:
 * relay/sys/platform_linux.c (the default Linux build) and relay/sys/platform_portable.c (macOS,
 * and Linux built with -Dportable=true, which runs the code macOS runs), both with
 * relay/sys/platform_posix.c; relay/sys/platform_win.c on Windows. Nothing else in relay/, conf/ or
 * shim/ names a Linux-only socket call. */
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <uv.h>

/* AF_VSOCK where vsock is supported, else -1, which matches no family. */
extern const int sf_af_vsock;

/* The flag that keeps a send to a closed peer from raising SIGPIPE where send() has one; 0
 * elsewhere, where sf_socket set SO_NOSIGPIPE on the socket instead (macOS). */
#ifdef MSG_NOSIGNAL
#define SF_MSG_NOSIGNAL MSG_NOSIGNAL
#else
#define SF_MSG_NOSIGNAL 0
#endif

/* A send that fails with EAGAIN instead of waiting, where send() has the flag; 0 elsewhere. */
#ifdef MSG_DONTWAIT
#define SF_MSG_DONTWAIT MSG_DONTWAIT
#else
#define SF_MSG_DONTWAIT 0
#endif

/* SOCK_CLOEXEC where socket() takes it; 0 elsewhere (a socket closed right after use). */
#ifdef SOCK_CLOEXEC
#define SF_SOCK_CLOEXEC SOCK_CLOEXEC
#else
#define SF_SOCK_CLOEXEC 0
#endif

/* A non-blocking, close-on-exec socket of type (SOCK_STREAM, ...) that raises no SIGPIPE where
 * the system can say so per socket. fd or -errno. */
int sf_socket(int family, int type);
/* accept() giving a non-blocking, close-on-exec socket. fd or -errno. */
int sf_accept(int fd);

/* The credentials of a unix socket's peer; *pid is 0 where the system does not say. 0 or
 * -errno. */
int sf_peer_cred(int fd, uid_t *uid, gid_t *gid, pid_t *pid);

/* Opens a directory only to reach what is in it (O_PATH on Linux: no read permission needed;
 * O_SEARCH where the system has it, else O_RDONLY). */
#if defined(O_PATH)
#define SF_O_DIRPATH O_PATH
#elif defined(O_SEARCH)
#define SF_O_DIRPATH O_SEARCH
#else
#define SF_O_DIRPATH O_RDONLY
#endif

/* Hands the pages the allocator holds free back to the system (relay/engine/bufpool.h says
 * when). glibc keeps them: a relay stayed at 95 MiB after 200 stalled downloads had ended
 * (bench/RESULTS.md). A no-op elsewhere: musl unmaps blocks of a buffer's size as they are
 * freed; macOS and Windows have no such call (their relays' memory after a burst is not
 * measured). */
void sf_memory_trim(void);

/* A vsock address. 0, or -EAFNOSUPPORT where there is no vsock. */
int sf_vsock_sockaddr(unsigned cid, unsigned port, struct sockaddr_storage *ss, socklen_t *len);
/* The CID and port of a vsock address; false for any other family. */
bool sf_vsock_peer(const struct sockaddr_storage *ss, unsigned *cid, unsigned *port);

/* true when path is the root of a mount (Linux: statx STATX_ATTR_MOUNT_ROOT, else the mount
 * table; elsewhere: a device change from its parent). */
bool sf_mount_point(const char *path);

/* The errno value of a libuv error: its negation on POSIX, where libuv uses errno's numbers;
 * Windows' libuv has numbers of its own. */
int sf_errno_uv(int uv_error);

/* Whether the peer of a local stream (unix socket, named pipe) may read what the relay's own
 * account may: root or the same user on POSIX; on Windows the pipe's security descriptor
 * already admits no one else. who: the peer, for a refusal's message; allowed: who may. */
bool sf_peer_trusted(uv_stream_t *s, char *who, size_t who_cap, char *allowed, size_t allowed_cap);

/* Makes what the calling thread creates from now on belong to uid:gid, with only that user's
 * rights to the file system, until sf_fs_user_leave: for files made in a directory of that user,
 * which a process acting as root must not make as root (relay/listen/safedir.h). Linux: the
 * thread's file-system ids (setfsuid, setfsgid), so no other thread and no signal permission
 * changes; elsewhere the effective ids, for the whole process (seteuid, setegid; the saved ids
 * keep root to come back to). Needs root (CAP_SETUID and CAP_SETGID). 0, or -EPERM when the ids
 * did not change (nothing changed then). */
int sf_fs_user_enter(uid_t uid, gid_t gid);
/* Back to the process's effective ids. */
void sf_fs_user_leave(void);
