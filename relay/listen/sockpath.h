#pragma once
/* What is at a unix socket path: the checks behind stale-socket removal, alias handling and
 * `sockferry probe`. */
#include <stdbool.h>

enum sf_sockpath_state {
        SF_PATH_MISSING = 0,
        SF_PATH_LIVE_SOCKET,   /* a socket somebody accepts on */
        SF_PATH_STALE_SOCKET,  /* a socket nobody accepts on (connect: ECONNREFUSED) */
        SF_PATH_EMPTY_DIR,     /* an empty directory that is not a mount point */
        SF_PATH_MOUNT_DIR,     /* a directory that is a mount point: a failed host-socket bind mount */
        SF_PATH_DIR,           /* a non-empty directory */
        SF_PATH_REGULAR,
        SF_PATH_OTHER,         /* fifo, device, dangling link target we cannot judge, ... */
        SF_PATH_ERROR,         /* could not be examined: errno says why */
};

/* Examines path without changing anything. Follows symbolic links. */
enum sf_sockpath_state sf_sockpath_probe(const char *path);
/* sf_sockpath_probe, but a socket that refuses is stale only if it still refuses 111 ms later:
 * one whose process has bound it and not yet listened is not. Blocks that long on a refusal:
 * for the decisions that remove a socket or report it dead (start-up, a reload's new listen
 * path, check, probe), never on the data path. */
enum sf_sockpath_state sf_sockpath_probe_settled(const char *path);
/* true when path is the root of a mount (relay/sys/platform.h, sf_mount_point). */
bool sf_sockpath_is_mount_point(const char *path);
/* true when path is a directory holding nothing but . and .. */
bool sf_sockpath_dir_is_empty(const char *path);
/* "Docker Desktop (linuxkit kernel)" etc. when the kernel release names the VM, else NULL. */
const char *sf_sockpath_engine_hint(void);
/* The sentence explaining what a directory at a socket path means. */
const char *sf_sockpath_dir_explanation(void);
