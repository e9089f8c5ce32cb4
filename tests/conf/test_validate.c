/* sf_conf_validate(): what only shows once every forward is known. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

TestSuite(validate, .init = scratch_setup, .fini = scratch_teardown);

static struct sf_conf conf;
static char *log_text;

/* Loads text (which must load) and the specs, then validates. */
static int check(const char *text, const char *const *specs) {
        char *l;
        sf_conf_init(&conf);
        if (text) {
                cr_assert_eq(load_text(&conf, text, &l), 0, "load failed:\n%s", l);
                free(l);
        }
        for (; specs && *specs; specs++) {
                cr_assert_eq(add_spec(&conf, *specs, &l), 0, "-F '%s' failed:\n%s", *specs, l);
                free(l);
        }
        return validate(&conf, &log_text);
}

static void assert_valid(const char *text, const char *const *specs) {
        cr_assert_eq(check(text, specs), 0, "rejected:\n%s", log_text);
        cr_assert_str_eq(log_text, "");
        free(log_text);
        sf_conf_free(&conf);
}

/* want with each "SCRATCH" replaced by the scratch directory. */
static const char *expand(const char *want) {
        static char buf[4096];
        buf[0] = '\0';
        for (const char *p = want, *s; *p; p = s + 7) {
                s = strstr(p, "SCRATCH");
                if (!s) {
                        strncat(buf, p, sizeof buf - strlen(buf) - 1);
                        break;
                }
                strncat(buf, p, (size_t)(s - p));
                strncat(buf, scratch_dir(), sizeof buf - strlen(buf) - 1);
        }
        return buf;
}

/* Validation fails with exactly one error; want follows "FILE:" for a file forward. */
static void assert_invalid_file(const char *text, const char *want) {
        cr_assert_eq(check(text, NULL), -EINVAL, "accepted:\n%s", text);
        assert_error(log_text, "%s/sf.conf:%s", scratch_dir(), expand(want));
        cr_assert_eq(count_errors(log_text), 1, "%s", log_text);
        free(log_text);
        sf_conf_free(&conf);
}

static void assert_invalid_spec(const char *spec, const char *want) {
        const char *specs[] = { spec, NULL };
        cr_assert_eq(check(NULL, specs), -EINVAL, "accepted: %s", spec);
        assert_error(log_text, "-F '%s': %s", spec, want);
        cr_assert_eq(count_errors(log_text), 1, "%s", log_text);
        free(log_text);
        sf_conf_free(&conf);
}

Test(validate, nothing_is_fine) {
        assert_valid(NULL, NULL);
        assert_valid("[sockferry]\nlog-level = debug\n", NULL);
}

Test(validate, missing_listen_and_connect) {
        assert_invalid_file("[a]\nconnect = unix:/b\n", "1: [a]: missing listen, expected listen = ENDPOINT");
        assert_invalid_file("\n[a]\nlisten = unix:/a\n", "2: [a]: missing connect, expected connect = ENDPOINT [ENDPOINT...]");

        cr_assert_eq(check("[empty]\n", NULL), -EINVAL);
        assert_error(log_text, "%s/sf.conf:1: [empty]: missing listen, expected listen = ENDPOINT", scratch_dir());
        assert_error(log_text, "%s/sf.conf:1: [empty]: missing connect, expected connect = ENDPOINT [ENDPOINT...]", scratch_dir());
        cr_assert_eq(count_errors(log_text), 2);
}

Test(validate, one_listen_endpoint_per_forward) {
        assert_invalid_file("[a]\nlisten = unix:/a\nconnect = unix:/x\n"
                            "[b]\nlisten = unix:/a\nconnect = unix:/y\n",
                            "4: [b] listen: unix:/a is also the listen endpoint of [a] (SCRATCH/sf.conf:1), expected one forward per listen endpoint");
}

Test(validate, one_listen_endpoint_file_and_spec) {
        const char *specs[] = { "b:tcp:LOCALHOST:7000=unix:/y", NULL };
        cr_assert_eq(check("[a]\nlisten = tcp:localhost:7000\nconnect = unix:/x\n", specs), -EINVAL);
        assert_error(log_text,
                     "-F 'b:tcp:LOCALHOST:7000=unix:/y': listen: tcp:LOCALHOST:7000 is also the listen endpoint of [a] (%s/sf.conf:1), expected one forward per listen endpoint",
                     scratch_dir());
        cr_assert_eq(count_errors(log_text), 1);
}

/* A clash is reported once per forward and key, against the first forward that has it: three
 * forwards on one endpoint make two errors, not three. */
Test(validate, a_clash_names_the_first_forward) {
        const char *specs[] = { "a:unix:@x=unix:/y,env=V,alias=/run/al", "b:unix:@x=unix:/z,env=V,alias=/run/al",
                                "c:unix:@x=unix:/z,env=V,alias=/run/al", NULL };
        cr_assert_eq(check(NULL, specs), -EINVAL);
        cr_assert_eq(count_errors(log_text), 6, "%s", log_text);
        for (size_t i = 0; i < 2; i++) {
                const char *spec = specs[i + 1];
                assert_error(log_text, "-F '%s': listen: unix:@x is also the listen endpoint of [a] (-F '%s'), expected one forward per listen endpoint", spec, specs[0]);
                assert_error(log_text, "-F '%s': env: V is also set by [a] (-F '%s'), expected one forward per variable", spec, specs[0]);
                assert_error(log_text, "-F '%s': alias: /run/al is also the alias of [a] (-F '%s'), expected one forward per alias", spec, specs[0]);
        }
        free(log_text);
        sf_conf_free(&conf);
}

Test(validate, one_listen_endpoint_two_specs) {
        const char *specs[] = { "a:unix:@x=unix:/y", "b:unix:@x=unix:/z", "c:unix:/x=unix:/z", NULL };
        cr_assert_eq(check(NULL, specs), -EINVAL);
        assert_error(log_text,
                     "-F 'b:unix:@x=unix:/z': listen: unix:@x is also the listen endpoint of [a] (-F 'a:unix:@x=unix:/y'), expected one forward per listen endpoint");
        cr_assert_eq(count_errors(log_text), 1, "an abstract name is not a path");
}

Test(validate, network_listener_needs_auth) {
        assert_invalid_spec("x:tcp:0.0.0.0:7000=unix:/a",
                            "listen: tcp:0.0.0.0:7000 accepts connections from the network without authentication; set auth = token (see sockferry keygen) or allow-insecure = yes");
        assert_invalid_spec("x:tcp:[::]:7000=unix:/a",
                            "listen: tcp:[::]:7000 accepts connections from the network without authentication; set auth = token (see sockferry keygen) or allow-insecure = yes");
        assert_invalid_file("[x]\nlisten = tcp:myhost:7000\nconnect = unix:/a\n",
                            "1: [x] listen: tcp:myhost:7000 accepts connections from the network without authentication; set auth = token (see sockferry keygen) or allow-insecure = yes");

        const char *insecure[] = { "x:tcp:0.0.0.0:7000=unix:/a,allow-insecure=yes", NULL };
        assert_valid(NULL, insecure);
        const char *token[] = { "x:tcp:0.0.0.0:7000=unix:/a,auth=token,token-file=/t", NULL };
        assert_valid(NULL, token);
        const char *loopback[] = { "x:tcp:127.0.0.1:7000=unix:/a", "y:tcp:[::1]:7000=unix:/a", "z:tcp:localhost:7001=unix:/a", NULL };
        assert_valid(NULL, loopback);
        const char *other[] = { "s:systemd:x=unix:/a", "f:fd:3=unix:/a", NULL };
        assert_valid(NULL, other);
}

/* Issue 15: vsock:any without auth started silently though doc/SECURITY.md says vsock
 * listeners need auth = token. */
Test(validate, vsock_listen_needs_auth) {
        assert_invalid_spec("v:vsock:any:7000=unix:/a",
                            "listen: vsock:any:7000 accepts connections from other machines (VMs or the host) without authentication; set auth = token (see sockferry keygen) or allow-insecure = yes");
        assert_invalid_spec("v:vsock:3:7000=unix:/a",
                            "listen: vsock:3:7000 accepts connections from other machines (VMs or the host) without authentication; set auth = token (see sockferry keygen) or allow-insecure = yes");
        const char *ok[] = { "v:vsock:any:7000=unix:/a,allow-insecure=yes",
                             "w:vsock:any:7001=unix:/a,auth=token,token-file=/t", NULL };
        assert_valid(NULL, ok);
}

Test(validate, token_needs_a_file) {
        assert_invalid_spec("x:unix:/x=tcp:host.docker.internal:7000,auth=token",
                            "auth: auth = token needs a token file, expected token-file = PATH in [x] or in [sockferry] (sockferry keygen -o PATH writes one)");
        assert_invalid_file("[x]\nlisten = unix:/x\nconnect = tcp:h:1\nauth = token\n",
                            "1: [x] auth: auth = token needs a token file, expected token-file = PATH in [x] or in [sockferry] (sockferry keygen -o PATH writes one)");

        const char *specs[] = { "x:unix:/x=tcp:h:1,auth=token", NULL };
        assert_valid("[sockferry]\ntoken-file = /run/secrets/t\n", specs);
}

Test(validate, network_listener_and_no_token_file) {
        const char *spec = "x:tcp:0.0.0.0:7000=unix:/a,auth=token";
        const char *specs[] = { spec, NULL };
        cr_assert_eq(check(NULL, specs), -EINVAL);
        assert_contains(log_text, "auth = token needs a token file");
        cr_assert_eq(count_errors(log_text), 1, "auth = token is enough for the network check:\n%s", log_text);
}

Test(validate, no_loop_to_itself) {
        assert_invalid_spec("x:unix:/x=tcp:h:1|unix:/x",
                            "connect: unix:/x is the listen endpoint of this forward, expected another endpoint (it would connect to itself)");
}

Test(validate, aliases) {
        assert_invalid_spec("x:unix:/x=tcp:h:1,alias=/x", "alias: /x is the listen path itself, expected the other path clients connect to");
        assert_invalid_file("[a]\nlisten = unix:/a\nconnect = tcp:h:1\nalias = /run/x.sock\n"
                            "[b]\nlisten = unix:/b\nconnect = tcp:h:1\nalias = /run/x.sock\n",
                            "5: [b] alias: /run/x.sock is also the alias of [a] (SCRATCH/sf.conf:1), expected one forward per alias");
        assert_invalid_file("[a]\nlisten = unix:/a\nconnect = tcp:h:1\n"
                            "[b]\nlisten = unix:/b\nconnect = tcp:h:1\nalias = /a\n",
                            "4: [b] alias: /a is the listen path of [a] (SCRATCH/sf.conf:1), expected a path no forward listens on");
        assert_invalid_file("[a]\nlisten = unix:/a\nconnect = tcp:h:1\nalias = /b\n"
                            "[b]\nlisten = unix:/b\nconnect = tcp:h:1\n",
                            "5: [b] listen: /b is the alias of [a] (SCRATCH/sf.conf:1), expected a path of its own");
        assert_valid("[a]\nlisten = unix:@a\nconnect = tcp:h:1\nalias = /a\n"
                     "[b]\nlisten = unix:/b\nconnect = tcp:h:1\nalias = /run/b.sock\n", NULL);
}

Test(validate, env_names) {
        assert_invalid_file("[a]\nlisten = unix:/a\nconnect = tcp:h:1\nenv = DOCKER_HOST\n"
                            "[b]\nlisten = unix:/b\nconnect = tcp:h:1\nenv = DOCKER_HOST\n",
                            "5: [b] env: DOCKER_HOST is also set by [a] (SCRATCH/sf.conf:1), expected one forward per variable");
}

Test(validate, peer_credentials_need_unix) {
        assert_invalid_spec("x:tcp:127.0.0.1:1=unix:/a,allow-uid=0",
                            "allow-uid: tcp:127.0.0.1:1 has no peer credentials, expected a unix: listen endpoint for allow-uid");
        assert_invalid_spec("x:vsock:any:1=unix:/a,allow-gid=0,allow-insecure=yes",
                            "allow-gid: vsock:any:1 has no peer credentials, expected a unix: listen endpoint for allow-gid");
        const char *ok[] = { "x:unix:/x=tcp:h:1,allow-uid=0,allow-gid=0", "y:systemd:y=tcp:h:1,allow-uid=0", NULL };
        assert_valid(NULL, ok);
}

Test(validate, control_socket) {
        cr_assert_eq(check("[sockferry]\ncontrol = unix:/run/ctl.sock\n[a]\nlisten = unix:/run/ctl.sock\nconnect = tcp:h:1\n", NULL),
                     -EINVAL);
        assert_error(log_text,
                     "%s/sf.conf: [sockferry] control: unix:/run/ctl.sock is also the listen endpoint of [a] (%s/sf.conf:3), expected a socket of its own",
                     scratch_dir(), scratch_dir());
        cr_assert_eq(count_errors(log_text), 1);
}

Test(validate, every_error_is_reported) {
        const char *specs[] = { "c:tcp:0.0.0.0:1=unix:/c,auth=token", "d:unix:/d=unix:/d", NULL };
        cr_assert_eq(check("[a]\n[b]\nlisten = unix:/b\n", specs), -EINVAL);
        cr_assert_eq(count_errors(log_text), 5, "%s", log_text);
        assert_contains(log_text, "[a]: missing listen");
        assert_contains(log_text, "[a]: missing connect");
        assert_contains(log_text, "[b]: missing connect");
        assert_contains(log_text, "-F 'c:tcp:0.0.0.0:1=unix:/c,auth=token': auth: auth = token needs a token file");
        assert_contains(log_text, "-F 'd:unix:/d=unix:/d': connect: unix:/d is the listen endpoint of this forward");
}

/* The pre-auth budget's default follows max-conns, whichever order the keys come in; the
 * relay reads the resolved value. */
Test(validate, preauth_default_follows_max_conns) {
        const char *specs[] = { "b:unix:/b=tcp:h:1,preauth-max=16,max-conns=100", "c:unix:/c=tcp:h:1,max-conns=1000000", NULL };
        cr_assert_eq(check("[a]\nlisten = unix:/a\nconnect = tcp:h:1\n"
                           "[d]\nlisten = unix:/d\nconnect = tcp:h:1\nmax-conns = 100\n", specs), 0, "%s", log_text);
        free(log_text);
        cr_assert_eq(conf.n_forwards, 4);
        cr_assert_eq(conf.forwards[0].preauth_max, 4096, "4 x the default max-conns");
        cr_assert_eq(conf.forwards[1].preauth_max, 400);
        cr_assert_eq(conf.forwards[2].preauth_max, 16, "a value of its own stays");
        cr_assert_eq(conf.forwards[3].preauth_max, 4000000);
        sf_conf_free(&conf);
}

Test(validate, token_file_lookup) {
        struct sf_forward f;
        sf_conf_init(&conf);
        memset(&f, 0, sizeof f);
        cr_assert_null(sf_conf_token_file(&conf, &f));
        cr_assert_null(sf_conf_token_file(&conf, NULL));
        strcpy(conf.token_file, "/global");
        cr_assert_str_eq(sf_conf_token_file(&conf, &f), "/global");
        cr_assert_str_eq(sf_conf_token_file(&conf, NULL), "/global");
        char own[] = "/own";
        f.token_file = own;
        cr_assert_str_eq(sf_conf_token_file(&conf, &f), "/own");
}
