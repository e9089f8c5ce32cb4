#include "conf/platform.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>

#include "conf/endpoint.h"

/* glibc's getpw*_r need a scratch buffer whose size depends on the NSS module; start with
 * what /etc/passwd needs and grow on ERANGE, up to a bound a sane entry never reaches. */
#define NSS_BUF_START 1024
#define NSS_BUF_MAX (1024 * 1024)

const char *const sf_accounts_unsupported = NULL;
const char sf_token_path_example[] = "/run/secrets/sockferry.token";

const char *sf_conf_home(const char **var) {
        *var = "HOME";
        const char *h = getenv("HOME");
        return h && *h ? h : NULL;
}
const char sf_conf_local_endpoints[] = "a unix socket, expected unix:/abs/path or unix:@name";

/* getpwnam_r (name) or getpwuid_r. Returns 1 when found, 0 when there is no such entry,
 * -errno when the lookup itself failed. */
int sf_account_user(const char *name, uid_t uid, uid_t *out_uid, gid_t *out_gid) {
        for (size_t size = NSS_BUF_START;; size *= 2) {
                struct passwd pw, *res = NULL;
                char *buf = malloc(size);
                if (!buf)
                        return -ENOMEM;
                int r = name ? getpwnam_r(name, &pw, buf, size, &res) : getpwuid_r(uid, &pw, buf, size, &res);
                if (r == 0 && res) {
                        *out_uid = pw.pw_uid;
                        *out_gid = pw.pw_gid;
                        free(buf);
                        return 1;
                }
                free(buf);
                if (r == 0)
                        return 0;
                if (r == ERANGE && size < NSS_BUF_MAX)
                        continue;
                /* getpwnam(3) lists these as what some systems return for "not found". */
                if (r == ENOENT || r == ESRCH || r == EBADF || r == EPERM)
                        return 0;
                return -r;
        }
}

int sf_account_group(const char *name, gid_t *out_gid) {
        for (size_t size = NSS_BUF_START;; size *= 2) {
                struct group gr, *res = NULL;
                char *buf = malloc(size);
                if (!buf)
                        return -ENOMEM;
                int r = getgrnam_r(name, &gr, buf, size, &res);
                if (r == 0 && res) {
                        *out_gid = gr.gr_gid;
                        free(buf);
                        return 1;
                }
                free(buf);
                if (r == 0)
                        return 0;
                if (r == ERANGE && size < NSS_BUF_MAX)
                        continue;
                if (r == ENOENT || r == ESRCH || r == EBADF || r == EPERM)
                        return 0;
                return -r;
        }
}

int sf_endpoint_supported(const struct sf_endpoint *ep, char *err, size_t errlen) {
        if (ep->kind != SF_EP_NPIPE)
                return 0;
        if (err && errlen)
                snprintf(err, errlen,
                         "%s: named pipes are Windows' (sockferry.exe); on %s use unix:/path or tcp:HOST:PORT", ep->text,
#ifdef __APPLE__
                         "macOS"
#else
                         "Linux"
#endif
                );
        return -EINVAL;
}

bool sf_path_is_absolute(const char *path) {
        return path[0] == '/';
}
