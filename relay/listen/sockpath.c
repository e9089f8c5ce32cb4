#include "relay/listen/sockpath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <uv.h>

#include "relay/sys/platform.h"

bool sf_sockpath_is_mount_point(const char *path) {
        return sf_mount_point(path);
}

bool sf_sockpath_dir_is_empty(const char *path) {
        DIR *d = opendir(path);
        if (!d)
                return false;
        struct dirent *e;
        bool empty = true;
        while ((e = readdir(d)))
                if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
                        empty = false;
                        break;
                }
        closedir(d);
        return empty;
}

enum sf_sockpath_state sf_sockpath_probe(const char *path) {
        struct stat st;
        if (stat(path, &st) < 0)
                return errno == ENOENT ? SF_PATH_MISSING : SF_PATH_ERROR;
        if (S_ISDIR(st.st_mode)) {
                if (sf_sockpath_is_mount_point(path))
                        return SF_PATH_MOUNT_DIR;
                return sf_sockpath_dir_is_empty(path) ? SF_PATH_EMPTY_DIR : SF_PATH_DIR;
        }
        if (S_ISREG(st.st_mode))
                return SF_PATH_REGULAR;
        if (!S_ISSOCK(st.st_mode))
                return SF_PATH_OTHER;

        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof sa.sun_path) {
                errno = ENAMETOOLONG;
                return SF_PATH_ERROR;
        }
        strcpy(sa.sun_path, path);
        int fd = sf_socket(AF_UNIX, SOCK_STREAM);
        if (fd < 0)
                return SF_PATH_ERROR;
        enum sf_sockpath_state state;
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
                state = SF_PATH_LIVE_SOCKET;
        else if (errno == EAGAIN)
                state = SF_PATH_LIVE_SOCKET; /* listening, backlog full */
        else if (errno == ECONNREFUSED)
                state = SF_PATH_STALE_SOCKET;
        else
                state = SF_PATH_ERROR;
        int saved = errno;
        close(fd);
        errno = saved;
        return state;
}

enum sf_sockpath_state sf_sockpath_probe_settled(const char *path) {
        /* A process makes a listening socket in two calls, bind() then listen(); connect()
         * between them is refused as by a socket nobody will accept on. Under load that gap
         * lasts as long as the binder waits for a CPU, so a refusal counts only when it lasts
         * past a few scheduler periods: 1 + 10 + 100 ms, which a truly stale socket pays once. */
        static const unsigned wait_ms[] = { 1, 10, 100 };
        enum sf_sockpath_state st = sf_sockpath_probe(path);
        for (size_t i = 0; i < sizeof wait_ms / sizeof wait_ms[0] && st == SF_PATH_STALE_SOCKET; i++) {
                uv_sleep(wait_ms[i]);
                st = sf_sockpath_probe(path);
        }
        return st;
}

const char *sf_sockpath_engine_hint(void) {
        struct utsname u;
        if (uname(&u) < 0)
                return NULL;
        if (strstr(u.release, "linuxkit"))
                return "Docker Desktop (linuxkit kernel)";
        if (strstr(u.release, "orbstack"))
                return "OrbStack";
        if (access("/run/.containerenv", F_OK) == 0)
                return "Podman machine";
        if (access("/.dockerenv", F_OK) == 0)
                return "a Docker container";
        return NULL;
}

const char *sf_sockpath_dir_explanation(void) {
        return "a directory that is a mount point where a socket is expected is the signature of a "
               "host socket bind mount the container engine could not carry (Docker Desktop/linuxkit, "
               "Lima, Colima and other VM-backed engines turn it into an empty directory)";
}
