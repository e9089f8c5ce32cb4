#include "shim/attach_engine.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/log.h"
#include "shim/attach_inject.h"
#include "shim/cli.h"

/* The words of the far end that --inject made (shim/attach_inject.c): its copy is gone, or is
 * not as attach left it. */
#define INJECT_GONE "sf-inject: gone"
#define INJECT_UNSAFE "sf-inject: unsafe"
/* Copies in a row whose run failed before the link came up: after this many, attach stops
 * copying (a container that never keeps one). */
#define INJECT_TRIES 3

static const char *const engine_names[] = { "docker", "podman", "kubectl" };

/* Case-insensitive: the engines' messages change case between versions. */
static bool has(const char *s, const char *needle) {
        size_t n = strlen(needle);
        for (; *s; s++) {
                size_t i = 0;
                while (i < n && s[i] && tolower((unsigned char)s[i]) == tolower((unsigned char)needle[i]))
                        i++;
                if (i == n)
                        return true;
        }
        return false;
}

int sf_attach_engine_init(struct sf_attach_engine *e, const char *engine, const char *cli, const char *target,
                          char **cmd_argv, bool inject, const char *inject_path, const char *inject_dir) {
        memset(e, 0, sizeof *e);
        e->inject = inject;
        e->inject_path = inject_path;
        e->inject_dir = inject_dir ? inject_dir : "/tmp";
        if (!engine) {
                e->kind = SF_ENGINE_COMMAND;
                size_t n = 0;
                while (cmd_argv[n])
                        n++;
                if (!(e->argv = calloc(n + 1, sizeof *e->argv)))
                        return 1;
                memcpy(e->argv, cmd_argv, n * sizeof *e->argv);
                size_t o = 0;
                for (size_t i = 0; i < n && o < sizeof e->what; i++)
                        o += (size_t)snprintf(e->what + o, sizeof e->what - o, "%s%s", i ? " " : "`", cmd_argv[i]);
                if (o < sizeof e->what)
                        snprintf(e->what + o, sizeof e->what - o, "`");
                else
                        memcpy(e->what + sizeof e->what - 5, "...`", 5);
                return 0;
        }
        size_t k = 0;
        while (k < 3 && strcmp(engine, engine_names[k]) != 0)
                k++;
        if (k == 3)
                return sf_cli_usage_error("attach", "--engine %s: expected docker, podman or kubectl (or -- CMD for any other)",
                                          engine);
        e->kind = (enum sf_attach_engine_kind)k;
        e->cli = cli && *cli ? cli : engine_names[k];
        e->target = target;
        /* The exec, and the most an injected copy's run adds (shim/attach_inject.c). */
        if (!(e->argv = calloc(SF_ATTACH_EXEC_MAX + 8, sizeof *e->argv)))
                return 1;
        size_t i = sf_attach_engine_exec(e, true, e->argv);
        e->argv[i++] = "sockferry";
        e->argv[i++] = "link";
        e->argv[i++] = "--stdio";
        snprintf(e->what, sizeof e->what, "%s exec %s", engine_names[k], target);
        return 0;
}

size_t sf_attach_engine_exec(const struct sf_attach_engine *e, bool with_stdin, char **argv) {
        size_t i = 0;
        argv[i++] = (char *)e->cli;
        argv[i++] = "exec";
        if (with_stdin)
                argv[i++] = "-i";
        if (e->kind == SF_ENGINE_KUBECTL) {
                argv[i++] = (char *)e->target;
                argv[i++] = "--";
                return i;
        }
        /* root in the container: the sockets' owner and mode are then what the configuration
         * says, whatever user the image runs as. */
        if (with_stdin) {
                argv[i++] = "-u";
                argv[i++] = "0";
        }
        argv[i++] = (char *)e->target;
        return i;
}

size_t sf_attach_engine_exec_as(const struct sf_attach_engine *e, const char *user, char **argv) {
        if (!user || e->kind == SF_ENGINE_KUBECTL)
                return sf_attach_engine_exec(e, true, argv);
        size_t i = 0;
        argv[i++] = (char *)e->cli;
        argv[i++] = "exec";
        argv[i++] = "-i";
        if (user[0]) {
                argv[i++] = "-u";
                argv[i++] = (char *)user;
        }
        argv[i++] = (char *)e->target;
        return i;
}

void sf_attach_engine_free(struct sf_attach_engine *e) {
        free(e->argv);
        e->argv = NULL;
}

/* ---- plain words ---------------------------------------------------------------------------- */

/* --inject's copy (again): 0, or -1 with why. A container that loses every copy before its
 * link comes up is not copied into for ever. */
static int copy_in(struct sf_attach_engine *e, const char *line, char *why, size_t cap) {
        if (e->inject_runs_failed++ >= INJECT_TRIES) {
                snprintf(why, cap, "--inject copied sockferry into %s %d times and it never came up (%s)", e->target,
                         INJECT_TRIES, line[0] ? line : "no message");
                return -1;
        }
        return sf_attach_inject(e, why, cap);
}

/* The injected copy's run refused to start it: its directory is gone (a container made anew),
 * or is not as attach left it (someone made one of the same name): a new copy, in a new
 * directory. */
static enum sf_attach_next inject_again(struct sf_attach_engine *e, const char *line, char *why, size_t cap) {
        char was[PATH_MAX];
        const char *unsafe = strstr(line, INJECT_UNSAFE ": ");
        snprintf(was, sizeof was, "%s", e->far_dir);
        /* Someone in the container may have tried to have root run a binary of theirs. */
        if (unsafe)
                sf_log_warn("inject: not run: %s; copying sockferry in anew", unsafe + strlen(INJECT_UNSAFE ": "));
        if (copy_in(e, line, why, cap) < 0)
                return SF_ATTACH_GIVE_UP;
        snprintf(why, cap, "%s %s: --inject copied sockferry into %s", was,
                 unsafe ? "is not as attach left it" : "is gone (the container was made anew)", e->far_dir);
        return SF_ATTACH_RETRY;
}

enum sf_attach_next sf_attach_engine_explain(struct sf_attach_engine *e, const struct sf_attach_end *end, char *why,
                                             size_t cap) {
        const char *line = end->last_line;
        bool engine = e->kind != SF_ENGINE_COMMAND;
        const char *cli = engine ? e->cli : e->argv[0];
        if (end->spawn_err == -ENOENT) {
                if (engine)
                        snprintf(why, cap, "the engine CLI %s was not found: install it, or give its path with --engine-cmd PATH "
                                 "(or $SOCKFERRY_DOCKER)", cli);
                else
                        snprintf(why, cap, "%s was not found: give its full path or fix PATH", cli);
                return SF_ATTACH_GIVE_UP;
        }
        if (end->spawn_err) {
                snprintf(why, cap, "%s could not be started: %s", cli, strerror(-end->spawn_err));
                return SF_ATTACH_GIVE_UP;
        }
        if (end->was_up)
                e->inject_runs_failed = 0;
        if (engine && e->injected && !end->was_up && (strstr(line, INJECT_GONE ": ") || strstr(line, INJECT_UNSAFE ": ")))
                return inject_again(e, line, why, cap);
        /* docker and podman end an exec whose container stopped with 137 (SIGKILL's); podman 4
         * sometimes loses that race and ends 255 with "retrieving exec session ...: exec died
         * event ... not found" instead. */
        if (engine && end->was_up &&
            (end->exit_status == 137 || (end->exit_status == 255 && has(line, "exec session") && has(line, "died")))) {
                snprintf(why, cap, "the exec was killed: %s stopped or restarted", e->target);
                return SF_ATTACH_RETRY;
        }
        if (end->term_signal || end->was_up)
                return SF_ATTACH_RETRY; /* the far end's last line says the rest */
        if (has(line, "permission denied") && (has(line, "docker daemon socket") || has(line, ".sock") || has(line, "daemon"))) {
                snprintf(why, cap, "permission denied on the engine's socket (%s): add your user to the engine's group (docker), "
                         "use a context or DOCKER_HOST you may use, or run attach with the rights to exec",
                         line);
                return SF_ATTACH_GIVE_UP;
        }
        if (has(line, "forbidden") && has(line, "exec")) {
                snprintf(why, cap, "not allowed to exec into %s (%s): exec rights are what attach needs", e->target, line);
                return SF_ATTACH_GIVE_UP;
        }
        if (has(line, "cannot connect to the docker daemon") || has(line, "cannot connect to podman") ||
            has(line, "connection refused") || has(line, "is the docker daemon running")) {
                snprintf(why, cap, "the engine is not reachable (%s): start it (Docker Desktop, colima start, podman machine "
                         "start); attach tries again",
                         line);
                return SF_ATTACH_RETRY;
        }
        if (has(line, "no such container") || has(line, "no container with name") ||
            (has(line, "notfound") && has(line, "not found"))) {
                snprintf(why, cap, "no such container: %s (%s); check the name with %s ps", e->target ? e->target : "?", line,
                         e->kind == SF_ENGINE_KUBECTL ? "kubectl get pods; kubectl" : cli);
                return SF_ATTACH_GIVE_UP;
        }
        if (has(line, "is not running") || has(line, "state improper") || has(line, "completed pod") ||
            has(line, "container not found")) {
                snprintf(why, cap, "container %s is not running (%s): start it; attach tries again", e->target ? e->target : "?",
                         line);
                return SF_ATTACH_RETRY;
        }
        bool not_found = has(line, "executable file not found") || has(line, "not found in $path") ||
                         has(line, "no such file or directory") || has(line, "not found");
        if ((end->exit_status == 126 || end->exit_status == 127) && (not_found || !line[0])) {
                if (engine && e->inject) {
                        /* Again after a run that worked: a container made anew has lost its copy. */
                        if (copy_in(e, line, why, cap) < 0)
                                return SF_ATTACH_GIVE_UP;
                        snprintf(why, cap, "no sockferry in %s: --inject copied one in", e->target);
                        return SF_ATTACH_RETRY;
                }
                if (engine)
                        snprintf(why, cap, "no sockferry in the container %s (%s): give --inject to copy a static one in, or "
                                 "install sockferry in the image",
                                 e->target, line[0] ? line : "exit status 126/127");
                else
                        snprintf(why, cap, "the far end has no sockferry, or the command was not found (%s): the command "
                                 "must start `sockferry link --stdio` there",
                                 line[0] ? line : "exit status 126/127");
                return SF_ATTACH_GIVE_UP;
        }
        if (has(line, "unknown command 'link'") || (end->exit_status == 64 && has(line, "link"))) {
                if (engine && e->inject && !e->injected) {
                        if (copy_in(e, line, why, cap) < 0)
                                return SF_ATTACH_GIVE_UP;
                        snprintf(why, cap, "the sockferry in %s is older and has no `link`: --inject copied this one in",
                                 e->target);
                        return SF_ATTACH_RETRY;
                }
                snprintf(why, cap, "the far end's sockferry is older and has no `link` command (%s): %s", line,
                         engine ? "give --inject to copy this version in, or update the image"
                                : "update sockferry there to " SF_VERSION " or later");
                return SF_ATTACH_GIVE_UP;
        }
        if (end->exit_status == SF_EX_CONFIG) {
                snprintf(why, cap, "the far end refused the listen sections: %s", line[0] ? line : "(no message)");
                return SF_ATTACH_GIVE_UP;
        }
        if (line[0])
                snprintf(why, cap, "the far end said: %s", line);
        return SF_ATTACH_RETRY;
}
