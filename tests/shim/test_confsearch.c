/* The configuration file relay, check and stats use without -c and -F (shim/confsearch.h),
 * and `sockferry check` finding it. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* `sockferry check` with neither -c nor -F reads ~/.config/sockferry/sockferry.conf. */
Test(confsearch, check_reads_the_user_config) {
        const char *bin = getenv("SOCKFERRY");
        if (!bin || access(bin, X_OK) != 0)
                cr_skip_test("SOCKFERRY is not set to the built binary");
        char conf[PATH_MAX], text[PATH_MAX + 128];
        snprintf(conf, sizeof conf, "%s/.config/sockferry/sockferry.conf", dir);
        snprintf(text, sizeof text, "[found]\nlisten = unix:%s/found.sock\nconnect = unix:%s/nothing.sock\n", dir, dir);
        write_conf(conf, text);
        int out = memfd_create("out", MFD_CLOEXEC);
        cr_assert_geq(out, 0);
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                dup2(out, STDOUT_FILENO);
                dup2(out, STDERR_FILENO);
                execl(bin, bin, "check", (char *)NULL);
                _exit(127);
        }
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        char log[4096];
        ssize_t n = pread(out, log, sizeof log - 1, 0);
        log[n > 0 ? n : 0] = '\0';
        close(out);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d: %s", status, log);
        cr_assert_not_null(strstr(log, "found: FAIL"), "the forward of the user's config was not checked: %s", log);
}
