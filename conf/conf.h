#pragma once
/* The configuration: INI file (inih) and -F specs, validated before anything is bound. */
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "conf/endpoint.h"
#include "conf/log.h"

#define SF_EX_USAGE 64
#define SF_EX_CONFIG 78

#define SF_NAME_MAX 64
#define SF_MAX_CANDIDATES 8
#define SF_MAX_ALLOW 16
/* Forwards in one configuration (file and -F together). Each is a listening socket whose
 * connections hold two descriptors each: 4096 listeners alone need a descriptor limit four
 * times the usual soft one. A configuration beyond it is generated or hostile, and checking
 * it must stay cheap. */
#define SF_MAX_FORWARDS 4096

enum sf_auth { SF_AUTH_NONE = 0, SF_AUTH_TOKEN };
enum sf_env_format { SF_ENV_PATH = 0, SF_ENV_UNIX_URL };
/* How a forward's connections reach a host relay over an authenticated link (doc/PROTOCOL.md). */
enum sf_link_mode { SF_LINK_SHARED = 0, SF_LINK_PER_CONNECTION };
/* The sockets users forward most (conf/preset.h): defaults for the keys a forward leaves out. */
enum sf_preset { SF_PRESET_NONE = 0, SF_PRESET_SSH_AGENT, SF_PRESET_GPG_AGENT, SF_PRESET_DOCKER };

/* Where a forward came from, for messages: "FILE:LINE: [section]" or "-F 'spec'". */
struct sf_origin {
        char *where; /* on the heap, freed by sf_conf_free() */
};

/* A forward's keys; the defaults the comments give are set in conf/conf.c, in one place. */
struct sf_forward {
        char name[SF_NAME_MAX];
        struct sf_origin origin; /* the section header or the -F argument */

        struct sf_endpoint listen;
        bool listen_set;
        /* The heap holds what is large or rare, so that a forward costs about 1.5 KiB: n_connect
         * (at most SF_MAX_CANDIDATES) candidates, the token file (NULL: the global one); both
         * are freed by sf_conf_free(). */
        struct sf_endpoint *connect;
        size_t n_connect;

        enum sf_auth auth;
        bool allow_insecure;
        char *token_file;
        /* The side auth = token authenticates is the listen side when it is a network endpoint
         * (a host relay), else the connect side; connect-auth = token authenticates the connect
         * side of a network listener too (a relay chained between two links). */
        enum sf_auth connect_auth;
        bool connect_auth_set;
        /* The service the forward offers on its listener (host) or asks for (container):
         * default its own name. service_set: written in the configuration. */
        char service[SF_NAME_MAX];
        bool service_set;
        enum sf_link_mode link;   /* default shared */
        enum sf_preset preset;    /* applied by sf_conf_validate(), to the keys not set */
        uint64_t keepalive_ms;    /* default 15000; 0: no pings */

        char alias[SF_UNIX_PATH_MAX];
        char env[128];
        enum sf_env_format env_format;

        mode_t mode;              /* default 0660 */
        bool mode_set, owner_set, group_set;
        uid_t owner;
        gid_t group;
        uid_t allow_uid[SF_MAX_ALLOW];
        size_t n_allow_uid;
        gid_t allow_gid[SF_MAX_ALLOW];
        size_t n_allow_gid;
        /* attach (sf_conf.listen_elsewhere): the far end makes the listener in a container, so
         * owner, group, allow-uid and allow-gid name the container's accounts, not this
         * system's (on Windows there are none): kept as written, their form checked, for the far
         * end to look up; owner, group and the allow lists' ids above are then not set. */
        bool accounts_elsewhere;
        char owner_name[256], group_name[256];
        char allow_uid_names[1024], allow_gid_names[1024];

        uint32_t max_conns;           /* default 1024 */
        uint32_t max_links;           /* shared links a listener serves at once; default 64 */
        uint32_t preauth_max;         /* unauthenticated connections, a quarter per source; default, set by
                                       * sf_conf_validate(): 4 x max_conns */
        uint64_t connect_timeout_ms;  /* default 5000 */
        uint64_t handshake_timeout_ms;/* default 5000 */
        uint64_t idle_timeout_ms;     /* default 0: none */
};

struct sf_conf {
        char file[PATH_MAX]; /* empty when there is no config file */

        enum sf_log_level log_level;
        enum sf_log_format log_format;
        bool log_level_set;

        struct sf_endpoint control;
        bool control_set;
        char token_file[PATH_MAX];

        bool user_set;
        char user[128];
        uid_t uid;
        gid_t gid;
        bool no_new_privs;
        uint64_t drain_timeout_ms; /* default 10000 */
        bool seccomp;              /* relay: the seccomp sandbox after start-up; default true */
        /* attach: the forwards' listen endpoints are made by the far end (`link --stdio`, in a
         * Linux container), so this system need not support them (a unix path on Windows). */
        bool listen_elsewhere;

        struct sf_forward *forwards;
        size_t n_forwards;
};

/* Defaults; call before loading. */
void sf_conf_init(struct sf_conf *c);
/* Loads an INI file. Errors are logged as "FILE:LINE: [section] key: ..."; returns -errno. */
int sf_conf_load(struct sf_conf *c, const char *path);
/* The same for len bytes of text in memory, which messages call name (the configuration
 * `sockferry link --stdio` receives from attach over the link). */
int sf_conf_load_text(struct sf_conf *c, const char *name, const char *text, size_t len);
/* Adds one -F NAME:LISTEN=CONNECT[,key=value...] forward. Errors name the argument. */
int sf_conf_add_spec(struct sf_conf *c, const char *spec);
/* Cross-checks after everything is loaded: missing keys, duplicates, policy. Also sets the
 * defaults that follow other keys (preauth_max) and those of each forward's preset. */
int sf_conf_validate(struct sf_conf *c);
/* The token file a forward uses: its own, else the global one, else NULL. */
const char *sf_conf_token_file(const struct sf_conf *c, const struct sf_forward *f);
void sf_conf_free(struct sf_conf *c);
