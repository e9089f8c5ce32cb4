#include "shim/confsearch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "conf/log.h"

/* Windows: the user's %APPDATA%\sockferry\sockferry.conf (a relay started at logon), then the
 * machine's %ProgramData%\sockferry\sockferry.conf. */

static const char *place(const char *var, char *buf, size_t size) {
        const char *dir = getenv(var);
        if (!dir || !dir[0])
                return NULL;
        snprintf(buf, size, "%s\\sockferry\\sockferry.conf", dir);
        return buf;
}

const char *sf_confsearch_find(char *buf, size_t size) {
        if (place("APPDATA", buf, size) && access(buf, F_OK) == 0)
                return buf;
        if (place("ProgramData", buf, size) && access(buf, F_OK) == 0)
                return buf;
        return NULL;
}

const char *sf_confsearch_places(char *buf, size_t size) {
        char user[4096], machine[4096];
        const char *u = place("APPDATA", user, sizeof user), *m = place("ProgramData", machine, sizeof machine);
        snprintf(buf, size, "%s%s%s", u ? u : "", u && m ? ", then " : "", m ? m : "");
        return buf;
}

int sf_confsearch_cmdline(long pid, char **buf, size_t *len) {
        (void)buf, (void)len;
        sf_log_error("--pid %ld: reading another process's command line is for Linux containers (/proc); "
                     "give -c FILE or -F SPEC instead", pid);
        return -ENOSYS;
}

int sf_confsearch_cwd(long pid, char *cwd, size_t size) {
        (void)cwd, (void)size;
        sf_log_error("--pid %ld: no working directory of another process on Windows", pid);
        return -ENOSYS;
}
