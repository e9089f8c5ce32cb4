#pragma once
/* What differs between systems in the configuration: conf/platform_posix.c (Linux, macOS) and
 * conf/platform_win.c. */
#include <stdbool.h>
#include <sys/types.h>

/* A passwd entry by name, or by uid when name is NULL. 1 when found, 0 when there is no such
 * entry, -errno when the lookup itself failed. */
int sf_account_user(const char *name, uid_t uid, uid_t *out_uid, gid_t *out_gid);
/* A group entry by name: 1, 0 or -errno as above. */
int sf_account_group(const char *name, gid_t *out_gid);
/* NULL where the user and group keys work; else the sentence that refuses them. */
extern const char *const sf_accounts_unsupported;

/* What a local endpoint (the control socket) may be here, for messages: "a unix socket,
 * expected ...". */
extern const char sf_conf_local_endpoints[];

/* Whether path is absolute here: /... on POSIX; X:\... or a \\server\share path on Windows. */
bool sf_path_is_absolute(const char *path);
/* A token file's place, for messages. */
extern const char sf_token_path_example[];
/* The home directory a leading ~ stands for ($HOME; on Windows %USERPROFILE% when HOME is not
 * set), and the variable's name for messages; NULL when it is not set. */
const char *sf_conf_home(const char **var);
