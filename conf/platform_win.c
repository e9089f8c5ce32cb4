#include "conf/platform.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "conf/endpoint.h"

const char *const sf_accounts_unsupported =
        "user and group accounts are not supported on Windows: the relay runs as the account that starts it "
        "(and a named pipe it creates is that account's); remove the key";

const char sf_token_path_example[] = "C:\\Users\\NAME\\AppData\\Roaming\\sockferry\\token";

const char *sf_conf_home(const char **var) {
        const char *h = getenv("HOME");
        *var = "HOME";
        if (h && *h)
                return h;
        *var = "USERPROFILE";
        h = getenv("USERPROFILE");
        return h && *h ? h : NULL;
}
const char sf_conf_local_endpoints[] = "a named pipe, expected npipe:NAME";

int sf_account_user(const char *name, uid_t uid, uid_t *out_uid, gid_t *out_gid) {
        return -ENOTSUP;
}

int sf_account_group(const char *name, gid_t *out_gid) {
        return -ENOTSUP;
}

/* Wine, the only Windows this project runs its tests on, has no AF_UNIX, so unix sockets stay
 * out of the Windows build rather than ship untested; vsock and socket activation are Linux's. */
int sf_endpoint_supported(const struct sf_endpoint *ep, char *err, size_t errlen) {
        const char *why;
        switch (ep->kind) {
        case SF_EP_TCP:
        case SF_EP_NPIPE:
                return 0;
        case SF_EP_UNIX:
        case SF_EP_ABSTRACT:
                why = "unix sockets are not supported on Windows; use npipe:NAME (a named pipe) or tcp:HOST:PORT";
                break;
        case SF_EP_VSOCK:
                why = "vsock is Linux's; on Windows use tcp:HOST:PORT";
                break;
        default:
                why = "socket activation is systemd's; on Windows use tcp:HOST:PORT or npipe:NAME";
                break;
        }
        if (err && errlen)
                snprintf(err, errlen, "%s: %s", ep->text, why);
        return -EINVAL;
}

static bool is_sep(char c) {
        return c == '\\' || c == '/';
}

bool sf_path_is_absolute(const char *path) {
        bool drive = ((path[0] >= 'A' && path[0] <= 'Z') || (path[0] >= 'a' && path[0] <= 'z')) && path[1] == ':' &&
                     is_sep(path[2]);
        return drive || (is_sep(path[0]) && is_sep(path[1]));
}
