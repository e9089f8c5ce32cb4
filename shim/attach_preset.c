#include "shim/attach_preset.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "conf/conf.h"
#include "conf/log.h"
#include "shim/capture.h"

#define SSH_LISTEN "/run/sockferry/ssh-agent.sock"
#define GPG_LISTEN "/run/sockferry/gpg-agent.sock"
#define DOCKER_LISTEN "/var/run/docker.sock"
#define PROFILE "/etc/profile.d/sockferry.sh"

/* What a set-up exec prints: a few lines. The host's exported public keys: a few KiB each. */
#define SAID_MAX 4096
#define KEYS_MAX (1 << 20)

/* ---- what runs in the container ---------------------------------------------------------------
 *
 * POSIX sh and coreutils or busybox, as `/bin/sh -c SCRIPT sf-setup ARG...`. Every line for
 * attach starts "sf-setup: ". */

/* As the user, in its own exec: sf-setup [gpg [keys]], the keys on stdin. Says "user UID GID",
 * "gpg LINK" and "keys WHAT". Everything it touches is the user's: the gpg home and the
 * directory of its agent socket, 0700; no-autostart in gpg.conf, so that the container's gpg
 * never starts an agent of its own in place of the host's; the agent socket a link to the
 * one attach binds (a socket there, from an agent the container started, is stopped first). */
static const char user_script[] =
        "set -f\n"
        "say() { printf 'sf-setup: %s\\n' \"$*\"; }\n"
        "uid=$(id -u) && gid=$(id -g) || { say 'failed: no id command (coreutils or busybox)'; exit 1; }\n"
        "say \"user $uid $gid\"\n"
        "gpg=$1 keys=$2\n"
        "[ \"$gpg\" = gpg ] || exit 0\n"
        "command -v gpgconf >/dev/null 2>&1 || { say 'failed: the container has no gpgconf: install GnuPG there "
        "(apt-get install gnupg, apk add gnupg, dnf install gnupg2)'; exit 1; }\n"
        "home=$(gpgconf --list-dirs homedir) && sock=$(gpgconf --list-dirs agent-socket) && [ -n \"$sock\" ] || "
        "{ say 'failed: gpgconf --list-dirs said nothing'; exit 1; }\n"
        "for d in \"$home\" \"${sock%/*}\"; do\n"
        "  mkdir -p -m 0700 \"$d\" 2>/dev/null; chmod 0700 \"$d\" 2>/dev/null\n"
        "  set -- $(ls -ldn \"$d\" 2>/dev/null)\n"
        "  [ \"$3\" = \"$uid\" ] || { say \"failed: $d is not uid $uid's (gpg refuses a home another user owns)\"; exit 1; }\n"
        "done\n"
        "grep -qx 'no-autostart' \"$home/gpg.conf\" 2>/dev/null || printf 'no-autostart\\n' >>\"$home/gpg.conf\" || "
        "{ say \"failed: cannot write $home/gpg.conf\"; exit 1; }\n"
        "if [ -S \"$sock\" ] && [ ! -L \"$sock\" ]; then gpgconf --kill gpg-agent 2>/dev/null; fi\n"
        "ln -sfn " GPG_LISTEN " \"$sock\" || { say \"failed: cannot link $sock to " GPG_LISTEN "\"; exit 1; }\n"
        "say \"gpg $sock\"\n"
        "[ \"$keys\" = keys ] || exit 0\n"
        "out=$(gpg --batch --no-autostart --import 2>&1)\n"
        "said=$(printf '%s\\n' \"$out\" | sed -n 's/^gpg: *\\(imported\\|unchanged\\): *\\([0-9]*\\).*/\\1 \\2/p' | tr '\\n' ' ')\n"
        "say \"keys ${said:-none: $(printf '%s\\n' \"$out\" | tail -n 1)}\"\n";

/* As root: sf-setup NAME=VALUE...: PROFILE exports them, and the shells' system rc files
 * that exist source it (an interactive `docker exec … bash` reads /etc/bash.bashrc, not
 * /etc/profile). Written anew at each attach: a new image's files lack it. */
static const char root_script[] =
        "set -f\n"
        "export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH\n"
        "say() { printf 'sf-setup: %s\\n' \"$*\"; }\n"
        "f=" PROFILE "\n"
        "mkdir -p /etc/profile.d 2>/dev/null\n"
        "{ echo '# sockferry attach writes this at each attach: the sockets it carries into this container.'\n"
        "  for e in \"$@\"; do printf 'export %s\\n' \"$e\"; done; } >\"$f.new\" && chmod 0644 \"$f.new\" && "
        "mv -f \"$f.new\" \"$f\" || { say \"failed: cannot write $f\"; exit 1; }\n"
        "for rc in /etc/bash.bashrc /etc/bashrc /etc/zsh/zshenv; do\n"
        "  [ -f \"$rc\" ] || continue\n"
        "  grep -q '# sockferry attach$' \"$rc\" || printf '[ -r %s ] && . %s # sockferry attach\\n' \"$f\" \"$f\" >>\"$rc\"\n"
        "done\n"
        "say \"profile $f\"\n";

/* ---- the host's side ------------------------------------------------------------------------ */

static void trim(char *s) {
        size_t n = strlen(s);
        while (n && isspace((unsigned char)s[n - 1]))
                s[--n] = '\0';
}

/* The first line of what a command printed, escaped, for a message. */
static const char *first_line(const char *out, char *buf, size_t cap) {
        size_t n = strcspn(out, "\n");
        sf_log_escape(out, n, buf, cap);
        return buf[0] ? buf : "no message";
}

/* gpgconf's percent escapes (%3a for ':', %25 for '%'). */
static void unpercent(char *s) {
        char *o = s;
        for (char *p = s; *p; p++) {
                unsigned v;
                if (p[0] == '%' && isxdigit((unsigned char)p[1]) && isxdigit((unsigned char)p[2]) &&
                    sscanf(p + 1, "%2x", &v) == 1 && v) {
                        *o++ = (char)v;
                        p += 2;
                } else {
                        *o++ = *p;
                }
        }
        *o = '\0';
}

/* A host path as a candidate endpoint: double-quoted (paths with spaces, as macOS agents
 * keep them), a named pipe as npipe:. */
static void endpoint_of(const char *path, char *out, size_t cap) {
        if (strncmp(path, "\\\\.\\pipe\\", 9) == 0 || strncmp(path, "//./pipe/", 9) == 0 ||
            strncmp(path, "npipe:", 6) == 0) {
                snprintf(out, cap, "%s%s", strncmp(path, "npipe:", 6) == 0 ? "" : "npipe:", path);
                return;
        }
        size_t o = (size_t)snprintf(out, cap, "\"unix:");
        for (const char *p = path; *p && o + 3 < cap; p++) {
                if (*p == '"' || *p == '\\')
                        out[o++] = '\\';
                out[o++] = *p;
        }
        snprintf(out + o, cap - o, "\"");
}

static int host_ssh(struct sf_attach_preset *p) {
        const char *s = getenv("SSH_AUTH_SOCK");
        if (!s || !*s) {
#ifdef _WIN32
                s = "\\\\.\\pipe\\openssh-ssh-agent"; /* Windows' OpenSSH agent sets no variable */
#else
                sf_log_error("--ssh-agent: SSH_AUTH_SOCK is not set in this shell: start your agent (eval \"$(ssh-agent)\", "
                             "or your agent's own setting: 1Password, Secretive, gpg's enable-ssh-support) and attach "
                             "from that shell");
                return SF_EX_CONFIG;
#endif
        }
#ifndef _WIN32
        struct stat st;
        int err = stat(s, &st) < 0 ? errno : 0;
        if (err || !S_ISSOCK(st.st_mode)) {
                sf_log_error("--ssh-agent: SSH_AUTH_SOCK=%s: %s: is the agent running? (ssh-add -l here says)", s,
                             err ? strerror(err) : "not a socket");
                return SF_EX_CONFIG;
        }
#endif
        endpoint_of(s, p->ssh_src, sizeof p->ssh_src);
        return 0;
}

/* The host's gpg: its extra socket (the one gpg-agent restricts for remote use), and the
 * public keys of its secret keys for the container's gpg. */
static int host_gpg(struct sf_attach_preset *p) {
        char out[SAID_MAX], line[256];
        char *argv[] = { "gpgconf", "--list-dirs", "agent-extra-socket", NULL };
        int r = sf_capture_run(argv, -1, out, sizeof out, SF_CAPTURE_TIMEOUT_MS);
        trim(out);
        if (r != 0 || !out[0] || strchr(out, '\n')) {
                sf_log_error("--gpg-agent: `gpgconf --list-dirs agent-extra-socket` here %s: install GnuPG (gnupg, "
                             "GPG Suite, Homebrew's gnupg)",
                             r == -ENOENT ? "was not found" : first_line(out, line, sizeof line));
                return SF_EX_CONFIG;
        }
        unpercent(out);
#ifdef _WIN32
        /* Gpg4win's agent listens on loopback TCP behind this file, which holds the port and a
         * nonce the client must send first (libassuan's socket emulation): neither a named pipe
         * nor a socket attach can dial. */
        sf_log_error("--gpg-agent: not from a Windows host: %s is Gpg4win's emulated socket (a port and a nonce in "
                     "a file), which attach cannot dial; run attach --gpg-agent from WSL 2 with gpg there, or leave "
                     "--gpg-agent out",
                     out);
        return SF_EX_CONFIG;
#endif
        endpoint_of(out, p->gpg_src, sizeof p->gpg_src);
        /* The agent makes its sockets when it starts; gpgconf starts it if it is not running. */
        char *launch[] = { "gpgconf", "--launch", "gpg-agent", NULL };
        char ignored[256];
        sf_capture_run(launch, -1, ignored, sizeof ignored, SF_CAPTURE_TIMEOUT_MS);
        if (!p->gpg_keys)
                return 0;

        char *list = malloc(KEYS_MAX), *fprs[64 + 6];
        if (!list)
                return 1;
        char *lsk[] = { "gpg", "--batch", "--with-colons", "--list-secret-keys", NULL };
        r = sf_capture_run(lsk, -1, list, KEYS_MAX, SF_CAPTURE_TIMEOUT_MS);
        size_t n = 0;
        fprs[n++] = "gpg";
        fprs[n++] = "--batch";
        fprs[n++] = "--armor";
        fprs[n++] = "--export";
        /* sec: a secret key; the fpr: record after it is its fingerprint. */
        bool want = false;
        for (char *s = list, *next; r == 0 && *s && n < 64 + 4; s = next) {
                next = s + strcspn(s, "\n");
                if (*next)
                        *next++ = '\0';
                if (strncmp(s, "sec:", 4) == 0)
                        want = true;
                else if (want && strncmp(s, "fpr:", 4) == 0) {
                        char *f = s + strlen(s);
                        while (f > s && f[-1] == ':')
                                *--f = '\0';
                        while (f > s && f[-1] != ':')
                                f--;
                        fprs[n++] = f;
                        want = false;
                }
        }
        fprs[n] = NULL;
        p->keys_count = (unsigned)(n - 4);
        if (n == 4) {
                sf_log_warn("--gpg-agent: the host's gpg has no secret keys (gpg --list-secret-keys): nothing to sign with "
                            "in the container");
                free(list);
                return 0;
        }
        if (!(p->keys = malloc(KEYS_MAX))) {
                free(list);
                return 1;
        }
        r = sf_capture_run(fprs, -1, p->keys, KEYS_MAX, SF_CAPTURE_TIMEOUT_MS);
        free(list);
        p->keys_len = strlen(p->keys);
        if (r != 0 || !strstr(p->keys, "-----BEGIN PGP PUBLIC KEY BLOCK-----")) {
                sf_log_warn("--gpg-agent: gpg --export of the host's %u secret keys failed (%s): the container gets no "
                            "public keys (give --no-gpg-keys to not ask)",
                            p->keys_count, first_line(p->keys, line, sizeof line));
                p->keys_len = 0;
        }
        return 0;
}

static int host_docker(struct sf_attach_preset *p, const struct sf_attach_engine *e) {
        char out[SAID_MAX], line[256];
        const char *h = getenv("DOCKER_HOST");
        if ((!h || !*h) && e->kind == SF_ENGINE_DOCKER) {
                char *argv[] = { (char *)e->cli, "context", "inspect", "--format", "{{.Endpoints.docker.Host}}", NULL };
                if (sf_capture_run(argv, -1, out, sizeof out, SF_CAPTURE_TIMEOUT_MS) == 0) {
                        trim(out);
                        h = out;
                }
        } else if ((!h || !*h) && e->kind == SF_ENGINE_PODMAN) {
                char *argv[] = { (char *)e->cli, "info", "--format", "{{.Host.RemoteSocket.Path}}", NULL };
                if (sf_capture_run(argv, -1, out, sizeof out, SF_CAPTURE_TIMEOUT_MS) == 0) {
                        trim(out);
                        h = out;
                }
        }
        if (!h || !*h) {
#ifdef _WIN32
                h = "npipe:////./pipe/docker_engine";
#else
                h = "unix:///var/run/docker.sock";
#endif
        }
        if (strncmp(h, "unix://", 7) == 0)
                endpoint_of(h + 7, p->docker_src, sizeof p->docker_src);
        else if (h[0] == '/')
                endpoint_of(h, p->docker_src, sizeof p->docker_src);
        else if (strncmp(h, "npipe:", 6) == 0)
                snprintf(p->docker_src, sizeof p->docker_src, "%s", h);
        else {
                sf_log_error("--docker: the engine here is %s (%s), not a socket on this machine: attach carries a unix "
                             "socket or a named pipe; point DOCKER_HOST at the engine's socket (unix:///var/run/docker.sock) "
                             "or give the forward with -F docker:unix:" DOCKER_LISTEN "=CONNECT",
                             first_line(h, line, sizeof line), getenv("DOCKER_HOST") ? "DOCKER_HOST" : "its context");
                return SF_EX_CONFIG;
        }
        return 0;
}

/* The container's configured user (docker/podman inspect), "0" when it names none. */
static int container_user(struct sf_attach_preset *p, const struct sf_attach_engine *e) {
        char out[SAID_MAX], line[256];
        if (p->user) {
                snprintf(p->exec_user, sizeof p->exec_user, "%s", p->user);
                return 0;
        }
        if (e->kind == SF_ENGINE_KUBECTL) {
                p->exec_user[0] = '\0'; /* kubectl has no -u: the pod's user */
                return 0;
        }
        char *argv[] = { (char *)e->cli, "inspect", "--format", "{{.Config.User}}", (char *)e->target, NULL };
        int r = sf_capture_run(argv, -1, out, sizeof out, SF_CAPTURE_TIMEOUT_MS);
        if (r != 0) {
                sf_log_error("attach: cannot inspect %s for its user: %s (check the name with %s ps, or give --user USER)",
                             e->target, r == -ENOENT ? "the engine CLI was not found" : first_line(out, line, sizeof line),
                             e->cli);
                return 1;
        }
        trim(out);
        snprintf(p->exec_user, sizeof p->exec_user, "%s", out[0] ? out : "0");
        return 0;
}

/* An exec into the container as the user (NULL: root), then /bin/sh -c script sf-setup. */
static size_t setup_argv(const struct sf_attach_engine *e, const char *user, const char *script, char **argv) {
        size_t n = sf_attach_engine_exec_as(e, user, argv);
        argv[n++] = "/bin/sh";
        argv[n++] = "-c";
        argv[n++] = (char *)script;
        argv[n++] = "sf-setup";
        return n;
}

/* The line after "sf-setup: WORD " in out, or NULL. */
static const char *said(const char *out, const char *word) {
        size_t wl = strlen(word);
        for (const char *s = out; (s = strstr(s, "sf-setup: ")); s++)
                if ((s == out || s[-1] == '\n') && strncmp(s + 10, word, wl) == 0 && s[10 + wl] == ' ')
                        return s + 11 + wl;
        return NULL;
}

/* The user's part; 0 or -1 with why. */
static int user_setup(struct sf_attach_preset *p, const struct sf_attach_engine *e, char *why, size_t cap,
                      char *keys_said, size_t kcap) {
        char out[SAID_MAX], *argv[SF_ATTACH_EXEC_MAX + 8];
        size_t n = setup_argv(e, p->exec_user, user_script, argv);
        bool keys = p->gpg && p->keys_len;
        if (p->gpg)
                argv[n++] = "gpg";
        if (keys)
                argv[n++] = "keys";
        argv[n] = NULL;
        FILE *in = NULL;
        if (keys && (!(in = tmpfile()) || fwrite(p->keys, 1, p->keys_len, in) != p->keys_len || fflush(in) != 0 ||
                     fseek(in, 0, SEEK_SET) != 0)) {
                snprintf(why, cap, "cannot keep the host's public keys in a temporary file: %s", strerror(errno));
                if (in)
                        fclose(in);
                return -1;
        }
        int r = sf_capture_run(argv, in ? fileno(in) : -1, out, sizeof out, SF_CAPTURE_TIMEOUT_MS);
        if (in)
                fclose(in);
        const char *u = said(out, "user"), *g = said(out, "gpg"), *k = said(out, "keys"), *f = said(out, "failed:");
        char line[512];
        if (r != 0 || !u || sscanf(u, "%lu %lu", &p->uid, &p->gid) != 2 || (p->gpg && !g)) {
                if (f)
                        sf_log_escape(f, strcspn(f, "\n"), line, sizeof line);
                snprintf(why, cap, "the set-up as %s in %s failed: %s", p->exec_user[0] ? p->exec_user : "the exec's user",
                         e->target, f ? line : first_line(out, line, sizeof line));
                return -1;
        }
        if (g) {
                size_t gl = strcspn(g, "\n");
                if (gl >= sizeof p->gpg_link)
                        gl = sizeof p->gpg_link - 1;
                memcpy(p->gpg_link, g, gl);
                p->gpg_link[gl] = '\0';
        }
        keys_said[0] = '\0';
        if (k) {
                sf_log_escape(k, strcspn(k, "\n"), keys_said, kcap);
                trim(keys_said);
        }
        return 0;
}

/* Root's part: the profile, when there is something to export. */
static int root_setup(struct sf_attach_preset *p, const struct sf_attach_engine *e, char *why, size_t cap) {
        if (!p->ssh)
                return 0;
        char out[SAID_MAX], line[512], *argv[SF_ATTACH_EXEC_MAX + 8];
        size_t n = setup_argv(e, NULL, root_script, argv);
        argv[n++] = "SSH_AUTH_SOCK=" SSH_LISTEN;
        argv[n] = NULL;
        int r = sf_capture_run(argv, -1, out, sizeof out, SF_CAPTURE_TIMEOUT_MS);
        if (r != 0 || !said(out, "profile")) {
                const char *f = said(out, "failed:");
                if (f)
                        sf_log_escape(f, strcspn(f, "\n"), line, sizeof line);
                snprintf(why, cap, "the shells' profile in %s was not written: %s", e->target,
                         f ? line : first_line(out, line, sizeof line));
                return -1;
        }
        return 0;
}

/* One plain line per socket, and how to reach them from a shell the profile does not set. */
static void print_lines(const struct sf_attach_preset *p, const struct sf_attach_engine *e, const char *keys_said) {
        const char *t = e->target;
        if (p->ssh)
                printf("ssh-agent: %s in %s for uid %lu <- %s\n", SSH_LISTEN, t, p->uid, p->ssh_src);
        if (p->gpg)
                printf("gpg-agent: %s -> %s in %s for uid %lu <- %s%s%s\n", p->gpg_link, GPG_LISTEN, t, p->uid, p->gpg_src,
                       keys_said[0] ? "; public keys: " : "", keys_said);
        if (p->docker)
                printf("docker: %s in %s for uid %lu gid %lu <- %s\n", DOCKER_LISTEN, t, p->uid, p->gid, p->docker_src);
        if (p->ssh)
                printf("shells: bash and login shells get SSH_AUTH_SOCK from %s; any other: %s exec -e SSH_AUTH_SOCK=%s%s%s "
                       "%s CMD\n",
                       PROFILE, e->kind == SF_ENGINE_KUBECTL ? "kubectl" : e->cli, SSH_LISTEN,
                       p->exec_user[0] ? " -u " : "", p->exec_user, t);
        fflush(stdout);
}

int sf_attach_preset_prepare(struct sf_attach_preset *p, struct sf_attach_engine *e, struct sf_cli_opts *o) {
        if (e->kind == SF_ENGINE_COMMAND) {
                return sf_cli_usage_error("attach", "--ssh-agent, --gpg-agent and --docker go with TARGET (an engine's "
                                          "container), not with -- CMD: give -F forwards there");
        }
        if (p->user && (!p->user[0] || strspn(p->user, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") !=
                                               strlen(p->user)))
                return sf_cli_usage_error("attach", "--user %s: expected a user name or UID[:GID] of the container", p->user);
        if (p->user && e->kind == SF_ENGINE_KUBECTL)
                return sf_cli_usage_error("attach", "--user: kubectl exec runs the pod's user (securityContext.runAsUser)");
        int r = 0;
        if ((p->ssh && (r = host_ssh(p))) || (p->gpg && (r = host_gpg(p))) || (p->docker && (r = host_docker(p, e))) ||
            (r = container_user(p, e)))
                return r;
        char why[1024], keys_said[256];
        if (user_setup(p, e, why, sizeof why, keys_said, sizeof keys_said) < 0 || root_setup(p, e, why, sizeof why) < 0) {
                sf_log_error("attach: %s", why);
                return 1;
        }
        p->set_up = true;
        /* The owner by number: the container's accounts are not this host's. */
        size_t k = 0;
        if (p->ssh)
                snprintf(p->specs[k++], sizeof p->specs[0], "ssh-agent:unix:" SSH_LISTEN "=%s,owner=%lu,group=%lu,mode=0600",
                         p->ssh_src, p->uid, p->gid);
        if (p->gpg)
                snprintf(p->specs[k++], sizeof p->specs[0], "gpg-agent:unix:" GPG_LISTEN "=%s,owner=%lu,group=%lu,mode=0600",
                         p->gpg_src, p->uid, p->gid);
        if (p->docker)
                snprintf(p->specs[k++], sizeof p->specs[0], "docker:unix:" DOCKER_LISTEN "=%s,owner=%lu,group=%lu,mode=0660",
                         p->docker_src, p->uid, p->gid);
        char **specs = realloc(o->specs, (o->n_specs + k + 1) * sizeof *specs);
        if (!specs)
                return 1;
        o->specs = specs;
        for (size_t i = 0; i < k; i++)
                o->specs[o->n_specs++] = p->specs[i];
        o->specs[o->n_specs] = NULL;
        print_lines(p, e, keys_said);
        return 0;
}

void sf_attach_preset_setup(struct sf_attach_preset *p, struct sf_attach_engine *e) {
        if (!sf_attach_preset_any(p))
                return;
        if (p->set_up) {
                p->set_up = false; /* prepare did the first */
                return;
        }
        unsigned long uid = p->uid;
        char why[1024], keys_said[256];
        if (user_setup(p, e, why, sizeof why, keys_said, sizeof keys_said) < 0 || root_setup(p, e, why, sizeof why) < 0) {
                /* The container may be starting again: the run that follows says why it is not there. */
                sf_log_debug("%s", why);
                return;
        }
        if (p->uid != uid)
                sf_log_warn("attach: %s's user is now uid %lu, not %lu: the sockets stay uid %lu's until attach starts "
                            "again",
                            e->target, p->uid, uid, uid);
        sf_log_info("attach: set up %s again for uid %lu%s%s", e->target, uid, keys_said[0] ? "; public keys: " : "",
                    keys_said);
}

void sf_attach_preset_free(struct sf_attach_preset *p) {
        free(p->keys);
        p->keys = NULL;
        p->keys_len = 0;
}
