#include "shim/privs.h"

#include <cap-ng.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shim/platform.h"

/* Capability numbers run below 64 for as long as the kernel ABI has two 32-bit words;
 * libcap-ng answers "no" for the ones this kernel does not know. */
#define CAP_SLOTS 64

static const capng_type_t all_types[] = {
        CAPNG_EFFECTIVE, CAPNG_PERMITTED, CAPNG_INHERITABLE, CAPNG_BOUNDING_SET, CAPNG_AMBIENT,
};

/* Reads the capabilities back from the kernel rather than trusting what was asked for. */
static int caps_check_empty(void) {
        if (capng_get_caps_process() < 0)
                return -(errno ? errno : EIO);
        for (unsigned cap = 0; cap < CAP_SLOTS; cap++)
                for (size_t t = 0; t < sizeof all_types / sizeof all_types[0]; t++)
                        if (capng_have_capability(all_types[t], cap))
                                return -EPERM;
        return 0;
}

/* capng_change_id() returns a negative step number; say which step failed. */
static const char *change_id_step(int r) {
        switch (r) {
        case -3:
                return "cannot take the capabilities needed to change user (sockferry must start as root, with CAP_SETUID and CAP_SETGID)";
        case -4:
                return "cannot change the group";
        case -5:
                return "cannot drop the supplementary groups";
        case -6:
                return "cannot change the user";
        case -8:
                return "cannot clear the capability bounding set (needs CAP_SETPCAP)";
        default:
                return "cannot change user";
        }
}

int sf_privs_drop(const struct sf_conf *c) {
        if (c->user_set) {
                capng_clear(CAPNG_SELECT_ALL);
                errno = 0;
                int r = capng_change_id((int)c->uid, (int)c->gid,
                                        CAPNG_DROP_SUPP_GRP | CAPNG_CLEAR_BOUNDING | CAPNG_CLEAR_AMBIENT);
                if (r < 0) {
                        int err = errno ? errno : EPERM;
                        sf_log_error("user %s (uid %u, gid %u): %s: %s", c->user, (unsigned)c->uid, (unsigned)c->gid,
                                     change_id_step(r), strerror(err));
                        return -err;
                }
                r = caps_check_empty();
                if (r < 0) {
                        sf_log_error("user %s (uid %u): capabilities are still held after dropping them; refusing to go on",
                                     c->user, (unsigned)c->uid);
                        return r;
                }
        }
        int r = c->no_new_privs ? sf_proc_no_new_privs() : 0;
        if (r < 0) {
                sf_log_error("no-new-privs: cannot set PR_SET_NO_NEW_PRIVS: %s", strerror(-r));
                return r;
        }
        return 0;
}

int sf_privs_limit(const int *keep, size_t n_keep) {
        if (capng_get_caps_process() < 0) {
                int err = errno ? errno : EIO;
                sf_log_error("cannot read this process's capabilities: %s", strerror(err));
                return -err;
        }
        bool can_bound = capng_have_capability(CAPNG_EFFECTIVE, CAP_SETPCAP);
        uint64_t kept = 0;
        for (size_t i = 0; i < n_keep; i++)
                if (keep[i] >= 0 && keep[i] < CAP_SLOTS && capng_have_capability(CAPNG_PERMITTED, (unsigned)keep[i]))
                        kept |= UINT64_C(1) << keep[i];

        capng_clear(CAPNG_SELECT_ALL);
        char names[512] = "";
        size_t len = 0;
        for (unsigned cap = 0; cap < CAP_SLOTS; cap++) {
                if (!(kept & (UINT64_C(1) << cap)))
                        continue;
                capng_update(CAPNG_ADD, CAPNG_EFFECTIVE | CAPNG_PERMITTED, cap);
                const char *name = capng_capability_to_name(cap);
                if (len < sizeof names)
                        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "",
                                                name ? name : "?");
        }
        /* Emptying the bounding set needs CAP_SETPCAP; without it the set is left as it is,
         * which only matters for programs this process would exec, and it execs none. */
        errno = 0;
        if (capng_apply(can_bound ? CAPNG_SELECT_ALL : CAPNG_SELECT_CAPS | CAPNG_SELECT_AMBIENT) != 0) {
                int err = errno ? errno : EPERM;
                sf_log_error("cannot drop capabilities: %s", strerror(err));
                return -err;
        }
        sf_log_debug("capabilities kept after binding: %s", kept ? names : "none");
        return 0;
}
