#include "shim/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "conf/value.h"

int sf_cli_usage_error(const char *cmd, const char *fmt, ...) {
        va_list ap;
        fprintf(stderr, "sockferry %s: ", cmd);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\nRun 'sockferry %s --help' for usage.\n", cmd);
        return SF_EX_USAGE;
}

int sf_cli_conf_load(struct sf_conf *c, const char *file, char *const *specs, size_t n_specs, int verbose,
                     const char *user) {
        bool failed = false;

        if (file && sf_conf_load(c, file) < 0)
                failed = true;
        for (size_t i = 0; i < n_specs; i++)
                if (sf_conf_add_spec(c, specs[i]) < 0)
                        failed = true;
        if (user) {
                char err[256];
                if (sf_user_group_parse(user, &c->uid, &c->gid, err, sizeof err) < 0) {
                        sf_log_error("--user %s: %s", user, err);
                        failed = true;
                } else {
                        c->user_set = true;
                        snprintf(c->user, sizeof c->user, "%s", user);
                }
        }
        if (!failed && sf_conf_validate(c) < 0)
                failed = true;

        int level = (int)c->log_level + verbose;
        if (level < SF_LOG_ERROR)
                level = SF_LOG_ERROR;
        if (level > SF_LOG_DEBUG)
                level = SF_LOG_DEBUG;
        sf_log_setup((enum sf_log_level)level, c->log_format);
        return failed ? SF_EX_CONFIG : 0;
}

void sf_cli_raise_nofile(void) {
        struct rlimit rl;
        /* Every relayed connection holds two descriptors; the 1024 soft default would cap a
         * relay near 500 clients although the hard limit allows far more (no select() here). */
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
}
