/* preset = ssh-agent | gpg-agent | docker: each preset's defaults from the environment, keys
 * written in the section winning over them wherever they stand, and the errors that name what
 * is missing. Criterion runs each test in its own process, so setenv stays in its test. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

TestSuite(preset, .init = scratch_setup, .fini = scratch_teardown);

static struct sf_conf conf;
static char *log_text;

/* Loads text and validates it, both without a word in the log; returns the first forward. */
static const struct sf_forward *valid(const char *text) {
        sf_conf_init(&conf);
        cr_assert_eq(load_text(&conf, text, &log_text), 0, "load failed:\n%s", log_text);
        free(log_text);
        cr_assert_eq(validate(&conf, &log_text), 0, "rejected:\n%s\nlog:\n%s", text, log_text);
        cr_assert_str_eq(log_text, "");
        free(log_text);
        return &conf.forwards[0];
}

/* Loads text, which validation refuses with exactly one error: "FILE:" want. */
static void invalid(const char *text, const char *want) {
        sf_conf_init(&conf);
        cr_assert_eq(load_text(&conf, text, &log_text), 0, "load failed:\n%s", log_text);
        free(log_text);
        cr_assert_eq(validate(&conf, &log_text), -EINVAL, "accepted:\n%s", text);
        assert_error(log_text, "%s/sf.conf:%s", scratch_dir(), want);
        cr_assert_eq(count_errors(log_text), 1, "expected one error:\n%s", log_text);
        free(log_text);
        sf_conf_free(&conf);
}

static void assert_unix(const struct sf_endpoint *ep, const char *path) {
        cr_assert_eq(ep->kind, SF_EP_UNIX, "%s is not a unix endpoint", ep->text);
        cr_assert_str_eq(ep->path, path);
}

/* f's connect candidates are unix:PATH of each of paths (NULL-terminated), in order. */
static void assert_connect(const struct sf_forward *f, const char *const *paths) {
        size_t n = 0;
        for (; paths[n]; n++)
                if (n < f->n_connect)
                        assert_unix(&f->connect[n], paths[n]);
        cr_assert_eq(f->n_connect, n, "%zu candidates, expected %zu", f->n_connect, n);
}

/* The container side's defaults: what the preset gives besides connect. */
static void assert_listen_side(const struct sf_forward *f, enum sf_preset preset, const char *listen, mode_t mode,
                               const char *env) {
        cr_assert_eq(f->preset, preset);
        cr_assert(f->listen_set);
        assert_unix(&f->listen, listen);
        cr_assert_eq(f->mode, mode, "mode %o, expected %o", (unsigned)f->mode, (unsigned)mode);
        cr_assert_str_eq(f->env, env);
}

Test(preset, ssh_agent_defaults) {
        setenv("SSH_AUTH_SOCK", "/tmp/ssh-XXXX/agent.123", 1);
        const struct sf_forward *f = valid("[agent]\npreset = ssh-agent\n");
        assert_listen_side(f, SF_PRESET_SSH_AGENT, "/run/sockferry/ssh-agent.sock", 0600, "SSH_AUTH_SOCK");
        cr_assert_eq(f->env_format, SF_ENV_PATH);
        assert_connect(f, (const char *[]){ "/tmp/ssh-XXXX/agent.123", NULL });
        sf_conf_free(&conf);
}

/* macOS's launchd agent lives under paths with spaces; quotes, backslashes and '|' (the -F
 * candidate separator) in the path are the path's too. */
Test(preset, ssh_agent_path_with_spaces) {
        const char *path = "/Users/me/Library/Group Containers/a \"b\" c\\d|e/agent.sock";
        setenv("SSH_AUTH_SOCK", path, 1);
        assert_connect(valid("[agent]\npreset = ssh-agent\n"), (const char *[]){ path, NULL });
        sf_conf_free(&conf);
}

Test(preset, ssh_agent_unset_or_relative) {
        unsetenv("SSH_AUTH_SOCK");
        invalid("[agent]\npreset = ssh-agent\n",
                "1: [agent] preset: SSH_AUTH_SOCK is unset, so there is no ssh-agent to connect to; start an agent "
                "(eval \"$(ssh-agent)\") or give connect = unix:PATH");
        /* An empty variable is no agent either. */
        setenv("SSH_AUTH_SOCK", "", 1);
        invalid("[agent]\nlisten = unix:/run/a.sock\npreset = ssh-agent\n",
                "1: [agent] preset: SSH_AUTH_SOCK is unset, so there is no ssh-agent to connect to; start an agent "
                "(eval \"$(ssh-agent)\") or give connect = unix:PATH");
        /* A relative path is not one a relay could connect to from any directory. */
        setenv("SSH_AUTH_SOCK", "agent.sock", 1);
        invalid("[agent]\npreset = ssh-agent\n",
                "1: [agent] preset: the default from SSH_AUTH_SOCK: unix:agent.sock: unix socket path must be absolute, "
                "expected unix:/abs/path; give connect = unix:PATH");
}

Test(preset, ssh_agent_unset_with_connect_given) {
        unsetenv("SSH_AUTH_SOCK");
        const struct sf_forward *f = valid("[agent]\npreset = ssh-agent\nconnect = tcp:host.docker.internal:7000\n");
        cr_assert_eq(f->n_connect, 1);
        cr_assert_eq(f->connect[0].kind, SF_EP_TCP);
        assert_unix(&f->listen, "/run/sockferry/ssh-agent.sock");
        sf_conf_free(&conf);
}

/* Every key the preset has a default for, written before the preset and after it. */
Test(preset, explicit_keys_win_in_any_order) {
        setenv("SSH_AUTH_SOCK", "/tmp/agent.sock", 1);
        static const char *const texts[] = {
                "[agent]\nlisten = unix:/run/x/agent.sock\nmode = 0660\nenv = MY_AGENT\nconnect = unix:/host/agent.sock\n"
                "preset = ssh-agent\n",
                "[agent]\npreset = ssh-agent\nlisten = unix:/run/x/agent.sock\nmode = 0660\nenv = MY_AGENT\n"
                "connect = unix:/host/agent.sock\n",
                "[agent]\nmode = 0660\nconnect = unix:/host/agent.sock\npreset = ssh-agent\nlisten = unix:/run/x/agent.sock\n"
                "env = MY_AGENT\n",
        };
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
                const struct sf_forward *f = valid(texts[i]);
                assert_listen_side(f, SF_PRESET_SSH_AGENT, "/run/x/agent.sock", 0660, "MY_AGENT");
                assert_connect(f, (const char *[]){ "/host/agent.sock", NULL });
                sf_conf_free(&conf);
        }
}

/* A mode written as the forward default (0660) is still written: the preset's 0600 does not
 * replace it. */
Test(preset, explicit_default_mode_wins) {
        setenv("SSH_AUTH_SOCK", "/tmp/agent.sock", 1);
        cr_assert_eq(valid("[agent]\nmode = 660\npreset = ssh-agent\n")->mode, 0660);
        sf_conf_free(&conf);
}

/* A host relay's forward listens on TCP: no variable to export there. */
Test(preset, ssh_agent_host_side_has_no_env) {
        setenv("SSH_AUTH_SOCK", "/tmp/agent.sock", 1);
        const struct sf_forward *f = valid("[agent]\npreset = ssh-agent\nlisten = tcp:127.0.0.1:7000\n");
        cr_assert_str_eq(f->env, "");
        cr_assert_eq(f->listen.kind, SF_EP_TCP);
        assert_connect(f, (const char *[]){ "/tmp/agent.sock", NULL });
        sf_conf_free(&conf);
}

Test(preset, gpg_agent_defaults) {
        setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
        setenv("HOME", "/home/me", 1);
        const struct sf_forward *f = valid("[gpg]\npreset = GPG-Agent\n");
        assert_listen_side(f, SF_PRESET_GPG_AGENT, "/run/sockferry/gpg-agent.sock", 0600, "");
        assert_connect(f, (const char *[]){ "/run/user/1000/gnupg/S.gpg-agent.extra", "/home/me/.gnupg/S.gpg-agent.extra", NULL });
        sf_conf_free(&conf);
}

Test(preset, gpg_agent_without_xdg_runtime_dir) {
        unsetenv("XDG_RUNTIME_DIR");
        setenv("HOME", "/Users/me", 1);
        assert_connect(valid("[gpg]\npreset = gpg-agent\n"), (const char *[]){ "/Users/me/.gnupg/S.gpg-agent.extra", NULL });
        sf_conf_free(&conf);
}

Test(preset, gpg_agent_nowhere_to_look) {
        unsetenv("XDG_RUNTIME_DIR");
        unsetenv("HOME");
        invalid("[gpg]\npreset = gpg-agent\n",
                "1: [gpg] preset: neither XDG_RUNTIME_DIR nor HOME is set, so gpg-agent's extra socket cannot be found; "
                "give connect = unix:PATH (gpgconf --list-dirs agent-extra-socket prints it)");
}

/* The listen side in a container (connect given: the host relay), the connect side on the host
 * (listen given: the port the container's relay reaches). */
Test(preset, docker_defaults) {
        unsetenv("DOCKER_HOST");
        setenv("HOME", "/Users/me", 1);
        assert_listen_side(valid("[docker]\npreset = docker\nconnect = tcp:host.docker.internal:7000\n"), SF_PRESET_DOCKER,
                           "/var/run/docker.sock", 0660, "");
        sf_conf_free(&conf);
        assert_connect(valid("[docker]\npreset = docker\nlisten = tcp:127.0.0.1:7000\n"),
                       (const char *[]){ "/var/run/docker.sock", "/Users/me/.docker/run/docker.sock", NULL });
        sf_conf_free(&conf);
}

/* Without HOME the daemon's usual socket alone. It is also the default listen path: on one
 * machine that is a forward to itself, which validation refuses. */
Test(preset, docker_without_home) {
        unsetenv("DOCKER_HOST");
        unsetenv("HOME");
        assert_connect(valid("[docker]\nlisten = tcp:127.0.0.1:2375\npreset = docker\n"),
                       (const char *[]){ "/var/run/docker.sock", NULL });
        sf_conf_free(&conf);
        invalid("[docker]\npreset = docker\n",
                "1: [docker] connect: unix:/var/run/docker.sock is the listen endpoint of this forward, expected another "
                "endpoint (it would connect to itself)");
}

Test(preset, docker_host_unix) {
        setenv("DOCKER_HOST", "unix:///Users/me/.colima/default/docker.sock", 1);
        setenv("HOME", "/Users/me", 1);
        assert_connect(valid("[docker]\nlisten = unix:/run/sockferry/docker.sock\npreset = docker\n"),
                       (const char *[]){ "/Users/me/.colima/default/docker.sock", NULL });
        sf_conf_free(&conf);
}

Test(preset, docker_host_not_a_unix_path) {
        setenv("DOCKER_HOST", "tcp://192.0.2.1:2376", 1);
        invalid("[docker]\nlisten = unix:/run/sockferry/docker.sock\npreset = docker\n",
                "1: [docker] preset: DOCKER_HOST is tcp://192.0.2.1:2376, not a unix socket; give connect = ENDPOINT");
        setenv("DOCKER_HOST", "ssh://me@build-box", 1);
        invalid("[docker]\nlisten = unix:/run/sockferry/docker.sock\npreset = docker\n",
                "1: [docker] preset: DOCKER_HOST is ssh://me@build-box, not a unix socket; give connect = ENDPOINT");
        setenv("DOCKER_HOST", "unix://docker.sock", 1);
        invalid("[docker]\nlisten = unix:/run/sockferry/docker.sock\npreset = docker\n",
                "1: [docker] preset: the default from DOCKER_HOST: unix:docker.sock: unix socket path must be absolute, "
                "expected unix:/abs/path; give connect = unix:PATH");
        /* Given connect, DOCKER_HOST is not asked. */
        const struct sf_forward *f = valid("[docker]\nconnect = unix:/host/docker.sock\npreset = docker\n");
        assert_unix(&f->connect[0], "/host/docker.sock");
        assert_unix(&f->listen, "/var/run/docker.sock");
        sf_conf_free(&conf);
}

Test(preset, unknown_name) {
        sf_conf_init(&conf);
        cr_assert_eq(load_text(&conf, "[a]\nlisten = unix:/run/a.sock\npreset = ssh\n", &log_text), -EINVAL);
        assert_error(log_text, "%s/sf.conf:3: [a] preset: \"ssh\" is not a preset, expected ssh-agent, gpg-agent or docker",
                     scratch_dir());
        cr_assert_eq(count_errors(log_text), 1, "%s", log_text);
        free(log_text);
        sf_conf_free(&conf);

        sf_conf_init(&conf);
        cr_assert_eq(add_spec(&conf, "a:unix:/run/a.sock=unix:/b.sock,preset=docker.sock", &log_text), -EINVAL);
        assert_error(log_text,
                     "-F 'a:unix:/run/a.sock=unix:/b.sock,preset=docker.sock': preset: \"docker.sock\" is not a preset, "
                     "expected ssh-agent, gpg-agent or docker");
        cr_assert_eq(count_errors(log_text), 1, "%s", log_text);
        free(log_text);
        sf_conf_free(&conf);
}

/* -F gives listen and connect itself: the preset adds the rest, its keys win in any order. */
Test(preset, spec) {
        unsetenv("SSH_AUTH_SOCK");
        static const struct {
                const char *spec;
                mode_t mode;
                const char *env;
        } cases[] = {
                { "agent:unix:/run/a.sock=tcp:host.docker.internal:7000,preset=ssh-agent", 0600, "SSH_AUTH_SOCK" },
                { "agent:unix:/run/a.sock=tcp:host.docker.internal:7000,mode=0640,preset=ssh-agent,env=AGENT", 0640, "AGENT" },
                { "agent:unix:/run/a.sock=tcp:host.docker.internal:7000,preset=ssh-agent,mode=0640", 0640, "SSH_AUTH_SOCK" },
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                sf_conf_init(&conf);
                cr_assert_eq(add_spec(&conf, cases[i].spec, &log_text), 0, "%s", log_text);
                free(log_text);
                cr_assert_eq(validate(&conf, &log_text), 0, "%s", log_text);
                free(log_text);
                const struct sf_forward *f = &conf.forwards[0];
                assert_unix(&f->listen, "/run/a.sock");
                cr_assert_eq(f->mode, cases[i].mode, "%s: mode %o", cases[i].spec, (unsigned)f->mode);
                cr_assert_str_eq(f->env, cases[i].env);
                cr_assert_eq(f->connect[0].kind, SF_EP_TCP);
                sf_conf_free(&conf);
        }
}

/* Validating again changes nothing: the defaults are keys that are set by then. */
Test(preset, applied_once) {
        setenv("SSH_AUTH_SOCK", "/tmp/agent.sock", 1);
        valid("[agent]\npreset = ssh-agent\n");
        setenv("SSH_AUTH_SOCK", "/tmp/other.sock", 1);
        cr_assert_eq(validate(&conf, &log_text), 0, "%s", log_text);
        free(log_text);
        assert_unix(&conf.forwards[0].connect[0], "/tmp/agent.sock");
        sf_conf_free(&conf);
}
