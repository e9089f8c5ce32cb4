/* sockferry probe: say what is at a socket path, and what to do about it. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "relay/listen/sockpath.h"
#include "shim/cli.h"

/* Exit statuses, documented in --help, README.md and sockferry(1). */
enum {
        PROBE_LIVE = 0,
        PROBE_STALE = 1,
        PROBE_MISSING = 2,
        PROBE_MOUNT_DIR = 3, /* empty directory / mount point: the failed host-socket bind mount */
        PROBE_OTHER = 4,
};

static void help(void) {
        fputs("Usage: sockferry probe PATH\n"
              "\n"
              "Say what is at a unix socket path and what to do about it.\n"
              "\n"
              "Exit status:\n"
              "  0  a live socket: something accepts connections there\n"
              "  1  a stale socket: nobody accepts on it (the service is down)\n"
              "  2  nothing at the path\n"
              "  3  an empty directory or a mount point: a host socket bind mount the container\n"
              "     engine could not carry\n"
              "  4  anything else: a regular file, a non-empty directory, a socket this user may not\n"
              "     use, a path that cannot be examined\n"
              " 64  usage error\n",
              stdout);
}

static int explain_dir(const char *path, bool mount) {
        const char *engine = sf_sockpath_engine_hint();
        if (mount)
                printf("%s: an empty directory that is a mount point, where a socket is expected: %s%s%s.\n", path,
                       sf_sockpath_dir_explanation(), engine ? "; this looks like " : "", engine ? engine : "");
        else
                printf("%s: an empty directory where a socket is expected: Docker creates one when the host "
                       "side of a -v bind mount did not exist as the container started, and VM-backed engines "
                       "(Docker Desktop, Lima, Colima) when they cannot carry a socket%s%s.\n",
                       path, engine ? "; this looks like " : "", engine ? engine : "");
        printf("Fix: a socket cannot be bind-mounted here; carry it with sockferry instead: on the host\n"
               "  sockferry relay -F 'NAME:tcp:127.0.0.1:7777=unix:HOST_SOCKET,auth=token,token-file=TOKEN'\n"
               "and in the container a forward listening on unix:/run/sockferry/NAME.sock that connects\n"
               "to tcp:host.docker.internal:7777 with alias = %s (or the preload library), so\n"
               "clients keep using this path; drop the -v bind mount of the socket.\n",
               path);
        return PROBE_MOUNT_DIR;
}

int sf_cmd_probe(int argc, char **argv) {
        if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
                help();
                return 0;
        }
        if (argc != 2 || argv[1][0] == '\0')
                return sf_cli_usage_error("probe", "expected exactly one PATH");
        if (argv[1][0] == '-' && argv[1][1] != '\0')
                return sf_cli_usage_error("probe", "unknown option '%s' (a path starting with '-': write ./%s)",
                                          argv[1], argv[1]);
        const char *path = argv[1];

        switch (sf_sockpath_probe_settled(path)) {
        case SF_PATH_LIVE_SOCKET:
                printf("%s: live socket: a process accepts connections on it.\n", path);
                return PROBE_LIVE;
        case SF_PATH_STALE_SOCKET:
                printf("%s: stale socket: nobody accepts on it — the service that created it is not running "
                       "(or crashed). Start the service; it (or a sockferry listener) replaces the stale socket.\n",
                       path);
                return PROBE_STALE;
        case SF_PATH_MISSING:
                printf("%s: missing: nothing is at this path — the service is not running or listens elsewhere; "
                       "in a container, the socket's bind mount (-v HOST_SOCKET:%s) is not there.\n",
                       path, path);
                return PROBE_MISSING;
        case SF_PATH_EMPTY_DIR:
                return explain_dir(path, false);
        case SF_PATH_MOUNT_DIR:
                /* Only an empty directory is the engine's stand-in for a socket; a mount point
                 * with content is some other volume. */
                if (sf_sockpath_dir_is_empty(path))
                        return explain_dir(path, true);
                printf("%s: a directory (a mount point with content), not a socket: a volume is mounted "
                       "where a socket is expected; point the client at the socket's real path.\n",
                       path);
                return PROBE_OTHER;
        case SF_PATH_DIR:
                printf("%s: a directory with content, not a socket: point the client at the socket's real path.\n",
                       path);
                return PROBE_OTHER;
        case SF_PATH_REGULAR:
                printf("%s: a regular file, not a socket: something wrote a file where the socket belongs; "
                       "remove it and restart the service.\n",
                       path);
                return PROBE_OTHER;
        case SF_PATH_OTHER:
                printf("%s: neither a socket, a directory nor a regular file (a fifo or a device?): point the "
                       "client at the socket's real path.\n",
                       path);
                return PROBE_OTHER;
        case SF_PATH_ERROR:
        default: {
                int e = errno;
                printf("%s: cannot tell: %s%s.\n", path, strerror(e),
                       e == EACCES ? " — run as the socket's owner or root to probe it" : "");
                return PROBE_OTHER;
        }
        }
}
