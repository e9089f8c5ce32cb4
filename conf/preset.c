/* The presets' table: for each socket users forward most, the defaults of listen, mode, env
 * and connect. The connect side is the host's own socket, found where its software puts it
 * (the environment first); the listen side is where clients in a container look. */
#include "conf/preset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf_int.h"

/* The connect value a preset builds: its candidates, each quoted (a path may have spaces). */
struct candidates {
        char text[SF_MAX_CANDIDATES * (2 * SF_UNIX_PATH_MAX + 8)];
};

struct preset {
        const char *name;
        const char *listen;
        mode_t mode;
        /* The variable `run` exports the listen path in (a unix listener only), or NULL. */
        const char *env;
        /* The candidates, or -EINVAL with why there are none in err. */
        int (*connect)(struct candidates *c, char *err, size_t errlen);
};

/* An environment variable, NULL when it is not set or empty. */
static const char *env_get(const char *name) {
        const char *v = getenv(name);
        return v && *v ? v : NULL;
}

/* Appends unix:DIR TAIL as a candidate; var names where DIR came from, for the message when
 * it does not make an endpoint (a relative path, one too long for a unix socket). */
static int add_unix(struct candidates *c, const char *var, const char *dir, const char *tail, char *err, size_t errlen) {
        char text[SF_ENDPOINT_TEXT_MAX], why[MSG_MAX];
        struct sf_endpoint ep;

        if ((size_t)snprintf(text, sizeof text, "unix:%s%s", dir, tail) >= sizeof text)
                return sf_conf_fail(err, errlen, "%s is %.200s..., too long for a unix socket path; give connect = unix:PATH",
                                    var, dir);
        if (sf_endpoint_parse(text, &ep, why, sizeof why) < 0)
                return sf_conf_fail(err, errlen, "the default from %s: %s; give connect = unix:PATH", var, why);
        sf_conf_append(c->text, sizeof c->text, "%s\"", c->text[0] ? " " : "");
        for (const char *p = text; *p; p++)
                sf_conf_append(c->text, sizeof c->text, "%s%c", *p == '"' || *p == '\\' ? "\\" : "", *p);
        sf_conf_append(c->text, sizeof c->text, "\"");
        return 0;
}

static int ssh_agent_connect(struct candidates *c, char *err, size_t errlen) {
        const char *sock = env_get("SSH_AUTH_SOCK");
        if (!sock)
                return sf_conf_fail(err, errlen,
                                    "SSH_AUTH_SOCK is unset, so there is no ssh-agent to connect to; start an agent "
                                    "(eval \"$(ssh-agent)\") or give connect = unix:PATH");
        return add_unix(c, "SSH_AUTH_SOCK", sock, "", err, errlen);
}

/* gpg's agent-extra-socket: the restricted socket gpg-agent offers for forwarding (no key
 * import or export, no passphrase changes). Its place: under XDG_RUNTIME_DIR where gpg uses
 * that (Linux with systemd), else in ~/.gnupg. */
static int gpg_agent_connect(struct candidates *c, char *err, size_t errlen) {
        const char *run = env_get("XDG_RUNTIME_DIR"), *home = env_get("HOME");
        if (!run && !home)
                return sf_conf_fail(err, errlen,
                                    "neither XDG_RUNTIME_DIR nor HOME is set, so gpg-agent's extra socket cannot be found; "
                                    "give connect = unix:PATH (gpgconf --list-dirs agent-extra-socket prints it)");
        if (run && add_unix(c, "XDG_RUNTIME_DIR", run, "/gnupg/S.gpg-agent.extra", err, errlen) < 0)
                return -EINVAL;
        if (home && add_unix(c, "HOME", home, "/.gnupg/S.gpg-agent.extra", err, errlen) < 0)
                return -EINVAL;
        return 0;
}

/* DOCKER_HOST names the daemon the docker CLI talks to; only a unix:// one is a socket a
 * forward can connect to. Without it: the daemon's usual socket, then Docker Desktop's on
 * macOS. */
static int docker_connect(struct candidates *c, char *err, size_t errlen) {
        const char *host = env_get("DOCKER_HOST"), *home = env_get("HOME");
        if (host) {
                if (strncmp(host, "unix://", 7) != 0)
                        return sf_conf_fail(err, errlen, "DOCKER_HOST is %.200s, not a unix socket; give connect = ENDPOINT",
                                            host);
                return add_unix(c, "DOCKER_HOST", host + 7, "", err, errlen);
        }
        if (add_unix(c, "the default", "/var/run/docker.sock", "", err, errlen) < 0)
                return -EINVAL;
        return home ? add_unix(c, "HOME", home, "/.docker/run/docker.sock", err, errlen) : 0;
}

static const struct preset presets[] = {
        [SF_PRESET_SSH_AGENT] = { "ssh-agent", "unix:/run/sockferry/ssh-agent.sock", 0600, "SSH_AUTH_SOCK", ssh_agent_connect },
        [SF_PRESET_GPG_AGENT] = { "gpg-agent", "unix:/run/sockferry/gpg-agent.sock", 0600, NULL, gpg_agent_connect },
        [SF_PRESET_DOCKER] = { "docker", "unix:/var/run/docker.sock", 0660, NULL, docker_connect },
};

#define N_PRESETS (sizeof presets / sizeof presets[0])

int sf_conf_preset_parse(const char *name, enum sf_preset *out, char *err, size_t errlen) {
        char names[128] = "";
        for (size_t i = SF_PRESET_NONE + 1; i < N_PRESETS; i++) {
                if (strcasecmp(name, presets[i].name) == 0) {
                        *out = (enum sf_preset)i;
                        return 0;
                }
                sf_conf_append(names, sizeof names, "%s%s", i == SF_PRESET_NONE + 1 ? "" : i + 1 == N_PRESETS ? " or " : ", ",
                               presets[i].name);
        }
        return sf_conf_fail(err, errlen, "\"%.200s\" is not a preset, expected %s", name, names);
}

int sf_conf_preset_apply(struct sf_forward *f, char *err, size_t errlen) {
        if (f->preset == SF_PRESET_NONE)
                return 0;
        const struct preset *p = &presets[f->preset];
        if (!f->listen_set && sf_conf_parse_listen(f, p->listen, err, errlen) < 0)
                return -EINVAL;
        if (!f->mode_set)
                f->mode = p->mode;
        if (p->env && !f->env[0] && f->listen.kind == SF_EP_UNIX)
                snprintf(f->env, sizeof f->env, "%s", p->env);
        if (f->n_connect)
                return 0;
        struct candidates c = { "" };
        if (p->connect(&c, err, errlen) < 0)
                return -EINVAL;
        return sf_conf_parse_connect(f, c.text, err, errlen);
}
