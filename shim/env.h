#pragma once
/* The environment `sockferry run` gives the payload: each forward's env variable, and the
 * preload library with its map when a forward has an alias. */
#include <stdbool.h>
#include <stddef.h>

#include "conf/conf.h"

/* The value of f's env variable: the listen socket's path, or unix:///path with
 * env-format = unix-url. Abstract and TCP listeners give @name / HOST:PORT, or
 * unix://@name / tcp://HOST:PORT as URLs. Returns 0, -EINVAL when the listen endpoint has no
 * address a client could use (systemd:, fd:), or -ENAMETOOLONG. */
int sf_env_value(const struct sf_forward *f, char *buf, size_t len);

/* Sets every forward's env variable in this process's environment (the payload inherits
 * it); an existing value is overridden and the log says so. Returns 0 or -errno. */
int sf_env_export(const struct sf_conf *c);

/* True when some forward has an alias, i.e. the preload library has something to do. */
bool sf_env_preload_wanted(const struct sf_conf *c);

/* Finds the preload library: explicit (--preload), else $SOCKFERRY_PRELOAD, else the
 * installed path, else next to the binary in a build tree. Writes its absolute path to out.
 * Returns 0, -ENOENT when it is not installed, or -EINVAL (the cause logged) when the library
 * named by --preload or $SOCKFERRY_PRELOAD cannot be read. */
int sf_env_preload_find(const char *explicit_path, char *out, size_t len);

/* "ALIAS=ENDPOINT;..." for every forward with an alias. Returns the number of entries or
 * -ENAMETOOLONG. */
int sf_env_preload_map(const struct sf_conf *c, char *buf, size_t len);

/* Appends lib to an LD_PRELOAD list (NULL or empty for none) unless it is already there.
 * Returns 0 or -ENAMETOOLONG. */
int sf_env_ld_preload_add(const char *list, const char *lib, char *buf, size_t len);

/* Adds lib to LD_PRELOAD and sets SOCKFERRY_PRELOAD_MAP. Returns 0 or -errno, logged. */
int sf_env_preload_export(const struct sf_conf *c, const char *lib);

/* Socket activation (sd_listen_fds(3)) hands this process listening sockets from fd 3 on and
 * describes them in LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES. Once the forwards took theirs,
 * closes every passed socket for which in_use(fd, data) is false (when LISTEN_PID names this
 * process: otherwise the descriptors are not the protocol's), and unsets those variables and
 * NOTIFY_SOCKET: they name run, not the payload, which would inherit sockets nobody serves and
 * could answer the service manager in run's name (run keeps its notify socket: shim/notify.h).
 * Returns the number of descriptors closed. */
int sf_env_activation_clear(bool (*in_use)(int fd, void *data), void *data);
