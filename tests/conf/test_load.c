/* The INI file: every key, every error message, the line numbers in them. */
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define FORWARD_KEYS "listen, connect, auth, allow-insecure, token-file, alias, env, env-format, mode, owner, group, allow-uid, allow-gid, max-conns, max-links, preauth-max, connect-timeout, handshake-timeout, idle-timeout, connect-auth, service, link, keepalive, preset"
#define GLOBAL_KEYS "token-file, log-level, log-format, control, user, no-new-privs, drain-timeout, seccomp"
#define SYNTAX "syntax error, expected [section] or key = value"

TestSuite(load, .init = scratch_setup, .fini = scratch_teardown);

static struct sf_conf conf;
static char *log_text;

/* Loads text, expecting it to fail with exactly one error whose message is want (after the
 * "FILE:" prefix, which this adds). */
static void assert_one_error(const char *text, const char *want) {
        sf_conf_init(&conf);
        cr_assert_eq(load_text(&conf, text, &log_text), -EINVAL, "accepted:\n%s", text);
        assert_error(log_text, "%s/sf.conf:%s", scratch_dir(), want);
        cr_assert_eq(count_errors(log_text), 1, "expected one error:\n%s", log_text);
        free(log_text);
        sf_conf_free(&conf);
}

static void load_ok(const char *text) {
        sf_conf_init(&conf);
        cr_assert_eq(load_text(&conf, text, &log_text), 0, "rejected:\n%s\nlog:\n%s", text, log_text);
        cr_assert_str_eq(log_text, "", "a good file logs nothing");
        free(log_text);
}

Test(load, defaults) {
        sf_conf_init(&conf);
        cr_assert_str_eq(conf.file, "");
        cr_assert_eq(conf.log_level, SF_LOG_INFO);
        cr_assert(!conf.log_level_set);
        cr_assert_eq(conf.log_format, SF_LOG_TEXT);
        cr_assert(!conf.control_set);
        cr_assert_str_eq(conf.token_file, "");
        cr_assert(!conf.user_set);
        cr_assert(!conf.no_new_privs);
        cr_assert_eq(conf.drain_timeout_ms, 10000);
        cr_assert(conf.seccomp);
        cr_assert_null(conf.forwards);
        cr_assert_eq(conf.n_forwards, 0);

        load_ok("[a]\n");
        cr_assert_eq(conf.n_forwards, 1);
        const struct sf_forward *f = &conf.forwards[0];
        cr_assert_str_eq(f->name, "a");
        cr_assert(!f->listen_set);
        cr_assert_eq(f->n_connect, 0);
        cr_assert_eq(f->auth, SF_AUTH_NONE);
        cr_assert(!f->allow_insecure);
        cr_assert_null(f->token_file, "no token file of its own");
        cr_assert_str_eq(f->alias, "");
        cr_assert_str_eq(f->env, "");
        cr_assert_eq(f->env_format, SF_ENV_PATH);
        cr_assert_eq(f->mode, 0660);
        cr_assert(!f->owner_set);
        cr_assert(!f->group_set);
        cr_assert_eq(f->n_allow_uid, 0);
        cr_assert_eq(f->n_allow_gid, 0);
        cr_assert_eq(f->max_conns, 1024);
        cr_assert_eq(f->preauth_max, 0);
        cr_assert_eq(f->connect_timeout_ms, 5000);
        cr_assert_eq(f->handshake_timeout_ms, 5000);
        cr_assert_eq(f->idle_timeout_ms, 0);
        sf_conf_free(&conf);
}

Test(load, every_key) {
        load_ok("; sockferry configuration\n"
                "[sockferry]\n"
                "log-level  = debug          ; error|warn|info|debug\n"
                "log-format = json\n"
                "control    = unix:/run/sockferry/control.sock\n"
                "token-file = /run/secrets/sockferry.token\n"
                "user       = 65534:root\n"
                "no-new-privs = yes\n"
                "drain-timeout = 2m\n"
                "\n"
                "[dispatch]\n"
                "listen   = unix:/run/sockferry/dispatch.sock\n"
                "connect  = unix:/run/host/x.sock tcp:host.docker.internal:7000 | vsock:host:7000\n"
                "auth     = token\n"
                "allow-insecure = no\n"
                "token-file = /run/secrets/dispatch.token\n"
                "alias    = /run/ward/dispatch-broker.sock\n"
                "env      = WARD_DISPATCH_BROKER_SOCK\n"
                "env-format = unix-url\n"
                "mode     = 0600\n"
                "owner    = root\n"
                "group    = 65534\n"
                "allow-uid = root 1000, 65534\n"
                "allow-gid = root|54321\n"
                "max-conns = 1000000\n"
                "preauth-max = 16\n"
                "connect-timeout = 250ms\n"
                "handshake-timeout = 3s\n"
                "idle-timeout = 1h\n"
                "[metrics.v2]\n"
                "listen = tcp:127.0.0.1:9100\n"
                "connect = tcp:[::1]:9100\n");

        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/sf.conf", scratch_dir());
        cr_assert_str_eq(conf.file, path);
        cr_assert_eq(conf.log_level, SF_LOG_DEBUG);
        cr_assert(conf.log_level_set);
        cr_assert_eq(conf.log_format, SF_LOG_JSON);
        cr_assert(conf.control_set);
        cr_assert_eq(conf.control.kind, SF_EP_UNIX);
        cr_assert_str_eq(conf.control.path, "/run/sockferry/control.sock");
        cr_assert_str_eq(conf.token_file, "/run/secrets/sockferry.token");
        cr_assert(conf.user_set);
        cr_assert_str_eq(conf.user, "65534:root");
        cr_assert_eq(conf.uid, 65534);
        cr_assert_eq(conf.gid, 0);
        cr_assert(conf.no_new_privs);
        cr_assert_eq(conf.drain_timeout_ms, 120000);
        cr_assert(conf.seccomp);

        cr_assert_eq(conf.n_forwards, 2);
        const struct sf_forward *f = &conf.forwards[0];
        cr_assert_str_eq(f->name, "dispatch");
        char where[PATH_MAX + 32];
        snprintf(where, sizeof where, "%s:11: [dispatch]", path);
        cr_assert_str_eq(f->origin.where, where);
        cr_assert(f->listen_set);
        cr_assert_str_eq(f->listen.text, "unix:/run/sockferry/dispatch.sock");
        cr_assert_eq(f->n_connect, 3);
        cr_assert_str_eq(f->connect[0].text, "unix:/run/host/x.sock");
        cr_assert_str_eq(f->connect[1].text, "tcp:host.docker.internal:7000");
        cr_assert_eq(f->connect[1].port, 7000);
        cr_assert_eq(f->connect[2].kind, SF_EP_VSOCK);
        cr_assert_eq(f->connect[2].cid, SF_VSOCK_CID_HOST);
        cr_assert_eq(f->auth, SF_AUTH_TOKEN);
        cr_assert(!f->allow_insecure);
        cr_assert_str_eq(f->token_file, "/run/secrets/dispatch.token");
        cr_assert_str_eq(f->alias, "/run/ward/dispatch-broker.sock");
        cr_assert_str_eq(f->env, "WARD_DISPATCH_BROKER_SOCK");
        cr_assert_eq(f->env_format, SF_ENV_UNIX_URL);
        cr_assert_eq(f->mode, 0600);
        cr_assert(f->owner_set);
        cr_assert_eq(f->owner, 0);
        cr_assert(f->group_set);
        cr_assert_eq(f->group, 65534);
        cr_assert_eq(f->n_allow_uid, 3);
        cr_assert_eq(f->allow_uid[0], 0);
        cr_assert_eq(f->allow_uid[1], 1000);
        cr_assert_eq(f->allow_uid[2], 65534);
        cr_assert_eq(f->n_allow_gid, 2);
        cr_assert_eq(f->allow_gid[0], 0);
        cr_assert_eq(f->allow_gid[1], 54321);
        cr_assert_eq(f->max_conns, 1000000);
        cr_assert_eq(f->preauth_max, 16);
        cr_assert_eq(f->connect_timeout_ms, 250);
        cr_assert_eq(f->handshake_timeout_ms, 3000);
        cr_assert_eq(f->idle_timeout_ms, 3600000);
        cr_assert_str_eq(sf_conf_token_file(&conf, f), "/run/secrets/dispatch.token");

        f = &conf.forwards[1];
        cr_assert_str_eq(f->name, "metrics.v2");
        snprintf(where, sizeof where, "%s:30: [metrics.v2]", path);
        cr_assert_str_eq(f->origin.where, where);
        cr_assert_str_eq(f->listen.host, "127.0.0.1");
        cr_assert_eq(f->n_connect, 1);
        cr_assert_str_eq(f->connect[0].host, "::1");
        cr_assert_str_eq(sf_conf_token_file(&conf, f), "/run/secrets/sockferry.token");

        cr_assert_eq(sf_conf_validate(&conf), 0);
        sf_conf_free(&conf);
        cr_assert_null(conf.forwards);
        cr_assert_eq(conf.n_forwards, 0);
        sf_conf_free(&conf);
}

Test(load, lexical_forms) {
        /* A BOM, CRLF line ends, indentation, both comment styles, an inline comment,
         * "key: value" and a header with spaces and a comment. */
        load_ok("\xEF\xBB\xBF[sockferry]\r\n"
                "    log-level = warn ; inline\r\n"
                "# comment\r\n"
                "\t; comment\r\n"
                "  [ a ]   ; the first forward\r\n"
                "    listen: unix:@a\r\n"
                "    connect = unix:/run/a.sock;not-a-comment\r\n"
                "\t\tmode = 640\r\n");
        cr_assert_eq(conf.log_level, SF_LOG_WARN);
        cr_assert_eq(conf.n_forwards, 1);
        const struct sf_forward *f = &conf.forwards[0];
        cr_assert_str_eq(f->name, "a");
        cr_assert_eq(f->listen.kind, SF_EP_ABSTRACT);
        cr_assert_str_eq(f->connect[0].path, "/run/a.sock;not-a-comment");
        cr_assert_eq(f->mode, 0640);
        sf_conf_free(&conf);
}

Test(load, a_token_path_under_the_home_directory) {
        /* README's "token-file = ~/.config/sockferry/token": ~/ is $HOME's, as in a shell. */
        setenv("HOME", "/home/me", 1);
        load_ok("[sockferry]\ntoken-file = ~/.config/sockferry/token\n"
                "[a]\nlisten = unix:@a\nconnect = unix:/run/a.sock\ntoken-file = \"~/two words/token\"\n");
        cr_assert_str_eq(conf.token_file, "/home/me/.config/sockferry/token");
        cr_assert_str_eq(conf.forwards[0].token_file, "/home/me/two words/token");
        sf_conf_free(&conf);
        assert_one_error("[sockferry]\ntoken-file = ~bob/token\n",
                         "2: [sockferry] token-file: \"~bob/token\": only ~/ (the home directory) is expanded, not ~USER, "
                         "expected an absolute path such as /run/secrets/sockferry.token");
        unsetenv("HOME");
        assert_one_error("[sockferry]\ntoken-file = ~/token\n",
                         "2: [sockferry] token-file: \"~/token\": ~ stands for the home directory, and HOME is not set, "
                         "expected an absolute path such as /run/secrets/sockferry.token");
}

Test(load, empty_file) {
        load_ok("");
        cr_assert_eq(conf.n_forwards, 0);
        load_ok("\n; nothing\n\n");
        cr_assert_eq(conf.n_forwards, 0);
}

Test(load, missing_file) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/nope.conf", scratch_dir());
        sf_conf_init(&conf);
        capture_start();
        cr_assert_eq(sf_conf_load(&conf, path), -ENOENT);
        log_text = capture_end();
        assert_error(log_text, "%s: cannot read config: No such file or directory", path);
        cr_assert_str_eq(conf.file, "");
}

Test(load, directory) {
        sf_conf_init(&conf);
        capture_start();
        cr_assert_eq(sf_conf_load(&conf, scratch_dir()), -EISDIR);
        log_text = capture_end();
        assert_error(log_text, "%s: cannot read config: it is a directory, expected a regular file", scratch_dir());
}

Test(load, fifo_is_refused_without_waiting_for_a_writer) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/fifo.conf", scratch_dir());
        cr_assert_eq(mkfifo(path, 0600), 0);
        sf_conf_init(&conf);
        capture_start();
        cr_assert_eq(sf_conf_load(&conf, path), -EINVAL);
        log_text = capture_end();
        assert_error(log_text, "%s: cannot read config: it is a FIFO (named pipe), expected a regular file", path);
}

Test(load, device_is_refused) {
        sf_conf_init(&conf);
        capture_start();
        cr_assert_eq(sf_conf_load(&conf, "/dev/zero"), -EINVAL);
        log_text = capture_end();
        assert_error(log_text, "/dev/zero: cannot read config: it is a character device, expected a regular file");
}

Test(load, file_over_1_mib_is_refused_before_reading) {
        const char *path = scratch_file("big.conf", "");
        cr_assert_eq(truncate(path, 1024 * 1024 + 1), 0);
        sf_conf_init(&conf);
        capture_start();
        cr_assert_eq(sf_conf_load(&conf, path), -EFBIG);
        log_text = capture_end();
        assert_error(log_text, "%s: cannot read config: 1048577 bytes, expected a config file of at most 1048576 bytes",
                     path);
}

Test(load, line_over_4096_bytes_is_cut_and_reported) {
        static char text[8192];
        int n = snprintf(text, sizeof text, "[a]\nlisten = unix:/");
        memset(text + n, 'x', 5000);
        strcpy(text + n + 5000, "\nconnect = unix:/b\n");
        sf_conf_init(&conf);
        cr_assert_eq(load_text(&conf, text, &log_text), -EINVAL);
        assert_error(log_text, "%s:2: line is longer than 4096 bytes, expected a short key = value line",
                     conf.file);
        cr_assert_eq(count_errors(log_text), 1);
        cr_assert_eq(conf.forwards[0].n_connect, 1);
}

Test(load, path_too_long) {
        char path[PATH_MAX + 10];
        memset(path, 'x', sizeof path - 1);
        path[0] = '/';
        path[sizeof path - 1] = '\0';
        sf_conf_init(&conf);
        capture_start();
        cr_assert_eq(sf_conf_load(&conf, path), -ENAMETOOLONG);
        log_text = capture_end();
        assert_contains(log_text, "xxx...: cannot read config: File name too long\n");
}

Test(load, syntax_errors) {
        assert_one_error("[a]\nlisten\n", "2: " SYNTAX);
        assert_one_error("[a]\nlisten unix:/a ; = x\n", "2: " SYNTAX);
        assert_one_error("[a\nlisten = unix:/a\n", "1: " SYNTAX);
        assert_one_error("[a] listen = unix:/a\n", "1: " SYNTAX);
        assert_one_error("[a]\n= unix:/a\n", "2: " SYNTAX);
        assert_one_error("[a]\nlisten = unix:/a\nconnect\n", "3: " SYNTAX);
}

Test(load, keys_after_a_broken_header_belong_to_it) {
        /* Without the header the second listen would be a duplicate of [a]'s. */
        assert_one_error("[a]\nlisten = unix:/a\n[b\nlisten = unix:/b\n", "3: " SYNTAX);
}

Test(load, line_limits) {
        char text[512];
        /* inih's line buffer: 198 characters fit, 199 do not. */
        int n = snprintf(text, sizeof text, "[a]\nalias = /%0189d\n", 0);
        cr_assert_eq(n, 4 + 198 + 1);
        sf_conf_init(&conf);
        cr_assert_eq(load_text(&conf, text, &log_text), -EINVAL);
        assert_error(log_text, "%s/sf.conf:2: [a] alias: \"/%0189d\" is too long, expected at most 107 bytes (the limit of a unix socket path)",
                     scratch_dir(), 0);
        cr_assert_eq(count_errors(log_text), 1);
        sf_conf_free(&conf);
        free(log_text);

        snprintf(text, sizeof text, "[a]\nalias = /%0190d\nlisten\n", 0);
        sf_conf_init(&conf);
        cr_assert_eq(load_text(&conf, text, &log_text), -EINVAL);
        assert_error(log_text, "%s/sf.conf:2: line is too long, expected at most 198 characters", scratch_dir());
        assert_error(log_text, "%s/sf.conf:3: " SYNTAX, scratch_dir());
        cr_assert_eq(count_errors(log_text), 2);
        sf_conf_free(&conf);
        free(log_text);
}

Test(load, nul_byte) {
        const char text[] = "[a]\nlisten = unix:/a\0b\nconnect = unix:/b\n";
        const char *path = scratch_file("nul.conf", "");
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        cr_assert_eq(fwrite(text, 1, sizeof text - 1, f), sizeof text - 1);
        fclose(f);
        sf_conf_init(&conf);
        capture_start();
        cr_assert_eq(sf_conf_load(&conf, path), -EINVAL);
        log_text = capture_end();
        assert_error(log_text, "%s:2: line contains a NUL byte, expected text", path);
        cr_assert_eq(count_errors(log_text), 1);
        cr_assert_eq(conf.forwards[0].n_connect, 1);
}

Test(load, key_outside_section) {
        assert_one_error("listen = unix:/a\n[a]\n",
                         "1: listen: key outside a section, expected [sockferry] or [NAME] above it");
        assert_one_error("# comment\nlog-level = info\n",
                         "2: log-level: key outside a section, expected [sockferry] or [NAME] above it");
}

Test(load, unknown_keys) {
        assert_one_error("[dispatch]\nlisen = unix:/a\n",
                         "2: [dispatch] lisen: unknown key, expected one of " FORWARD_KEYS "; did you mean listen?");
        assert_one_error("[dispatch]\nlsiten = unix:/a\n",
                         "2: [dispatch] lsiten: unknown key, expected one of " FORWARD_KEYS "; did you mean listen?");
        assert_one_error("[dispatch]\nListen = unix:/a\n",
                         "2: [dispatch] Listen: unknown key, expected one of " FORWARD_KEYS "; did you mean listen?");
        assert_one_error("[dispatch]\nmaxconns = 5\n",
                         "2: [dispatch] maxconns: unknown key, expected one of " FORWARD_KEYS "; did you mean max-conns?");
        assert_one_error("[dispatch]\nfrobnicate = 1\n",
                         "2: [dispatch] frobnicate: unknown key, expected one of " FORWARD_KEYS);
        assert_one_error("[dispatch]\nab = 1\n", "2: [dispatch] ab: unknown key, expected one of " FORWARD_KEYS);
        assert_one_error("[sockferry]\nlog-levle = info\n",
                         "2: [sockferry] log-levle: unknown key, expected one of " GLOBAL_KEYS "; did you mean log-level?");
        assert_one_error("[sockferry]\nverbose = yes\n",
                         "2: [sockferry] verbose: unknown key, expected one of " GLOBAL_KEYS);
}

Test(load, key_in_the_wrong_section) {
        assert_one_error("[dispatch]\nlog-level = debug\n",
                         "2: [dispatch] log-level: global key in a forward section, expected it in [sockferry]");
        assert_one_error("[sockferry]\nlisten = unix:/a\n",
                         "2: [sockferry] listen: per-forward key in [sockferry], expected it in the section of a forward such as [dispatch]");
}

Test(load, duplicate_key) {
        char want[PATH_MAX + 200];
        snprintf(want, sizeof want, "4: [a] listen: duplicate key, first set at %s/sf.conf:2, expected each key once per section",
                 scratch_dir());
        assert_one_error("[a]\nlisten = unix:/a\nconnect = unix:/b\nlisten = unix:/c\n", want);
        snprintf(want, sizeof want, "3: [sockferry] user: duplicate key, first set at %s/sf.conf:2, expected each key once per section",
                 scratch_dir());
        assert_one_error("[sockferry]\nuser = root\nuser = root\n", want);
}

Test(load, same_key_in_two_sections) {
        load_ok("[a]\nlisten = unix:/a\n[b]\nlisten = unix:/b\n");
        cr_assert_eq(conf.n_forwards, 2);
        sf_conf_free(&conf);
}

Test(load, duplicate_sections) {
        char want[PATH_MAX + 200];
        snprintf(want, sizeof want, "4: [a]: duplicate forward name, first defined at %s/sf.conf:1", scratch_dir());
        assert_one_error("[a]\nlisten = unix:/a\n[b]\n[a]\nlisten = unix:/c\n", want);
        snprintf(want, sizeof want, "3: [sockferry]: duplicate section, first defined at %s/sf.conf:1", scratch_dir());
        assert_one_error("[sockferry]\n[a]\n[sockferry]\n", want);
}

Test(load, duplicate_section_keys_are_still_checked) {
        sf_conf_init(&conf);
        cr_assert_eq(load_text(&conf, "[a]\n[a]\nmode = 9\n", &log_text), -EINVAL);
        assert_error(log_text, "%s/sf.conf:3: [a] mode: \"9\" is not an octal mode, expected octal permission bits such as 0660",
                     scratch_dir());
        cr_assert_eq(count_errors(log_text), 2);
        cr_assert_eq(conf.n_forwards, 1, "the second [a] is not kept");
        cr_assert_eq(conf.forwards[0].mode, 0660);
}

Test(load, bad_forward_names) {
        const char *expected = "expected letters, digits, '_', '.' and '-', at most 63 characters";
        char want[512], text[200];
        snprintf(want, sizeof want, "1: [bad name]: not a valid forward name, %s", expected);
        assert_one_error("[bad name]\n", want);
        snprintf(want, sizeof want, "1: []: not a valid forward name, %s", expected);
        assert_one_error("[]\n", want);
        snprintf(want, sizeof want, "1: [a/b]: not a valid forward name, %s", expected);
        assert_one_error("[a/b]\n", want);
        snprintf(text, sizeof text, "[%064d]\n", 0);
        snprintf(want, sizeof want, "1: [%064d]: not a valid forward name, %s", 0, expected);
        assert_one_error(text, want);
        snprintf(text, sizeof text, "[%063d]\n", 0);
        load_ok(text);
        cr_assert_eq(strlen(conf.forwards[0].name), 63);
        sf_conf_free(&conf);
}

Test(load, forward_value_errors) {
        assert_one_error("[dispatch]\nconnect-timeout = 5x\n",
                         "2: [dispatch] connect-timeout: \"5x\" is not a duration, expected a duration such as 250ms, 5s or 2m");
        assert_one_error("[d]\nlisten = /run/x.sock\n", "2: [d] listen: /run/x.sock: missing transport, did you mean unix:/run/x.sock?");
        assert_one_error("[d]\nlisten =\n",
                         "2: [d] listen: empty endpoint, expected unix:/abs/path, unix:@name, tcp:HOST:PORT, tcp:[V6]:PORT, vsock:CID|host|any:PORT, systemd:NAME or fd:N");
        assert_one_error("[d]\nlisten = tcp:h:0\n", "2: [d] listen: tcp:h:0: bad port, expected a number from 1 to 65535");
        assert_one_error("[d]\nconnect =\n",
                         "2: [d] connect: empty value, expected one or more endpoints separated by spaces or |");
        assert_one_error("[d]\nconnect = | \n",
                         "2: [d] connect: empty value, expected one or more endpoints separated by spaces or |");
        assert_one_error("[d]\nconnect = unix:/a tcp:[::1\n",
                         "2: [d] connect: tcp:[::1: missing ']' after an IPv6 address, expected tcp:[V6]:PORT");
        assert_one_error("[d]\nconnect = unix:/a systemd:x\n",
                         "2: [d] connect: systemd:x can only listen (socket activation), expected unix:, tcp: or vsock: endpoints to connect to");
        assert_one_error("[d]\nconnect = fd:3\n",
                         "2: [d] connect: fd:3 can only listen (socket activation), expected unix:, tcp: or vsock: endpoints to connect to");
        assert_one_error("[d]\nconnect = vsock:any:7000\n",
                         "2: [d] connect: vsock:any:7000 can only listen, expected vsock:host:PORT or vsock:CID:PORT to connect to");
        assert_one_error("[d]\nconnect = unix:/1 unix:/2 unix:/3 unix:/4 unix:/5 unix:/6 unix:/7 unix:/8 unix:/9\n",
                         "2: [d] connect: more than 8 endpoints, expected at most 8 candidates");
        assert_one_error("[d]\nauth = password\n", "2: [d] auth: \"password\" is not an auth mode, expected none or token");
        assert_one_error("[d]\nallow-insecure = sure\n",
                         "2: [d] allow-insecure: \"sure\" is not a boolean, expected yes or no (also true/false, on/off, 1/0)");
        assert_one_error("[d]\ntoken-file = sockferry.token\n",
                         "2: [d] token-file: \"sockferry.token\" is not an absolute path, expected an absolute path such as /run/secrets/sockferry.token");
        assert_one_error("[d]\nalias = run/x.sock\n",
                         "2: [d] alias: \"run/x.sock\" is not an absolute path, expected the absolute path clients connect to, such as /run/app.sock");
        assert_one_error("[d]\nenv = 1X\n",
                         "2: [d] env: \"1X\" is not an environment variable name, expected letters, digits and '_', not starting with a digit");
        assert_one_error("[d]\nenv = A-B\n",
                         "2: [d] env: \"A-B\" is not an environment variable name, expected letters, digits and '_', not starting with a digit");
        assert_one_error("[d]\nenv =\n", "2: [d] env: empty value, expected an environment variable name such as DOCKER_HOST");
        assert_one_error("[d]\nenv = LD_PRELOAD\n",
                         "2: [d] env: LD_PRELOAD is set by sockferry itself, expected a variable of your own such as DOCKER_HOST");
        assert_one_error("[d]\nenv = LISTEN_FDS\n",
                         "2: [d] env: LISTEN_FDS is set by sockferry itself, expected a variable of your own such as DOCKER_HOST");
        assert_one_error("[d]\nenv = SOCKFERRY_PRELOAD_MAP\n",
                         "2: [d] env: SOCKFERRY_PRELOAD_MAP is set by sockferry itself, expected a variable of your own such as DOCKER_HOST");
        assert_one_error("[d]\nenv-format = url\n", "2: [d] env-format: \"url\" is not an env-format, expected path or unix-url");
        assert_one_error("[d]\nmode = rw-rw----\n",
                         "2: [d] mode: \"rw-rw----\" is not an octal mode, expected octal permission bits such as 0660");
        assert_one_error("[d]\nowner = no-such-user-sf\n",
                         "2: [d] owner: no such user \"no-such-user-sf\", expected a user name known to this system or a numeric UID");
        assert_one_error("[d]\ngroup = no-such-group-sf\n",
                         "2: [d] group: no such group \"no-such-group-sf\", expected a group name known to this system or a numeric GID");
        assert_one_error("[d]\nallow-uid = root no-such-user-sf\n",
                         "2: [d] allow-uid: no such user \"no-such-user-sf\", expected a user name known to this system or a numeric UID");
        assert_one_error("[d]\nallow-uid = ,\n",
                         "2: [d] allow-uid: empty value, expected one or more user names or UIDs separated by spaces");
        assert_one_error("[d]\nallow-uid = 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n",
                         "2: [d] allow-uid: more than 16 entries, expected at most 16 users");
        assert_one_error("[d]\nallow-gid = no-such-group-sf\n",
                         "2: [d] allow-gid: no such group \"no-such-group-sf\", expected a group name known to this system or a numeric GID");
        assert_one_error("[d]\nallow-gid =\n",
                         "2: [d] allow-gid: empty value, expected one or more group names or GIDs separated by spaces");
        assert_one_error("[d]\nallow-gid = 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n",
                         "2: [d] allow-gid: more than 16 entries, expected at most 16 groups");
        assert_one_error("[d]\nmax-conns = 0\n", "2: [d] max-conns: \"0\" is out of range, expected a number from 1 to 1000000");
        assert_one_error("[d]\npreauth-max = 3\n", "2: [d] preauth-max: \"3\" is out of range, expected a number from 4 to 1000000");
        assert_one_error("[d]\nmax-conns = lots\n", "2: [d] max-conns: \"lots\" is not a number, expected a number from 1 to 1000000");
        assert_one_error("[d]\nconnect-timeout = 0\n",
                         "2: [d] connect-timeout: \"0\" would time out every connection at once, expected a duration above 0 such as 5s");
        assert_one_error("[d]\nhandshake-timeout = 0ms\n",
                         "2: [d] handshake-timeout: \"0ms\" would time out every connection at once, expected a duration above 0 such as 5s");
        assert_one_error("[d]\nhandshake-timeout = soon\n",
                         "2: [d] handshake-timeout: \"soon\" is not a duration, expected a duration such as 250ms, 5s or 2m");
        assert_one_error("[d]\nidle-timeout = -1\n",
                         "2: [d] idle-timeout: \"-1\" is negative, expected a duration such as 250ms, 5s or 2m");
}

/* Issue 23 g: every duration is capped at a day where it is parsed, so that no deadline or
 * sum of two durations in the relay can wrap around. */
Test(load, durations_are_capped_at_a_day) {
        static const char *const keys[] = { "connect-timeout", "handshake-timeout", "idle-timeout" };
        char text[256], want[512];
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
                snprintf(text, sizeof text, "[d]\n%s = 18446744073709551615ms\n", keys[i]);
                snprintf(want, sizeof want,
                         "2: [d] %s: \"18446744073709551615ms\" is more than 24h, expected a duration of at most 24h such as 250ms, 5s or 2m",
                         keys[i]);
                assert_one_error(text, want);
                snprintf(text, sizeof text, "[d]\n%s = 24h\n", keys[i]);
                load_ok(text);
                sf_conf_free(&conf);
        }
        assert_one_error("[sockferry]\ndrain-timeout = 86400001ms\n",
                         "2: [sockferry] drain-timeout: \"86400001ms\" is more than 24h, expected a duration of at most 24h such as 250ms, 5s or 2m");
        load_ok("[sockferry]\ndrain-timeout = 86400000ms\n[d]\nconnect-timeout = 24h\nhandshake-timeout = 1440m\nidle-timeout = 86400\n");
        cr_assert_eq(conf.drain_timeout_ms, 86400000);
        cr_assert_eq(conf.forwards[0].connect_timeout_ms + conf.forwards[0].handshake_timeout_ms, 2 * 86400000ull);
        cr_assert_eq(conf.forwards[0].idle_timeout_ms, 86400000);
        sf_conf_free(&conf);
}

Test(load, long_values) {
        char text[300], want[400];
        /* A letter first: a name starting with a digit fails before the length check. */
        snprintf(text, sizeof text, "[d]\nenv = X%0127d\n", 0);
        snprintf(want, sizeof want, "2: [d] env: \"X%031d...\" is too long, expected at most 127 characters", 0);
        assert_one_error(text, want);
        snprintf(text, sizeof text, "[d]\nenv = X%0126d\n", 0);
        load_ok(text);
        cr_assert_eq(strlen(conf.forwards[0].env), 127);
        sf_conf_free(&conf);

        snprintf(text, sizeof text, "[sockferry]\nuser = %0128d\n", 0);
        snprintf(want, sizeof want,
                 "2: [sockferry] user: \"%032d...\" is too long, expected NAME|UID[:GROUP|GID] of at most 127 characters", 0);
        assert_one_error(text, want);
}

Test(load, global_value_errors) {
        assert_one_error("[sockferry]\nlog-level = verbose\n",
                         "2: [sockferry] log-level: \"verbose\" is not a log level, expected error, warn, info or debug");
        assert_one_error("[sockferry]\nlog-format = xml\n",
                         "2: [sockferry] log-format: \"xml\" is not a log format, expected text or json");
        assert_one_error("[sockferry]\ncontrol = tcp:127.0.0.1:9\n",
                         "2: [sockferry] control: tcp:127.0.0.1:9 is not a unix socket, expected unix:/abs/path or unix:@name");
        assert_one_error("[sockferry]\ncontrol = run/ctl.sock\n",
                         "2: [sockferry] control: run/ctl.sock: unknown endpoint type, expected unix:/abs/path, unix:@name, tcp:HOST:PORT, tcp:[V6]:PORT, vsock:CID|host|any:PORT, systemd:NAME or fd:N");
        assert_one_error("[sockferry]\ntoken-file = ./token\n",
                         "2: [sockferry] token-file: \"./token\" is not an absolute path, expected an absolute path such as /run/secrets/sockferry.token");
        assert_one_error("[sockferry]\nuser = no-such-user-sf\n",
                         "2: [sockferry] user: no such user \"no-such-user-sf\", expected a user name known to this system or a numeric UID");
        assert_one_error("[sockferry]\nuser = root:no-such-group-sf\n",
                         "2: [sockferry] user: no such group \"no-such-group-sf\", expected a group name known to this system or a numeric GID");
        assert_one_error("[sockferry]\nno-new-privs = please\n",
                         "2: [sockferry] no-new-privs: \"please\" is not a boolean, expected yes or no (also true/false, on/off, 1/0)");
        assert_one_error("[sockferry]\ndrain-timeout = 10 s\n",
                         "2: [sockferry] drain-timeout: \"10 s\" is not a duration, expected a duration such as 250ms, 5s or 2m");
        assert_one_error("[sockferry]\nseccomp = maybe\n",
                         "2: [sockferry] seccomp: \"maybe\" is not a boolean, expected yes or no (also true/false, on/off, 1/0)");
}

Test(load, global_values) {
        load_ok("[sockferry]\ncontrol = unix:@sockferry\nuser = root\nlog-level = WARNING\ndrain-timeout = 0\n"
                "seccomp = off\n");
        cr_assert_eq(conf.control.kind, SF_EP_ABSTRACT);
        cr_assert_eq(conf.uid, 0);
        cr_assert_eq(conf.gid, 0);
        cr_assert_eq(conf.log_level, SF_LOG_WARN);
        cr_assert_eq(conf.drain_timeout_ms, 0);
        cr_assert(!conf.seccomp);
}

Test(load, every_error_is_reported) {
        const char *text = "stray = 1\n"               /* 1 */
                           "[sockferry]\n"             /* 2 */
                           "log-level = loud\n"        /* 3 */
                           "[a]\n"                     /* 4 */
                           "listen = unix:relative\n"  /* 5 */
                           "mode = 999\n"              /* 6 */
                           "oops\n"                    /* 7 */
                           "mode = 0600\n"             /* 8 */
                           "[a]\n"                     /* 9 */
                           "[b c]\n"                   /* 10 */
                           "max-conns = 0\n";          /* 11 */
        sf_conf_init(&conf);
        cr_assert_eq(load_text(&conf, text, &log_text), -EINVAL);
        const char *d = scratch_dir();
        assert_error(log_text, "%s/sf.conf:1: stray: key outside a section, expected [sockferry] or [NAME] above it", d);
        assert_error(log_text, "%s/sf.conf:3: [sockferry] log-level: \"loud\" is not a log level, expected error, warn, info or debug", d);
        assert_error(log_text, "%s/sf.conf:5: [a] listen: unix:relative: unix socket path must be absolute, expected unix:/abs/path", d);
        assert_error(log_text, "%s/sf.conf:6: [a] mode: \"999\" is not an octal mode, expected octal permission bits such as 0660", d);
        assert_error(log_text, "%s/sf.conf:7: " SYNTAX, d);
        assert_error(log_text, "%s/sf.conf:8: [a] mode: duplicate key, first set at %s/sf.conf:6, expected each key once per section", d, d);
        assert_error(log_text, "%s/sf.conf:9: [a]: duplicate forward name, first defined at %s/sf.conf:4", d, d);
        assert_error(log_text, "%s/sf.conf:10: [b c]: not a valid forward name, expected letters, digits, '_', '.' and '-', at most 63 characters", d);
        assert_error(log_text, "%s/sf.conf:11: [b c] max-conns: \"0\" is out of range, expected a number from 1 to 1000000", d);
        cr_assert_eq(count_errors(log_text), 9, "%s", log_text);
}

Test(load, two_files) {
        const char *first = scratch_file("one.conf", "[a]\nlisten = unix:/a\nconnect = unix:/b\n");
        const char *second = scratch_file("two.conf", "\n[b]\nlisten = unix:/c\nconnect = unix:/d\n[a]\n");
        sf_conf_init(&conf);
        capture_start();
        cr_assert_eq(sf_conf_load(&conf, first), 0);
        cr_assert_eq(sf_conf_load(&conf, second), -EINVAL);
        log_text = capture_end();
        assert_error(log_text, "%s:5: [a]: duplicate forward name, first defined at %s:1", second, first);
        cr_assert_eq(count_errors(log_text), 1);
        cr_assert_eq(conf.n_forwards, 2);
        cr_assert_str_eq(conf.file, second);
        sf_conf_free(&conf);
}

/* Issue 23: a path with a space could not be written. A candidate and any path value may be
 * double-quoted, with \" and \\ inside. */
Test(load, quoted_values) {
        load_ok("[sockferry]\n"
                "token-file = \"/run/secrets/my \\\"team\\\" token\"\n"
                "control = \"unix:/run/sock ferry/control.sock\"\n"
                "[agent]\n"
                "listen = \"unix:/run/sockferry/agent one.sock\"\n"
                "connect = \"unix:/Users/me/Library/Group Containers/2BUA8C4S2C.com.1password/t/agent.sock\" "
                "tcp:host.docker.internal:7000|\"unix:/a|b c.sock\" \"unix:/back\\\\slash\" ; the 1Password agent\n"
                "token-file = \"/run/secrets/agent;token\"\n"
                "alias = \"/run/ward/my agent.sock\"\n"
                "auth = token\n"
                "[empty-is-not-special]\n"
                "listen = unix:/run/plain.sock\n"
                "connect = unix:/run/plain-upstream.sock\n");
        cr_assert_str_eq(conf.token_file, "/run/secrets/my \"team\" token");
        cr_assert_str_eq(conf.control.path, "/run/sock ferry/control.sock");
        const struct sf_forward *f = &conf.forwards[0];
        cr_assert_str_eq(f->listen.path, "/run/sockferry/agent one.sock");
        cr_assert_eq(f->n_connect, 4);
        cr_assert_eq(f->connect[0].kind, SF_EP_UNIX);
        cr_assert_str_eq(f->connect[0].path, "/Users/me/Library/Group Containers/2BUA8C4S2C.com.1password/t/agent.sock");
        cr_assert_str_eq(f->connect[0].text,
                         "unix:/Users/me/Library/Group Containers/2BUA8C4S2C.com.1password/t/agent.sock");
        cr_assert_str_eq(f->connect[1].host, "host.docker.internal");
        cr_assert_str_eq(f->connect[2].path, "/a|b c.sock");
        cr_assert_str_eq(f->connect[3].path, "/back\\slash");
        cr_assert_str_eq(f->token_file, "/run/secrets/agent;token");
        cr_assert_str_eq(f->alias, "/run/ward/my agent.sock");
        cr_assert_str_eq(conf.forwards[1].connect[0].path, "/run/plain-upstream.sock");
        sf_conf_free(&conf);

        /* An empty quoted value is an empty value. */
        assert_one_error("[d]\nconnect = \"\"\n",
                         "2: [d] connect: empty endpoint, expected unix:/abs/path, unix:@name, tcp:HOST:PORT, tcp:[V6]:PORT, vsock:CID|host|any:PORT, systemd:NAME or fd:N");
        assert_one_error("[d]\nalias = \"\"\n",
                         "2: [d] alias: \"\" is not an absolute path, expected the absolute path clients connect to, such as /run/app.sock");
}

Test(load, quoting_errors) {
        assert_one_error("[d]\nconnect = \"unix:/a b.sock\n",
                         "2: [d] connect: '\"unix:/a b.sock' has no closing quote, expected a '\"' at the end of the value (\\\" for a quote and \\\\ for a backslash inside)");
        assert_one_error("[d]\nconnect = tcp:h:1 \"unix:/a b.sock\\\"\n",
                         "2: [d] connect: '\"unix:/a b.sock\\\"' has no closing quote, expected a '\"' at the end of the value (\\\" for a quote and \\\\ for a backslash inside)");
        assert_one_error("[d]\nlisten = \"unix:/a\\\n",
                         "2: [d] listen: '\"unix:/a\\' has no closing quote, expected a '\"' at the end of the value (\\\" for a quote and \\\\ for a backslash inside)");
        assert_one_error("[d]\nalias = \"/run/a\\x.sock\"\n",
                         "2: [d] alias: '\"/run/a\\x.sock\"' has \\x inside quotes, expected \\\" for a quote or \\\\ for a backslash");
        assert_one_error("[d]\nconnect = \"unix:/a\"b tcp:h:1\n",
                         "2: [d] connect: '\"unix:/a\"b' goes on after its closing quote, expected the closing quote at the end of the value");
        assert_one_error("[d]\ntoken-file = /run/\"my token\"\n",
                         "2: [d] token-file: '/run/\"my token\"' has a quote inside, expected the whole value in double quotes, such as \"unix:/path with spaces/agent.sock\"");
        assert_one_error("[sockferry]\ntoken-file = \"/run/a\n",
                         "2: [sockferry] token-file: '\"/run/a' has no closing quote, expected a '\"' at the end of the value (\\\" for a quote and \\\\ for a backslash inside)");
        assert_one_error("[sockferry]\ncontrol = unix:/run/a\"b\"\n",
                         "2: [sockferry] control: 'unix:/run/a\"b\"' has a quote inside, expected the whole value in double quotes, such as \"unix:/path with spaces/agent.sock\"");
        /* inih ends the value at " ;", inside quotes too: the message says why the quote
         * seems unclosed. */
        assert_one_error("[d]\nconnect = \"unix:/a ;b.sock\"\n",
                         "2: [d] connect: '\"unix:/a' has no closing quote, expected a '\"' at the end of the value (\\\" for a quote and \\\\ for a backslash inside); a ';' after a space starts a comment, even inside quotes");
}

/* Issue 23 j: a 1 MiB configuration of 23 000 small forwards took 390 MB and 12 s to check.
 * SF_MAX_FORWARDS bounds it; the error names the limit and the file, and the rest of the
 * file is not read. */
Test(load, forwards_per_configuration_are_limited) {
        size_t cap = (SF_MAX_FORWARDS + 2) * 64;
        char *text = malloc(cap);
        cr_assert_not_null(text);
        size_t len = 0;
        for (int i = 0; i < SF_MAX_FORWARDS; i++)
                len += (size_t)snprintf(text + len, cap - len, "[f%d]\nlisten = unix:@f%d\nconnect = unix:@u%d\n", i, i, i);
        sf_conf_init(&conf);
        cr_assert_eq(load_text(&conf, text, &log_text), 0, "%s", log_text);
        free(log_text);
        cr_assert_eq(conf.n_forwards, SF_MAX_FORWARDS);
        cr_assert_eq(validate(&conf, &log_text), 0, "%s", log_text);
        free(log_text);
        sf_conf_free(&conf);

        /* One more, and a line the reader never gets to. */
        unsigned line = 3 * SF_MAX_FORWARDS + 1;
        snprintf(text + len, cap - len, "[one-too-many]\nlisten = unix:@x\n[later]\nbogus = 1\n");
        sf_conf_init(&conf);
        cr_assert_eq(load_text(&conf, text, &log_text), -EINVAL);
        assert_error(log_text,
                     "%s/sf.conf:%u: [one-too-many]: more than 4096 forwards, expected at most 4096 in one configuration (each is a listening socket and holds descriptors for its connections); the rest of %s/sf.conf is not read: split the forwards across relays",
                     scratch_dir(), line, scratch_dir());
        cr_assert_eq(count_errors(log_text), 1, "%s", log_text);
        cr_assert_eq(conf.n_forwards, SF_MAX_FORWARDS);
        free(log_text);
        sf_conf_free(&conf);
        free(text);
}
