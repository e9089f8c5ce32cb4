#include "shim/confsearch.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
