#include "shim/attach_engine.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uv.h>

#include "conf/log.h"
#include "relay/sys/platform.h"
#include "shim/cli.h"

/* The far end's fixed, versioned place when --inject copied it (a newer attach copies its own). */
#define INJECT_DIR "/tmp/sockferry-" SF_VERSION
#define INJECT_PATH INJECT_DIR "/sockferry"
/* What the engine CLI prints to us while --inject asks and copies: a line or two. */
#define CAPTURE_MAX 512

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
                          char **cmd_argv, bool inject, const char *inject_path) {
        memset(e, 0, sizeof *e);
        e->inject = inject;
        e->inject_path = inject_path;
        snprintf(e->far_path, sizeof e->far_path, "sockferry");
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
        if (!(e->argv = calloc(10, sizeof *e->argv)))
                return 1;
        size_t i = 0;
        e->argv[i++] = (char *)e->cli;
        e->argv[i++] = "exec";
        e->argv[i++] = "-i";
        if (e->kind == SF_ENGINE_KUBECTL) {
                e->argv[i++] = (char *)target;
                e->argv[i++] = "--";
        } else {
                /* root in the container: the sockets' owner and mode are then what the
                 * configuration says, whatever user the image runs as. */
                e->argv[i++] = "-u";
                e->argv[i++] = "0";
                e->argv[i++] = (char *)target;
        }
        e->argv[i++] = e->far_path;
        e->argv[i++] = "link";
        e->argv[i++] = "--stdio";
        snprintf(e->what, sizeof e->what, "%s exec %s", engine_names[k], target);
        return 0;
}

void sf_attach_engine_free(struct sf_attach_engine *e) {
        free(e->argv);
        e->argv = NULL;
}

/* ---- --inject ------------------------------------------------------------------------------ */

struct capture {
        char *out;
        size_t len, cap;
        int64_t status;
        int term_signal;
};

static void cap_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
        (void)suggested;
        static char skip[256];
        struct capture *c = h->data;
        if (c->len + 1 < c->cap)
                *buf = uv_buf_init(c->out + c->len, (unsigned)(c->cap - 1 - c->len));
        else
                *buf = uv_buf_init(skip, sizeof skip);
}

static void cap_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
        struct capture *c = s->data;
        if (n < 0) {
                uv_close((uv_handle_t *)s, NULL);
                return;
        }
        if (buf->base == c->out + c->len)
                c->len += (size_t)n;
}

static void cap_exit(uv_process_t *p, int64_t status, int term_signal) {
        struct capture *c = p->data;
        c->status = status;
        c->term_signal = term_signal;
        uv_close((uv_handle_t *)p, NULL);
}

/* Runs argv to its end on a loop of its own (nothing is attached meanwhile); what it printed,
 * both streams, in out. The exit status, or -errno when it could not run. */
static int run_capture(char *argv[], char *out, size_t cap) {
        struct capture c = { .out = out, .cap = cap };
        uv_loop_t loop;
        uv_pipe_t pipes[2];
        uv_process_t proc;
        out[0] = '\0';
        if (uv_loop_init(&loop) < 0)
                return -ENOMEM;
        for (int i = 0; i < 2; i++) {
                uv_pipe_init(&loop, &pipes[i], 0);
                pipes[i].data = &c;
        }
        proc.data = &c;
        uv_stdio_container_t stdio[3] = {
                { .flags = UV_IGNORE },
                { .flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&pipes[0] },
                { .flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&pipes[1] },
        };
        uv_process_options_t opts = { .exit_cb = cap_exit, .file = argv[0], .args = argv, .stdio_count = 3,
                                      .stdio = stdio, .flags = UV_PROCESS_WINDOWS_HIDE };
        int r = uv_spawn(&loop, &proc, &opts);
        for (int i = 0; i < 2; i++)
                if (r < 0)
                        uv_close((uv_handle_t *)&pipes[i], NULL);
                else
                        uv_read_start((uv_stream_t *)&pipes[i], cap_alloc, cap_read);
        if (r < 0)
                uv_close((uv_handle_t *)&proc, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        out[c.len] = '\0';
        while (c.len && (out[c.len - 1] == '\n' || out[c.len - 1] == '\r' || out[c.len - 1] == ' '))
                out[--c.len] = '\0';
        if (r < 0)
                return -sf_errno_uv(r);
        return c.term_signal ? 128 + c.term_signal : (int)c.status;
}

/* The container's machine as uname -m prints it: asked through exec; an image without uname
 * (scratch, distroless) runs on the machine of the engine, which is ours. */
static void container_arch(const struct sf_attach_engine *e, char *arch, size_t cap) {
        char out[CAPTURE_MAX];
        char *argv[] = { (char *)e->cli, "exec", (char *)e->target, e->kind == SF_ENGINE_KUBECTL ? "--" : "uname",
                         e->kind == SF_ENGINE_KUBECTL ? "uname" : "-m", e->kind == SF_ENGINE_KUBECTL ? "-m" : NULL, NULL };
        if (run_capture(argv, out, sizeof out) == 0 && out[0] && !strchr(out, ' ')) {
                snprintf(arch, cap, "%s", out);
                return;
        }
        uv_utsname_t u;
        if (uv_os_uname(&u) == 0)
                snprintf(arch, cap, "%s", strcmp(u.machine, "arm64") == 0 ? "aarch64" : u.machine);
        else
                snprintf(arch, cap, "x86_64");
        sf_log_info("inject: %s has no uname: taking this machine's architecture, %s", e->target, arch);
}

/* Copies the static binary in; 0, or -1 with why. */
static int inject(struct sf_attach_engine *e, char *why, size_t cap) {
        char arch[64], src[PATH_MAX], out[CAPTURE_MAX];
        container_arch(e, arch, sizeof arch);
        if (e->inject_path)
                snprintf(src, sizeof src, "%s", e->inject_path);
        else
                snprintf(src, sizeof src, "%s/linux-%s/sockferry", SF_INJECT_DIR, arch);
        struct stat st;
        if (stat(src, &st) < 0 || !S_ISREG(st.st_mode)) {
                snprintf(why, cap,
                         "no sockferry in %s, and --inject has no static Linux binary for %s at %s (%s): install the "
                         "package that ships them, or give --inject=PATH (packaging/linux/build-static.sh builds one)",
                         e->target, arch, src, stat(src, &st) < 0 ? strerror(errno) : "not a regular file");
                return -1;
        }
        char *mkdir_argv[] = { (char *)e->cli, "exec", (char *)e->target, e->kind == SF_ENGINE_KUBECTL ? "--" : "mkdir",
                               e->kind == SF_ENGINE_KUBECTL ? "mkdir" : "-p", e->kind == SF_ENGINE_KUBECTL ? "-p" : INJECT_DIR,
                               e->kind == SF_ENGINE_KUBECTL ? INJECT_DIR : NULL, NULL };
        char dst[PATH_MAX + 256];
        /* kubectl exec takes pod/NAME, kubectl cp NAME (or NAMESPACE/NAME) only. */
        const char *cp_target = e->target;
        if (e->kind == SF_ENGINE_KUBECTL && strncmp(cp_target, "pod/", 4) == 0)
                cp_target += 4;
        snprintf(dst, sizeof dst, "%s:%s", cp_target, INJECT_PATH);
        char *cp_argv[] = { (char *)e->cli, "cp", src, dst, NULL };
        int r = run_capture(mkdir_argv, out, sizeof out);
        if (r == 0)
                r = run_capture(cp_argv, out, sizeof out);
        if (r != 0) {
                snprintf(why, cap, "no sockferry in %s, and --inject could not copy %s to %s: %s", e->target, src, INJECT_PATH,
                         out[0] ? out : r < 0 ? strerror(-r) : "the engine's cp failed");
                return -1;
        }
        snprintf(e->far_path, sizeof e->far_path, "%s", INJECT_PATH);
        e->injected = true;
        sf_log_info("inject: copied %s (%s) to %s:%s", src, arch, e->target, INJECT_PATH);
        return 0;
}

/* ---- plain words ---------------------------------------------------------------------------- */

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
        if (engine && end->was_up && end->exit_status == 137) {
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
                if (engine && e->inject && e->injected && !end->ever_up) {
                        snprintf(why, cap, "--inject copied sockferry to %s:%s, but it does not run there (%s): a /tmp "
                                 "mounted noexec, or a binary of another architecture (--inject=PATH)",
                                 e->target, INJECT_PATH, line[0] ? line : "exit status 126/127");
                        return SF_ATTACH_GIVE_UP;
                }
                if (engine && e->inject) {
                        /* Again after a run that worked: a container made anew has lost its /tmp. */
                        if (inject(e, why, cap) < 0)
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
                        if (inject(e, why, cap) < 0)
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
