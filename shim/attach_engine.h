#pragma once
/* attach's engines (docker, podman, kubectl, or any command): the command that starts the far
 * end, plain words for the ways it fails (the engine CLI's own messages recognised), and
 * --inject (shim/attach_inject.h) when the container has no sockferry. */
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "relay/attach/host.h"

enum sf_attach_engine_kind { SF_ENGINE_DOCKER, SF_ENGINE_PODMAN, SF_ENGINE_KUBECTL, SF_ENGINE_COMMAND };

/* The most words of an engine's exec up to the command (sf_attach_engine_exec). */
#define SF_ATTACH_EXEC_MAX 7

struct sf_attach_engine {
        enum sf_attach_engine_kind kind;
        const char *cli;    /* the engine's CLI as given or found */
        const char *target; /* the container (pod) */
        char **argv;        /* the command of the next run (the injected copy's once there is one) */
        char what[200];     /* for messages */
        bool inject;
        const char *inject_path; /* --inject=PATH; NULL: found for the container's architecture */
        const char *inject_dir;  /* --inject-dir: the directory in the container the copy goes in */
        bool injected;
        unsigned inject_runs_failed; /* copies in a row that did not come up: a loop is ended */
        char far_dir[PATH_MAX]; /* the directory --inject made in the container */
        char far_sum[65];       /* the sha256 of the copy in it, hex */
};

/* engine NULL with command: any command (cmd_argv, NULL-terminated). 0, or SF_EX_USAGE
 * (logged) for an engine it does not know. */
int sf_attach_engine_init(struct sf_attach_engine *e, const char *engine, const char *cli, const char *target,
                          char **cmd_argv, bool inject, const char *inject_path, const char *inject_dir);
/* The engine's exec into the target up to the command, in argv (room for
 * SF_ATTACH_EXEC_MAX): CLI exec [-i] [-u 0] TARGET [--]. with_stdin: -i, and user 0 where the
 * engine can ask for one (docker, podman; kubectl runs the pod's user). The count. */
size_t sf_attach_engine_exec(const struct sf_attach_engine *e, bool with_stdin, char **argv);
/* The engine's exec into the target as user (NULL: root; kubectl: always the pod's user) up
 * to the command, with -i, in argv (room for SF_ATTACH_EXEC_MAX). The count. */
size_t sf_attach_engine_exec_as(const struct sf_attach_engine *e, const char *user, char **argv);
/* The ended hook of relay/attach/host.h: plain words, whether to go on, and --inject's copy
 * when the container has no sockferry (or the copy is gone, or not as it was left). */
enum sf_attach_next sf_attach_engine_explain(struct sf_attach_engine *e, const struct sf_attach_end *end, char *why,
                                             size_t cap);
void sf_attach_engine_free(struct sf_attach_engine *e);
