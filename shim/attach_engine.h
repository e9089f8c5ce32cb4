#pragma once
/* attach's engines (docker, podman, kubectl, or any command): the command that starts the far
 * end, plain words for the ways it fails (the engine CLI's own messages recognised), and
 * --inject (a static Linux sockferry copied into a container that has none). */
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "relay/attach/host.h"

enum sf_attach_engine_kind { SF_ENGINE_DOCKER, SF_ENGINE_PODMAN, SF_ENGINE_KUBECTL, SF_ENGINE_COMMAND };

struct sf_attach_engine {
        enum sf_attach_engine_kind kind;
        const char *cli;    /* the engine's CLI as given or found */
        const char *target; /* the container (pod) */
        char **argv;        /* the command of the next run (its far end's path may change) */
        char what[200];     /* for messages */
        bool inject;
        const char *inject_path; /* NULL: the installed binary for the container's architecture */
        bool injected;
        char far_path[PATH_MAX]; /* sockferry in the container */
};

/* engine NULL with command: any command (cmd_argv, NULL-terminated). 0, or SF_EX_USAGE
 * (logged) for an engine it does not know. */
int sf_attach_engine_init(struct sf_attach_engine *e, const char *engine, const char *cli, const char *target,
                          char **cmd_argv, bool inject, const char *inject_path);
/* The ended hook of relay/attach/host.h: plain words, whether to go on, and --inject's copy
 * when the container has no sockferry. */
enum sf_attach_next sf_attach_engine_explain(struct sf_attach_engine *e, const struct sf_attach_end *end, char *why,
                                             size_t cap);
void sf_attach_engine_free(struct sf_attach_engine *e);
