/* -F NAME:LISTEN=CONNECT[,key=value...] */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define SPEC_EXPECTED "expected NAME:LISTEN=CONNECT[,key=value...]"
#define FORWARD_KEYS "listen, connect, auth, allow-insecure, token-file, alias, env, env-format, mode, owner, group, allow-uid, allow-gid, max-conns, max-links, preauth-max, connect-timeout, handshake-timeout, idle-timeout, connect-auth, service, link, keepalive, preset"

TestSuite(spec, .init = scratch_setup, .fini = scratch_teardown);

static struct sf_conf conf;
static char *log_text;

static const struct sf_forward *spec_ok(const char *spec) {
        cr_assert_eq(add_spec(&conf, spec, &log_text), 0, "-F '%s' rejected:\n%s", spec, log_text);
        cr_assert_str_eq(log_text, "");
        free(log_text);
        return &conf.forwards[conf.n_forwards - 1];
}

/* The spec fails with exactly one error, "-F 'SPEC': want", and adds nothing. */
static void assert_spec_error(const char *spec, const char *want) {
        size_t n = conf.n_forwards;
        cr_assert_eq(add_spec(&conf, spec, &log_text), -EINVAL, "-F '%s' accepted", spec);
        assert_error(log_text, "-F '%s': %s", spec, want);
        cr_assert_eq(count_errors(log_text), 1, "%s", log_text);
        cr_assert_eq(conf.n_forwards, n);
        free(log_text);
}

Test(spec, minimal) {
        sf_conf_init(&conf);
        const struct sf_forward *f = spec_ok("dispatch:unix:/run/sockferry/dispatch.sock=tcp:host.docker.internal:7777");
        cr_assert_eq(conf.n_forwards, 1);
        cr_assert_str_eq(f->name, "dispatch");
        cr_assert_str_eq(f->origin.where, "-F 'dispatch:unix:/run/sockferry/dispatch.sock=tcp:host.docker.internal:7777'");
        cr_assert(f->listen_set);
        cr_assert_str_eq(f->listen.path, "/run/sockferry/dispatch.sock");
        cr_assert_eq(f->n_connect, 1);
        cr_assert_str_eq(f->connect[0].host, "host.docker.internal");
        cr_assert_eq(f->connect[0].port, 7777);
        /* The defaults of a file forward. */
        cr_assert_eq(f->mode, 0660);
        cr_assert_eq(f->max_conns, 1024);
        cr_assert_eq(f->connect_timeout_ms, 5000);
        cr_assert_eq(f->handshake_timeout_ms, 5000);
        cr_assert_eq(f->idle_timeout_ms, 0);
        cr_assert_eq(f->auth, SF_AUTH_NONE);
        cr_assert_eq(f->env_format, SF_ENV_PATH);
        cr_assert_eq(sf_conf_validate(&conf), 0);
        sf_conf_free(&conf);
}

Test(spec, ipv6_endpoints) {
        sf_conf_init(&conf);
        const struct sf_forward *f = spec_ok("v6:tcp:[::1]:80=tcp:[fe80::2]:8080");
        cr_assert_str_eq(f->name, "v6");
        cr_assert_str_eq(f->listen.host, "::1");
        cr_assert_eq(f->listen.port, 80);
        cr_assert_str_eq(f->connect[0].host, "fe80::2");
        cr_assert_eq(f->connect[0].port, 8080);
        sf_conf_free(&conf);
}

Test(spec, candidates_and_keys) {
        sf_conf_init(&conf);
        const struct sf_forward *f = spec_ok(
                "a:unix:/run/a.sock=unix:/run/host/a.sock|tcp:host.docker.internal:7000|vsock:host:7000"
                ",auth=token,token-file=/run/secrets/a.token,allow-insecure=yes,alias=/run/ward/a.sock"
                ",env=DOCKER_HOST,env-format=unix-url,mode=0600,owner=root,group=65534"
                ",allow-uid=0|65534 1000,allow-gid=root,max-conns=5,preauth-max=64"
                ",connect-timeout=1s,handshake-timeout=2s,idle-timeout=1m");
        cr_assert_eq(f->n_connect, 3);
        cr_assert_str_eq(f->connect[0].path, "/run/host/a.sock");
        cr_assert_str_eq(f->connect[1].host, "host.docker.internal");
        cr_assert_eq(f->connect[2].kind, SF_EP_VSOCK);
        cr_assert_eq(f->auth, SF_AUTH_TOKEN);
        cr_assert_str_eq(f->token_file, "/run/secrets/a.token");
        cr_assert(f->allow_insecure);
        cr_assert_str_eq(f->alias, "/run/ward/a.sock");
        cr_assert_str_eq(f->env, "DOCKER_HOST");
        cr_assert_eq(f->env_format, SF_ENV_UNIX_URL);
        cr_assert_eq(f->mode, 0600);
        cr_assert(f->owner_set);
        cr_assert_eq(f->owner, 0);
        cr_assert(f->group_set);
        cr_assert_eq(f->group, 65534);
        cr_assert_eq(f->n_allow_uid, 3);
        cr_assert_eq(f->allow_uid[1], 65534);
        cr_assert_eq(f->allow_uid[2], 1000);
        cr_assert_eq(f->n_allow_gid, 1);
        cr_assert_eq(f->allow_gid[0], 0);
        cr_assert_eq(f->max_conns, 5);
        cr_assert_eq(f->preauth_max, 64);
        cr_assert_eq(f->connect_timeout_ms, 1000);
        cr_assert_eq(f->handshake_timeout_ms, 2000);
        cr_assert_eq(f->idle_timeout_ms, 60000);
        cr_assert_eq(sf_conf_validate(&conf), 0);
        sf_conf_free(&conf);
}

/* Each default can also be written out; -F accepts it and it means the default. */
Test(spec, defaults_written_out) {
        sf_conf_init(&conf);
        const struct sf_forward *f =
                spec_ok("a:unix:/a=unix:/b,auth=none,allow-insecure=no,env-format=path,mode=0660,max-conns=1024,"
                        "connect-timeout=5s,handshake-timeout=5000ms,idle-timeout=0");
        struct sf_forward want;
        struct sf_conf other;
        sf_conf_init(&other);
        cr_assert_eq(sf_conf_add_spec(&other, "a:unix:/a=unix:/b"), 0);
        want = other.forwards[0];
        cr_assert_eq(f->auth, want.auth);
        cr_assert_eq(f->allow_insecure, want.allow_insecure);
        cr_assert_eq(f->env_format, want.env_format);
        cr_assert_eq(f->mode, want.mode);
        cr_assert_eq(f->max_conns, want.max_conns);
        cr_assert_eq(f->connect_timeout_ms, want.connect_timeout_ms);
        cr_assert_eq(f->handshake_timeout_ms, want.handshake_timeout_ms);
        cr_assert_eq(f->idle_timeout_ms, want.idle_timeout_ms);
        sf_conf_free(&other);
        sf_conf_free(&conf);
}

Test(spec, whitespace_is_trimmed) {
        sf_conf_init(&conf);
        const struct sf_forward *f = spec_ok(" a : unix:/a = unix:/b  tcp:h:1 , mode = 0600 ");
        cr_assert_str_eq(f->name, "a");
        cr_assert_str_eq(f->listen.path, "/a");
        cr_assert_eq(f->n_connect, 2);
        cr_assert_eq(f->mode, 0600);
        sf_conf_free(&conf);
}

Test(spec, form_errors) {
        sf_conf_init(&conf);
        assert_spec_error("x", "missing ':' after the name, " SPEC_EXPECTED);
        assert_spec_error("", "missing ':' after the name, " SPEC_EXPECTED);
        assert_spec_error("x:unix:/a", "missing '=', " SPEC_EXPECTED);
        assert_spec_error("bad name:unix:/a=unix:/b",
                          "\"bad name\" is not a valid forward name, expected letters, digits, '_', '.' and '-', at most 63 characters");
        assert_spec_error(":unix:/a=unix:/b",
                          "\"\" is not a valid forward name, expected letters, digits, '_', '.' and '-', at most 63 characters");
        assert_spec_error("sockferry:unix:/a=unix:/b",
                          "\"sockferry\" is the name of the global section, expected another forward name");
        assert_spec_error("a:=unix:/b",
                          "listen: empty endpoint, expected unix:/abs/path, unix:@name, tcp:HOST:PORT, tcp:[V6]:PORT, vsock:CID|host|any:PORT, systemd:NAME or fd:N");
        assert_spec_error("a:/run/a.sock=unix:/b", "listen: /run/a.sock: missing transport, did you mean unix:/run/a.sock?");
        /* The NAME left out: the transport is there, or the path alone (issue 16). */
        assert_spec_error("unix:/run/x.sock=unix:/var/run/docker.sock",
                          "the forward's NAME is missing before the listen endpoint, " SPEC_EXPECTED
                          ", e.g. -F mysock:unix:/run/x.sock=...");
        assert_spec_error("/run/x.sock=unix:/var/run/docker.sock",
                          "the forward's NAME is missing before the listen endpoint, " SPEC_EXPECTED
                          ", e.g. -F mysock:unix:/run/x.sock=...");
        assert_spec_error("tcp:127.0.0.1:7777=unix:/var/run/docker.sock",
                          "the forward's NAME is missing before the listen endpoint, " SPEC_EXPECTED
                          ", e.g. -F mysock:tcp:127.0.0.1:7777=...");
        assert_spec_error("a:unix:/a=", "connect: empty value, expected one or more endpoints separated by spaces or |");
        assert_spec_error("a:unix:/a=,mode=0600", "connect: empty value, expected one or more endpoints separated by spaces or |");
        assert_spec_error("a:unix:/a=unix:/b|systemd:b",
                          "connect: systemd:b can only listen (socket activation), expected unix:, tcp: or vsock: endpoints to connect to");
        assert_spec_error("a:unix:/a=unix:/1|unix:/2|unix:/3|unix:/4|unix:/5|unix:/6|unix:/7|unix:/8|unix:/9", "connect: more than 8 endpoints, expected at most 8 candidates");
        cr_assert_eq(conf.n_forwards, 0);
}

Test(spec, key_errors) {
        sf_conf_init(&conf);
        assert_spec_error("a:unix:/a=unix:/b,mode", "\"mode\" has no '=', expected key=value");
        assert_spec_error("a:unix:/a=unix:/b,,mode=0600", "empty item after ',', expected key=value");
        assert_spec_error("a:unix:/a=unix:/b,", "empty item after ',', expected key=value");
        assert_spec_error("a:unix:/a=unix:/b,listen=unix:/c",
                          "listen: comes from NAME:LISTEN=CONNECT, expected only other keys after the ','");
        assert_spec_error("a:unix:/a=unix:/b,connect=unix:/c",
                          "connect: comes from NAME:LISTEN=CONNECT, expected only other keys after the ','");
        assert_spec_error("a:unix:/a=unix:/b,log-level=debug",
                          "log-level: global key, expected a per-forward key (globals go in [sockferry] of a config file)");
        assert_spec_error("a:unix:/a=unix:/b,mdoe=0600",
                          "mdoe: unknown key, expected one of " FORWARD_KEYS "; did you mean mode?");
        assert_spec_error("a:unix:/a=unix:/b,=0600", "\"=0600\" has no key, expected key=value");
        assert_spec_error("a:unix:/a=unix:/b,mode=0600,mode=0644", "mode: duplicate key, expected each key once");
        assert_spec_error("a:unix:/a=unix:/b,mode=8", "mode: \"8\" is not an octal mode, expected octal permission bits such as 0660");
        assert_spec_error("a:unix:/a=unix:/b,max-conns=", "max-conns: empty value, expected a number from 1 to 1000000");
        assert_spec_error("a:unix:/a=unix:/b,preauth-max=2000000",
                          "preauth-max: \"2000000\" is out of range, expected a number from 4 to 1000000");
        assert_spec_error("a:unix:/a=unix:/b,owner=no-such-user-sf",
                          "owner: no such user \"no-such-user-sf\", expected a user name known to this system or a numeric UID");
        cr_assert_eq(conf.n_forwards, 0);
}

Test(spec, long_values) {
        static char spec[PATH_MAX + 100], want[PATH_MAX + 200], path[PATH_MAX + 1];
        sf_conf_init(&conf);

        memset(path, 'p', PATH_MAX);
        path[0] = '/';
        path[PATH_MAX] = '\0';
        snprintf(spec, sizeof spec, "a:unix:/a=unix:/b,token-file=%s", path);
        cr_assert_eq(add_spec(&conf, spec, &log_text), -EINVAL);
        /* Messages quote the first 512 bytes of a long argument. */
        assert_error(log_text, "-F '%.512s...': token-file: path is too long (4095 bytes at most), expected a shorter path", spec);
        cr_assert_eq(count_errors(log_text), 1);
        free(log_text);
        path[PATH_MAX - 1] = '\0';
        snprintf(spec, sizeof spec, "a:unix:/a=unix:/b,token-file=%s", path);
        const struct sf_forward *f = spec_ok(spec);
        cr_assert_eq(strlen(f->token_file), PATH_MAX - 1);
        snprintf(want, sizeof want, "-F '%.512s...'", spec);
        cr_assert_str_eq(f->origin.where, want);

        path[108] = '\0';
        snprintf(spec, sizeof spec, "b:unix:/a=unix:/b,alias=%s", path);
        snprintf(want, sizeof want, "alias: \"%s\" is too long, expected at most 107 bytes (the limit of a unix socket path)", path);
        assert_spec_error(spec, want);
        path[107] = '\0';
        snprintf(spec, sizeof spec, "b:unix:/a=unix:/b,alias=%s", path);
        cr_assert_eq(strlen(spec_ok(spec)->alias), 107);

        char name[300];
        memset(name, 'u', sizeof name - 1);
        name[sizeof name - 1] = '\0';
        snprintf(spec, sizeof spec, "c:unix:/a=unix:/b,allow-uid=%s", name);
        assert_spec_error(spec, "allow-uid: \"uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu...\" is too long, expected a user name or a numeric UID");
        snprintf(spec, sizeof spec, "c:unix:/a=unix:/b,allow-gid=%s", name);
        assert_spec_error(spec, "allow-gid: \"uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu...\" is too long, expected a group name or a numeric GID");
        sf_conf_free(&conf);
}

Test(spec, every_error_is_reported) {
        const char *spec = "bad name:=,mode=9,x,bogus=1";
        sf_conf_init(&conf);
        cr_assert_eq(add_spec(&conf, spec, &log_text), -EINVAL);
        assert_error(log_text, "-F '%s': \"bad name\" is not a valid forward name, expected letters, digits, '_', '.' and '-', at most 63 characters", spec);
        assert_contains(log_text, "-F 'bad name:=,mode=9,x,bogus=1': listen: empty endpoint, expected ");
        assert_error(log_text, "-F '%s': connect: empty value, expected one or more endpoints separated by spaces or |", spec);
        assert_error(log_text, "-F '%s': mode: \"9\" is not an octal mode, expected octal permission bits such as 0660", spec);
        assert_error(log_text, "-F '%s': \"x\" has no '=', expected key=value", spec);
        assert_error(log_text, "-F '%s': bogus: unknown key, expected one of " FORWARD_KEYS, spec);
        cr_assert_eq(count_errors(log_text), 6, "%s", log_text);
        cr_assert_eq(conf.n_forwards, 0);
}

Test(spec, duplicate_names) {
        char *load_log;
        sf_conf_init(&conf);
        cr_assert_eq(load_text(&conf, "\n[a]\nlisten = unix:/a\nconnect = unix:/b\n", &load_log), 0, "%s", load_log);
        free(load_log);
        cr_assert_eq(add_spec(&conf, "a:unix:/c=unix:/d", &log_text), -EINVAL);
        assert_error(log_text, "-F 'a:unix:/c=unix:/d': duplicate forward name, first defined at %s/sf.conf:2", scratch_dir());
        free(log_text);

        spec_ok("b:unix:/e=unix:/f");
        assert_spec_error("b:unix:/g=unix:/h", "duplicate forward name, first defined at -F 'b:unix:/e=unix:/f'");
        cr_assert_eq(conf.n_forwards, 2);
        sf_conf_free(&conf);
}

Test(spec, file_after_spec) {
        /* -F first, then the file: the file's section is the duplicate. */
        sf_conf_init(&conf);
        spec_ok("a:unix:/e=unix:/f");
        cr_assert_eq(load_text(&conf, "[a]\n", &log_text), -EINVAL);
        assert_error(log_text, "%s/sf.conf:1: [a]: duplicate forward name, first defined at -F 'a:unix:/e=unix:/f'", scratch_dir());
        sf_conf_free(&conf);
}

Test(spec, grows_the_array) {
        char spec[64];
        sf_conf_init(&conf);
        for (int i = 0; i < 100; i++) {
                snprintf(spec, sizeof spec, "f%d:unix:/run/%d.sock=tcp:127.0.0.1:%d", i, i, 1000 + i);
                spec_ok(spec);
        }
        cr_assert_eq(conf.n_forwards, 100);
        for (int i = 0; i < 100; i++) {
                snprintf(spec, sizeof spec, "f%d", i);
                cr_assert_str_eq(conf.forwards[i].name, spec);
                cr_assert_eq(conf.forwards[i].connect[0].port, (uint32_t)(1000 + i));
        }
        cr_assert_eq(sf_conf_validate(&conf), 0);
        sf_conf_free(&conf);
        cr_assert_null(conf.forwards);
        cr_assert_eq(conf.n_forwards, 0);
}

/* Issue 23 g: handshake-timeout=18446744073709551615ms was accepted, and the handshake then
 * timed out after 4 ms (the relay's sum of two timeouts wrapped around). */
Test(spec, handshake_timeout_beyond_a_day_is_refused) {
        sf_conf_init(&conf);
        assert_spec_error("a:unix:/a=tcp:h:1,handshake-timeout=18446744073709551615ms",
                          "handshake-timeout: \"18446744073709551615ms\" is more than 24h, expected a duration of at most 24h such as 250ms, 5s or 2m");
        assert_spec_error("a:unix:/a=tcp:h:1,connect-timeout=18446744073709551615ms",
                          "connect-timeout: \"18446744073709551615ms\" is more than 24h, expected a duration of at most 24h such as 250ms, 5s or 2m");
        cr_assert_eq(conf.n_forwards, 0);
        sf_conf_free(&conf);
}

/* The file and -F count together towards SF_MAX_FORWARDS. */
Test(spec, forwards_per_configuration_are_limited) {
        char spec[64];
        sf_conf_init(&conf);
        for (int i = 0; i < SF_MAX_FORWARDS; i++) {
                snprintf(spec, sizeof spec, "f%d:unix:@f%d=unix:@u", i, i);
                cr_assert_eq(sf_conf_add_spec(&conf, spec), 0, "%s", spec);
        }
        assert_spec_error("extra:unix:@extra=unix:@u",
                          "more than 4096 forwards, expected at most 4096 in one configuration (each is a listening socket and holds descriptors for its connections): split the forwards across relays");
        cr_assert_eq(sf_conf_validate(&conf), 0);
        sf_conf_free(&conf);

        char *l;
        sf_conf_init(&conf);
        cr_assert_eq(load_text(&conf, "[a]\nlisten = unix:@a\nconnect = unix:@b\n", &l), 0, "%s", l);
        free(l);
        for (int i = 1; i < SF_MAX_FORWARDS; i++) {
                snprintf(spec, sizeof spec, "f%d:unix:@f%d=unix:@u", i, i);
                cr_assert_eq(sf_conf_add_spec(&conf, spec), 0, "%s", spec);
        }
        char want[PATH_MAX + 512];
        snprintf(want, sizeof want,
                 "more than 4096 forwards, expected at most 4096 in one configuration (each is a listening socket and holds descriptors for its connections), with those of %s/sf.conf: split the forwards across relays",
                 scratch_dir());
        assert_spec_error("extra:unix:@extra=unix:@u", want);
        sf_conf_free(&conf);
}

/* Issue 23: quoted values in -F. Inside quotes ':' '=' ',' '|' and spaces are part of the
 * value, so any path can be written on the command line. */
Test(spec, quoted_values) {
        sf_conf_init(&conf);
        const struct sf_forward *f =
                spec_ok("agent:\"unix:/run/a=b, c.sock\"=\"unix:/Users/me/Library/Group Containers/2BUA8C4S2C.com.1password/t/agent.sock\""
                        "|tcp:host.docker.internal:7000|\"unix:/x|y,z=\\\"w\\\\.sock\","
                        "token-file=\"/run/secrets/a,b=c\",alias = \"/run/my alias.sock\" ,auth=token");
        cr_assert_str_eq(f->name, "agent");
        cr_assert_str_eq(f->listen.path, "/run/a=b, c.sock");
        cr_assert_eq(f->n_connect, 3);
        cr_assert_str_eq(f->connect[0].path, "/Users/me/Library/Group Containers/2BUA8C4S2C.com.1password/t/agent.sock");
        cr_assert_eq(f->connect[1].port, 7000);
        cr_assert_str_eq(f->connect[2].path, "/x|y,z=\"w\\.sock");
        cr_assert_str_eq(f->token_file, "/run/secrets/a,b=c");
        cr_assert_str_eq(f->alias, "/run/my alias.sock");
        cr_assert_eq(f->auth, SF_AUTH_TOKEN);
        /* Spaces separate candidates in -F too, outside quotes. */
        f = spec_ok("two:unix:/run/two.sock=\"unix:/a b\" tcp:h:1");
        cr_assert_eq(f->n_connect, 2);
        cr_assert_str_eq(f->connect[0].path, "/a b");
        cr_assert_eq(sf_conf_validate(&conf), 0);
        sf_conf_free(&conf);
}

Test(spec, quoting_errors) {
        sf_conf_init(&conf);
        const char *unclosed = "a double quote is not closed, expected \"...\" around a value, with \\\" for a quote and \\\\ for a backslash inside";
        assert_spec_error("a:unix:/a=\"unix:/b c", unclosed);
        assert_spec_error("a:\"unix:/a=unix:/b", unclosed);
        assert_spec_error("a:unix:/a=unix:/b,alias=\"/x\\\"", unclosed);
        assert_spec_error("a:unix:/a=\"unix:/b\\n\"",
                          "connect: '\"unix:/b\\n\"' has \\n inside quotes, expected \\\" for a quote or \\\\ for a backslash");
        assert_spec_error("a:\"unix:/a\"x=unix:/b",
                          "listen: '\"unix:/a\"x' goes on after its closing quote, expected the closing quote at the end of the value");
        assert_spec_error("a:unix:/a=unix:/b,token-file=/run/\"t\"",
                          "token-file: '/run/\"t\"' has a quote inside, expected the whole value in double quotes, such as \"unix:/path with spaces/agent.sock\"");
        /* A quoted path longer than any path: PATH_MAX bytes between the quotes. */
        static char spec[PATH_MAX + 100], want[1024];
        char path[PATH_MAX + 1];
        memset(path, 'p', PATH_MAX);
        path[0] = '/';
        path[PATH_MAX] = '\0';
        snprintf(spec, sizeof spec, "a:unix:/a=unix:/b,token-file=\"%s\"", path);
        snprintf(want, sizeof want, "-F '%.512s...': token-file: '\"%.39s...' is too long, expected at most %d bytes in quotes", spec,
                 path, PATH_MAX - 1);
        cr_assert_eq(add_spec(&conf, spec, &log_text), -EINVAL);
        assert_error(log_text, "%s", want);
        cr_assert_eq(count_errors(log_text), 1);
        free(log_text);
        /* One byte less fits. */
        path[PATH_MAX - 1] = '\0';
        snprintf(spec, sizeof spec, "a:unix:/a=unix:/b,token-file=\"%s\"", path);
        cr_assert_eq(strlen(spec_ok(spec)->token_file), PATH_MAX - 1);
        cr_assert_eq(conf.n_forwards, 1);
        sf_conf_free(&conf);
}
