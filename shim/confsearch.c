#include "shim/confsearch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/log.h"

#define SYSTEM_CONF "/etc/sockferry/sockferry.conf"

/* The XDG base directory rule: a relative XDG_CONFIG_HOME is ignored. */
static const char *user_conf(char *buf, size_t size) {
        const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
        if (xdg && xdg[0] == '/')
                snprintf(buf, size, "%s/sockferry/sockferry.conf", xdg);
        else if (home && home[0] == '/')
                snprintf(buf, size, "%s/.config/sockferry/sockferry.conf", home);
        else
                return NULL;
        return buf;
}

const char *sf_confsearch_find(char *buf, size_t size) {
        const char *user = user_conf(buf, size);
        if (user && access(user, F_OK) == 0)
                return buf;
        if (access(SYSTEM_CONF, F_OK) == 0) {
                snprintf(buf, size, "%s", SYSTEM_CONF);
                return buf;
        }
        return NULL;
}

const char *sf_confsearch_places(char *buf, size_t size) {
        char user[4096];
        if (user_conf(user, sizeof user))
                snprintf(buf, size, "%s, then %s", user, SYSTEM_CONF);
        else
                snprintf(buf, size, "%s", SYSTEM_CONF);
        return buf;
}

/* Linux's /proc; elsewhere (macOS) the open fails with ENOENT and says so. */
int sf_confsearch_cmdline(long pid, char **buf, size_t *len) {
        char path[64];
        size_t have = 0;
        int r = 0;

        *buf = NULL;
        *len = 0;
        if (access("/proc/self/cmdline", R_OK) < 0) {
                sf_log_error("--pid %ld: no /proc here to read its command line from (it is for Linux "
                             "containers); give -c FILE or -F SPEC instead", pid);
                return -ENOSYS;
        }
        snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                r = -errno;
                if (r == -ENOENT)
                        sf_log_error("--pid %ld: no such process (is the relay running, and in this PID "
                                     "namespace?)", pid);
                else
                        sf_log_error("--pid %ld: cannot open %s: %s", pid, path, strerror(-r));
                return r == -ENOENT ? -ESRCH : r;
        }
        char *b = malloc(SF_CONFSEARCH_CMDLINE_MAX);
        if (!b) {
                close(fd);
                sf_log_error("--pid %ld: out of memory", pid);
                return -ENOMEM;
        }
        while (have < SF_CONFSEARCH_CMDLINE_MAX) {
                ssize_t n = read(fd, b + have, SF_CONFSEARCH_CMDLINE_MAX - have);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = -errno;
                        sf_log_error("--pid %ld: cannot read %s: %s", pid, path, strerror(-r));
                        break;
                }
                if (n == 0)
                        break;
                have += (size_t)n;
        }
        close(fd);
        if (r == 0 && have == SF_CONFSEARCH_CMDLINE_MAX) {
                sf_log_error("--pid %ld: its command line is longer than %d bytes", pid, SF_CONFSEARCH_CMDLINE_MAX);
                r = -E2BIG;
        }
        if (r == 0 && have == 0) {
                /* A zombie, or a kernel thread. */
                sf_log_error("--pid %ld: the process has no command line (it has exited?)", pid);
                r = -ESRCH;
        }
        if (r < 0) {
                free(b);
                return r;
        }
        *buf = b;
        *len = have;
        return 0;
}

int sf_confsearch_cwd(long pid, char *cwd, size_t size) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%ld/cwd", pid);
        ssize_t n = readlink(path, cwd, size - 1);
        if (n < 0) {
                int r = -errno;
                sf_log_error("--pid %ld: cannot read its working directory (%s): %s", pid, path, strerror(-r));
                return r;
        }
        cwd[n] = '\0';
        return 0;
}
