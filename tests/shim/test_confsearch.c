/* The configuration file relay, check and stats use without -c and -F (shim/confsearch.h),
 * and `sockferry check` finding it; the command line of a running relay for `check --pid`. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "relay/listen/sockpath.h"
#include "shim/confsearch.h"

static char dir[64];

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(p);
}

static void setup(void) {
        snprintf(dir, sizeof dir, "/tmp/sf-confsearch-test.XXXXXX");
        cr_assert_not_null(mkdtemp(dir));
        unsetenv("XDG_CONFIG_HOME");
        setenv("HOME", dir, 1);
}

static void teardown(void) {
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(confsearch, .init = setup, .fini = teardown);

static void write_conf(const char *path, const char *text) {
        char d[PATH_MAX];
        snprintf(d, sizeof d, "%s", path);
        for (char *p = d + 1; *p; p++)
                if (*p == '/') {
                        *p = '\0';
                        mkdir(d, 0755);
                        *p = '/';
                }
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fputs(text, f);
        fclose(f);
}

Test(confsearch, home_config_first) {
        char buf[PATH_MAX], want[PATH_MAX];
        snprintf(want, sizeof want, "%s/.config/sockferry/sockferry.conf", dir);
        write_conf(want, "");
        cr_assert_str_eq(sf_confsearch_find(buf, sizeof buf), want);
}

Test(confsearch, xdg_config_home_wins_over_home) {
        char buf[PATH_MAX], want[PATH_MAX], xdg[PATH_MAX];
        snprintf(xdg, sizeof xdg, "%s/xdg", dir);
        snprintf(want, sizeof want, "%s/sockferry/sockferry.conf", xdg);
        write_conf(want, "");
        setenv("XDG_CONFIG_HOME", xdg, 1);
        cr_assert_str_eq(sf_confsearch_find(buf, sizeof buf), want);
        /* A relative XDG_CONFIG_HOME is ignored, as the XDG spec says. */
        setenv("XDG_CONFIG_HOME", "relative", 1);
        const char *got = sf_confsearch_find(buf, sizeof buf);
        cr_assert(!got || strcmp(got, "/etc/sockferry/sockferry.conf") == 0, "got %s", got);
}

Test(confsearch, falls_back_to_etc) {
        char buf[PATH_MAX], places[2 * PATH_MAX], want[3 * PATH_MAX];
        const char *got = sf_confsearch_find(buf, sizeof buf);
        if (access("/etc/sockferry/sockferry.conf", F_OK) == 0)
                cr_assert_str_eq(got, "/etc/sockferry/sockferry.conf");
        else
                cr_assert_null(got, "found %s", got);
        snprintf(want, sizeof want, "%s/.config/sockferry/sockferry.conf, then /etc/sockferry/sockferry.conf", dir);
        cr_assert_str_eq(sf_confsearch_places(places, sizeof places), want);
}

/* Runs the binary with args, returns its exit status and its output in log. */
static int run_bin(char *const args[], char *log, size_t cap) {
        int out = memfd_create("out", MFD_CLOEXEC);
        cr_assert_geq(out, 0);
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                dup2(out, STDOUT_FILENO);
                dup2(out, STDERR_FILENO);
                execv(args[0], args);
                _exit(127);
        }
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        ssize_t n = pread(out, log, cap - 1, 0);
        log[n > 0 ? n : 0] = '\0';
        close(out);
        cr_assert(WIFEXITED(status), "status %d: %s", status, log);
        return WEXITSTATUS(status);
}

/* `sockferry check` with neither -c nor -F reads ~/.config/sockferry/sockferry.conf. */
Test(confsearch, check_reads_the_user_config) {
        const char *bin = getenv("SOCKFERRY");
        if (!bin || access(bin, X_OK) != 0)
                cr_skip_test("SOCKFERRY is not set to the built binary");
        char conf[PATH_MAX], text[PATH_MAX + 128];
        snprintf(conf, sizeof conf, "%s/.config/sockferry/sockferry.conf", dir);
        snprintf(text, sizeof text, "[found]\nlisten = unix:%s/found.sock\nconnect = unix:%s/nothing.sock\n", dir, dir);
        write_conf(conf, text);
        char log[4096];
        int rc = run_bin((char *const[]){ (char *)bin, "check", NULL }, log, sizeof log);
        cr_assert_eq(rc, 1, "status %d: %s", rc, log);
        cr_assert_not_null(strstr(log, "found: FAIL"), "the forward of the user's config was not checked: %s", log);
}

Test(confsearch, cmdline_of_a_process) {
        char *buf;
        size_t len;
        cr_assert_eq(sf_confsearch_cmdline((long)getpid(), &buf, &len), 0);
        cr_assert_gt(len, 0);
        cr_assert_eq(buf[len - 1], '\0', "the last argument ends in NUL");
        cr_assert_str_eq(buf, program_invocation_name, "argv[0] comes first");
        free(buf);

        char cwd[PATH_MAX], want[PATH_MAX];
        cr_assert_not_null(getcwd(want, sizeof want));
        cr_assert_eq(sf_confsearch_cwd((long)getpid(), cwd, sizeof cwd), 0);
        cr_assert_str_eq(cwd, want);
}

Test(confsearch, cmdline_of_no_process) {
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0)
                _exit(0);
        cr_assert_eq(waitpid(pid, NULL, 0), pid);
        char *buf = NULL;
        size_t len = 0;
        cr_assert_eq(sf_confsearch_cmdline((long)pid, &buf, &len), -ESRCH);
        cr_assert_null(buf);
}

/* `check --pid PID` checks the forwards a running relay was given: a relative -c (from the
 * relay's working directory) and a -F; a process that is not a relay is a usage error. */
Test(confsearch, check_pid_takes_the_relays_forwards) {
        const char *bin = getenv("SOCKFERRY");
        if (!bin || access(bin, X_OK) != 0)
                cr_skip_test("SOCKFERRY is not set to the built binary");
        char conf[PATH_MAX], text[3 * PATH_MAX], spec[3 * PATH_MAX], up[PATH_MAX], a[PATH_MAX], b[PATH_MAX];
        snprintf(up, sizeof up, "%s/up.sock", dir);
        snprintf(a, sizeof a, "%s/a.sock", dir);
        snprintf(b, sizeof b, "%s/b.sock", dir);
        snprintf(conf, sizeof conf, "%s/rel.conf", dir);
        snprintf(text, sizeof text, "[fromfile]\nlisten = unix:%s\nconnect = unix:%s\n", a, up);
        write_conf(conf, text);
        snprintf(spec, sizeof spec, "fromspec:unix:%s=unix:%s", b, up);

        /* The upstream: a listening socket whose backlog answers check's connects. */
        int srv = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", up);
        cr_assert_eq(bind(srv, (struct sockaddr *)&sa, sizeof sa), 0);
        cr_assert_eq(listen(srv, 64), 0);

        pid_t relay = fork();
        cr_assert_geq(relay, 0);
        if (relay == 0) {
                int null = open("/dev/null", O_WRONLY);
                dup2(null, STDERR_FILENO);
                if (chdir(dir) < 0)
                        _exit(126);
                execl(bin, bin, "relay", "-q", "-c", "rel.conf", "--forward", spec, (char *)NULL);
                _exit(127);
        }
        /* Until each forward accepts, not until its socket file exists: the relay binds before it
         * listens, and a connect in between is refused (seen in CI). One connection through each
         * forward at most (the upstream never accepts: its backlog is what answers check). */
        const char *listens[] = { a, b };
        for (int k = 0; k < 2; k++) {
                bool ok = false;
                for (int i = 0; i < 500 && !(ok = sf_sockpath_probe(listens[k]) == SF_PATH_LIVE_SOCKET); i++)
                        usleep(10000);
                cr_assert(ok, "the relay does not accept on %s", listens[k]);
        }

        char pid[32], log[8192];
        snprintf(pid, sizeof pid, "%ld", (long)relay);
        int rc = run_bin((char *const[]){ (char *)bin, "check", "--pid", pid, NULL }, log, sizeof log);
        cr_expect_eq(rc, 0, "check --pid %s exited %d: %s", pid, rc, log);
        cr_expect_not_null(strstr(log, "fromfile: OK"), "the -c forward: %s", log);
        cr_expect_not_null(strstr(log, "fromspec: OK"), "the -F forward: %s", log);

        rc = run_bin((char *const[]){ (char *)bin, "check", "--pid", pid, "-c", conf, NULL }, log, sizeof log);
        cr_expect_eq(rc, 64, "--pid with -c: %d: %s", rc, log);

        /* Closing the upstream resets the connections the relay holds to it: nothing to drain. */
        close(srv);
        kill(relay, SIGTERM);
        cr_assert_eq(waitpid(relay, NULL, 0), relay);

        snprintf(pid, sizeof pid, "%ld", (long)getpid());
        rc = run_bin((char *const[]){ (char *)bin, "check", "--pid", pid, NULL }, log, sizeof log);
        cr_expect_eq(rc, 64, "--pid of the test itself: %d: %s", rc, log);
        cr_expect_not_null(strstr(log, "not a sockferry relay or run"), "%s", log);
        rc = run_bin((char *const[]){ (char *)bin, "check", "--pid", "x1", NULL }, log, sizeof log);
        cr_expect_eq(rc, 64, "--pid x1: %d: %s", rc, log);
}
