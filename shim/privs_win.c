#include "shim/privs.h"

/* Windows: the relay runs as the account that starts it; the configuration refuses `user`
 * there (conf/platform_win.c), so there is nothing to drop. */
int sf_privs_drop(const struct sf_conf *c) {
        return 0;
}
