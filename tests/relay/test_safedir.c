/* The directory policy of listen paths and aliases (relay/listen/safedir.h): owners and modes, and
 * the walk from / through real directories, links and missing parts. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/conf.h"
#include "relay/listen/safedir.h"
#include "relay/listen/sockdir.h"
#include "relay/sys/platform.h"

#define NOBODY 65534

static char dir[64];
static struct sf_safedir_policy trust;

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(p);
}

static void setup(void) {
        snprintf(dir, sizeof dir, "/tmp/sf-safedir-test.XXXXXX");
        cr_assert_not_null(mkdtemp(dir));
        sf_safedir_policy_init(&trust, false, 0, 0);
}

static void teardown(void) {
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(safedir_policy);
TestSuite(safedir_open, .init = setup, .fini = teardown);

static struct stat dir_stat(uid_t uid, mode_t mode) {
        struct stat st = { .st_uid = uid, .st_mode = S_IFDIR | mode };
        return st;
}

Test(safedir_policy, root_and_trusted_owners_only) {
        struct sf_safedir_policy p;
        sf_safedir_policy_init(&p, true, 4242, 4242);
        struct stat st = dir_stat(0, 0755);
        cr_assert(sf_safedir_dir_ok(&p, &st));
        st = dir_stat(4242, 0755);
        cr_assert(sf_safedir_dir_ok(&p, &st), "the configured user's directory is trusted");
        st = dir_stat(geteuid(), 0700);
        cr_assert(sf_safedir_dir_ok(&p, &st), "the effective user's directory is trusted");
        st = dir_stat(NOBODY, 0755);
        cr_assert_not(sf_safedir_dir_ok(&p, &st), "another user's directory is not");
        cr_assert_not(sf_safedir_owner_ok(&p, NOBODY));
}

Test(safedir_policy, writable_by_others_only_when_sticky_and_root_owned) {
        struct sf_safedir_policy p;
        sf_safedir_policy_init(&p, true, 4242, 4242);
        struct stat st = dir_stat(0, 01777);
        cr_assert(sf_safedir_dir_ok(&p, &st), "/tmp itself is fine");
        st = dir_stat(0, 0777);
        cr_assert_not(sf_safedir_dir_ok(&p, &st), "world-writable without the sticky bit");
        st = dir_stat(0, 0775);
        cr_assert_not(sf_safedir_dir_ok(&p, &st), "group-writable");
        st = dir_stat(4242, 01777);
        cr_assert_not(sf_safedir_dir_ok(&p, &st), "sticky but not root's: its owner could still swap entries");
        st = dir_stat(NOBODY, 01777);
        cr_assert_not(sf_safedir_dir_ok(&p, &st));
        st.st_mode = S_IFREG | 0755;
        st.st_uid = 0;
        cr_assert_not(sf_safedir_dir_ok(&p, &st), "not a directory");
}

static const char *at(const char *rel) {
        static char buf[4][PATH_MAX];
        static int i;
        i = (i + 1) % 4;
        snprintf(buf[i], sizeof buf[i], "%s/%s", dir, rel);
        return buf[i];
}

static int open_dir(const char *path, bool create, const char **base) {
        return sf_safedir_open(&trust, path, create, "t", "test", base, NULL);
}

static void assert_same_dir(int fd, const char *path) {
        struct stat a, b;
        cr_assert_eq(fstat(fd, &a), 0);
        cr_assert_eq(stat(path, &b), 0, "%s: %s", path, strerror(errno));
        cr_assert(a.st_dev == b.st_dev && a.st_ino == b.st_ino, "the fd is not %s", path);
}

Test(safedir_open, pins_the_directory_and_names_the_base) {
        const char *base;
        int fd = open_dir(at("s.sock"), false, &base);
        cr_assert_geq(fd, 0, "%s", strerror(-fd));
        cr_assert_str_eq(base, "s.sock");
        assert_same_dir(fd, dir);
        close(fd);
}

Test(safedir_open, creates_missing_directories_0755) {
        const char *base;
        umask(022);
        int fd = open_dir(at("a/b/s.sock"), true, &base);
        cr_assert_geq(fd, 0, "%s", strerror(-fd));
        struct stat st;
        cr_assert_eq(stat(at("a/b"), &st), 0);
        cr_assert_eq(st.st_mode & 07777, 0755);
        cr_assert_eq(st.st_uid, geteuid());
        assert_same_dir(fd, at("a/b"));
        close(fd);
}

Test(safedir_open, missing_directory_without_create_is_enoent) {
        const char *base;
        cr_assert_eq(open_dir(at("none/s.sock"), false, &base), -ENOENT);
}

Test(safedir_open, refuses_a_world_writable_directory) {
        const char *base;
        cr_assert_eq(mkdir(at("w"), 0755), 0);
        cr_assert_eq(chmod(at("w"), 0777), 0);
        cr_assert_eq(open_dir(at("w/s.sock"), true, &base), -EPERM);
        cr_assert_eq(open_dir(at("w/deeper/s.sock"), true, &base), -EPERM, "a directory above counts too");
        struct stat st;
        cr_assert_neq(stat(at("w/deeper"), &st), 0, "nothing is created below an unsafe directory");
}

Test(safedir_open, accepts_a_sticky_root_directory) {
        if (geteuid() != 0)
                cr_skip_test("needs root: the directory must be root's");
        const char *base;
        cr_assert_eq(mkdir(at("t"), 0755), 0);
        cr_assert_eq(chmod(at("t"), 01777), 0);
        int fd = open_dir(at("t/s.sock"), false, &base);
        cr_assert_geq(fd, 0, "%s", strerror(-fd));
        close(fd);
}

Test(safedir_open, refuses_another_users_directory) {
        if (geteuid() != 0)
                cr_skip_test("needs root to give a directory to uid %d", NOBODY);
        const char *base;
        cr_assert_eq(mkdir(at("n"), 0755), 0);
        cr_assert_eq(chown(at("n"), NOBODY, NOBODY), 0);
        cr_assert_eq(open_dir(at("n/s.sock"), true, &base), -EPERM);
        struct sf_safedir_policy p;
        sf_safedir_policy_init(&p, true, NOBODY, NOBODY);
        int fd = sf_safedir_open(&p, at("n/s.sock"), true, "t", "test", &base, NULL);
        cr_assert_geq(fd, 0, "the configured user's own directory is trusted: %s", strerror(-fd));
        close(fd);
}

Test(safedir_open, follows_a_trusted_link) {
        const char *base;
        cr_assert_eq(mkdir(at("real"), 0755), 0);
        cr_assert_eq(symlink(at("real"), at("abs")), 0);
        cr_assert_eq(symlink("real/../real", at("rel")), 0);
        int fd = open_dir(at("abs/s.sock"), false, &base);
        cr_assert_geq(fd, 0, "%s", strerror(-fd));
        assert_same_dir(fd, at("real"));
        close(fd);
        fd = open_dir(at("rel/s.sock"), false, &base);
        cr_assert_geq(fd, 0, "%s", strerror(-fd));
        assert_same_dir(fd, at("real"));
        close(fd);
}

Test(safedir_open, refuses_a_link_another_user_owns) {
        if (geteuid() != 0)
                cr_skip_test("needs root to give a link to uid %d", NOBODY);
        const char *base;
        cr_assert_eq(mkdir(at("real"), 0755), 0);
        cr_assert_eq(symlink(at("real"), at("l")), 0);
        cr_assert_eq(lchown(at("l"), NOBODY, NOBODY), 0);
        cr_assert_eq(open_dir(at("l/s.sock"), true, &base), -EPERM);
}

Test(safedir_open, refuses_a_link_into_an_unsafe_directory) {
        const char *base;
        cr_assert_eq(mkdir(at("w"), 0777), 0);
        cr_assert_eq(chmod(at("w"), 0777), 0);
        cr_assert_eq(symlink(at("w"), at("l")), 0);
        cr_assert_eq(open_dir(at("l/s.sock"), true, &base), -EPERM);
}

Test(safedir_open, stops_a_link_loop) {
        const char *base;
        cr_assert_eq(symlink(at("b"), at("a")), 0);
        cr_assert_eq(symlink(at("a"), at("b")), 0);
        cr_assert_eq(open_dir(at("a/s.sock"), true, &base), -ELOOP);
}

Test(safedir_open, refuses_a_relative_path) {
        const char *base;
        cr_assert_eq(open_dir("relative/s.sock", true, &base), -EINVAL);
        cr_assert_eq(open_dir("/tmp/", true, &base), -EINVAL);
}

Test(safedir_open, enter_and_leave_restore_the_working_directory) {
        char before[PATH_MAX], inside[PATH_MAX], after[PATH_MAX];
        const char *base;
        cr_assert_not_null(getcwd(before, sizeof before));
        int fd = open_dir(at("s.sock"), false, &base);
        cr_assert_geq(fd, 0);
        int saved = sf_safedir_enter(fd);
        cr_assert_geq(saved, 0);
        cr_assert_not_null(getcwd(inside, sizeof inside));
        cr_assert_str_eq(inside, dir);
        sf_safedir_leave(saved);
        cr_assert_not_null(getcwd(after, sizeof after));
        cr_assert_str_eq(after, before);
        close(fd);
}

/* Issue 34: a directory of the user a socket is for is a place for that socket (gpg-agent's
 * ~/.gnupg for a root relay), and for no other user's socket. */
#define APP 1000

static void mkdir_owned(const char *path, mode_t mode, uid_t uid) {
        cr_assert_eq(mkdir(path, 0700), 0, "%s: %s", path, strerror(errno));
        cr_assert_eq(chown(path, uid, uid), 0);
        cr_assert_eq(chmod(path, mode), 0);
}

static int open_for(uid_t uid, const char *path, bool create, struct sf_safedir_found *found) {
        struct sf_safedir_policy p;
        const char *base;
        sf_safedir_policy_init(&p, true, uid, uid);
        return sf_safedir_open(&p, path, create, "t", "test", &base, found);
}

Test(safedir_open, the_sockets_users_directory_is_a_place_for_its_socket_only) {
        if (geteuid() != 0)
                cr_skip_test("needs root to give directories to uid %d", APP);
        mkdir_owned(at("home"), 0755, APP);
        mkdir_owned(at("home/.gnupg"), 0700, APP);
        struct sf_safedir_found found;
        int fd = open_for(APP, at("home/.gnupg/S.gpg-agent"), false, &found);
        cr_assert_geq(fd, 0, "%s", strerror(-fd));
        cr_assert(found.users, "the walk says the place is the user's, so the socket is made as that user");
        close(fd);
        cr_assert_eq(open_for(APP + 1, at("home/.gnupg/S.gpg-agent"), false, NULL), -EPERM, "another user's socket");
        const char *base;
        cr_assert_eq(open_dir(at("home/.gnupg/S.gpg-agent"), false, &base), -EPERM,
                     "a socket for nobody in particular");
        cr_assert_eq(chmod(at("home/.gnupg"), 0770), 0);
        cr_assert_eq(open_for(APP, at("home/.gnupg/S.gpg-agent"), false, NULL), -EPERM, "group-writable");
        cr_assert_eq(chmod(at("home/.gnupg"), 0700), 0);
        cr_assert_eq(chown(at("home"), APP + 1, APP + 1), 0);
        cr_assert_eq(open_for(APP, at("home/.gnupg/S.gpg-agent"), false, NULL), -EPERM, "an ancestor of another user");
}

Test(safedir_open, a_root_directory_is_not_the_users) {
        struct sf_safedir_found found;
        int fd = open_for(APP, at("s.sock"), false, &found);
        cr_assert_geq(fd, 0, "%s", strerror(-fd));
        cr_assert_not(found.users, "root's place: the socket is made by the relay and given to the user");
        close(fd);
}

Test(safedir_open, missing_directories_in_the_users_directory_are_made_as_that_user) {
        if (geteuid() != 0)
                cr_skip_test("needs root to act as uid %d", APP);
        umask(022);
        mkdir_owned(at("home"), 0755, APP);
        struct sf_safedir_found found;
        int fd = open_for(APP, at("home/.gnupg/sub/S"), true, &found);
        cr_assert_geq(fd, 0, "%s", strerror(-fd));
        close(fd);
        struct stat st;
        cr_assert_eq(stat(at("home/.gnupg"), &st), 0);
        cr_assert(st.st_uid == APP && st.st_gid == APP && (st.st_mode & 07777) == 0755, "uid %u gid %u mode %04o",
                  (unsigned)st.st_uid, (unsigned)st.st_gid, (unsigned)(st.st_mode & 07777));
        cr_assert_eq(stat(at("home/.gnupg/sub"), &st), 0);
        cr_assert_eq(st.st_uid, APP);
        cr_assert_eq(geteuid(), 0, "root again afterwards");
        int probe = open(at("root-made"), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        cr_assert_geq(probe, 0);
        cr_assert_eq(fstat(probe, &st), 0);
        cr_assert_eq(st.st_uid, 0, "files are root's again after the walk");
        close(probe);
}

/* A link of the user's decides where the path leads: what is made there is made as the user,
 * who may not make it in root's directory (the relay then fails; it never makes it as root). */
Test(safedir_open, a_link_of_the_users_puts_the_rest_in_its_hands) {
        if (geteuid() != 0)
                cr_skip_test("needs root to give a link to uid %d", APP);
        cr_assert_eq(mkdir(at("real"), 0755), 0);
        cr_assert_eq(symlink(at("real"), at("l")), 0);
        cr_assert_eq(lchown(at("l"), APP, APP), 0);
        struct sf_safedir_found found;
        int fd = open_for(APP, at("l/s.sock"), false, &found);
        cr_assert_geq(fd, 0, "%s", strerror(-fd));
        cr_assert(found.users);
        close(fd);
        cr_assert_eq(open_for(APP, at("l/made/s.sock"), true, NULL), -EACCES, "uid %d may not make it in root's", APP);
        struct stat st;
        cr_assert_neq(stat(at("real/made"), &st), 0, "root made nothing where the user's link points");
}

Test(safedir_open, acting_as_the_user_makes_its_files_and_stops) {
        if (geteuid() != 0)
                cr_skip_test("needs root to act as uid %d", APP);
        struct sf_safedir_policy p;
        sf_safedir_policy_init(&p, true, APP, APP + 5);
        cr_assert_eq(chmod(dir, 0755), 0);
        mkdir_owned(at("home"), 0700, APP);
        cr_assert_eq(sf_safedir_as_user(&p, "t", "test"), 0);
        int fd = open(at("home/mine"), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        int denied = mkdir(at("root-only/"), 0755) == 0 ? 0 : errno;
        sf_fs_user_leave();
        cr_assert_eq(denied, EACCES, "uid %d got root's rights to a root directory", APP);
        cr_assert_geq(fd, 0);
        struct stat st;
        cr_assert_eq(fstat(fd, &st), 0);
        cr_assert(st.st_uid == APP && st.st_gid == APP + 5, "made as %u:%u", (unsigned)st.st_uid, (unsigned)st.st_gid);
        close(fd);
        cr_assert_eq(mkdir(at("root-only"), 0755), 0, "root's rights are back");
}

/* The default socket directory of a user that is not root (relay/listen/sockdir.h). */
#define LOSER 4243
/* A test's own user, whose /tmp/sockferry-UID no other test's teardown removes: criterion
 * runs the tests of a suite at once. */
#define LOSER2 4244

static char xdg[64];

static void sockdir_setup(void) {
        setup();
        unsetenv("XDG_RUNTIME_DIR");
        xdg[0] = '\0';
}

static void sockdir_teardown(void) {
        if (geteuid() != 0 && seteuid(0) < 0)
                return;
        char tmp[64];
        snprintf(tmp, sizeof tmp, "/tmp/sockferry-%d", LOSER);
        rmdir(tmp);
        teardown();
}

TestSuite(sockdir, .init = sockdir_setup, .fini = sockdir_teardown);

/* An XDG_RUNTIME_DIR of this user's: dir/run, owned by uid, mode. */
static void xdg_make(uid_t uid, mode_t mode) {
        snprintf(xdg, sizeof xdg, "%s/run", dir);
        mkdir_owned(xdg, mode, uid);
        setenv("XDG_RUNTIME_DIR", xdg, 1);
}

Test(sockdir, own_is_xdg_runtime_dir_when_it_is_the_users_0700) {
        char own[PATH_MAX], why[PATH_MAX + 128], want[PATH_MAX];
        xdg_make(geteuid(), 0700);
        sf_sockdir_own(own, sizeof own, why, sizeof why);
        snprintf(want, sizeof want, "%s/sockferry", xdg);
        cr_assert_str_eq(own, want);
        cr_assert_str_eq(why, "");
        cr_assert_eq(chmod(xdg, 0755), 0);
        sf_sockdir_own(own, sizeof own, why, sizeof why);
        snprintf(want, sizeof want, "/tmp/sockferry-%u", (unsigned)geteuid());
        cr_assert_str_eq(own, want);
        cr_assert_not_null(strstr(why, "is not a directory of uid"), "%s", why);
        unsetenv("XDG_RUNTIME_DIR");
        sf_sockdir_own(own, sizeof own, why, sizeof why);
        cr_assert_str_eq(own, want);
        cr_assert_str_eq(why, "XDG_RUNTIME_DIR is not set");
}

static void conf_with(struct sf_conf *c, const char *const *specs) {
        sf_conf_init(c);
        for (; *specs; specs++)
                cr_assert_eq(sf_conf_add_spec(c, *specs), 0, "%s", *specs);
}

Test(sockdir, a_user_that_cannot_make_run_sockferry_gets_its_own) {
        if (geteuid() != 0)
                cr_skip_test("needs root to become uid %d", LOSER);
        struct sf_conf c;
        conf_with(&c, (const char *const[]){ "a:unix:/run/sockferry/a.sock=tcp:127.0.0.1:9",
                                             "b:unix:/run/sockferry/sub/b.sock=tcp:127.0.0.1:9",
                                             "elsewhere:unix:/var/tmp/x.sock=tcp:127.0.0.1:9", NULL });
        cr_assert_eq(sf_sockdir_apply(&c, SF_SOCKDIR_BIND), 0);
        cr_assert_str_eq(c.forwards[0].listen.path, "/run/sockferry/a.sock", "root makes /run/sockferry");
        cr_assert_eq(chmod(dir, 0755), 0);
        xdg_make(LOSER, 0700);
        struct sf_conf tested;
        conf_with(&tested, (const char *const[]){ "a:unix:/run/sockferry/a.sock=tcp:127.0.0.1:9", NULL });
        cr_assert_eq(seteuid(LOSER), 0);
        cr_assert_eq(sf_sockdir_apply(&tested, SF_SOCKDIR_TEST), 0);
        char want[PATH_MAX];
        snprintf(want, sizeof want, "%s/sockferry", xdg);
        struct stat st;
        cr_assert_neq(stat(want, &st), 0, "the test mode made the directory");
        cr_assert_neq(strcmp(tested.forwards[0].listen.path, "/run/sockferry/a.sock"), 0,
                      "the test mode says the place");
        sf_conf_free(&tested);
        cr_assert_eq(sf_sockdir_apply(&c, SF_SOCKDIR_BIND), 0);
        cr_assert_eq(stat(want, &st), 0);
        cr_assert(st.st_uid == LOSER && (st.st_mode & 07777) == 0700, "uid %u mode %04o", (unsigned)st.st_uid,
                  (unsigned)(st.st_mode & 07777));
        snprintf(want, sizeof want, "%s/sockferry/a.sock", xdg);
        cr_assert_str_eq(c.forwards[0].listen.path, want);
        snprintf(want, sizeof want, "unix:%s/sockferry/a.sock", xdg);
        cr_assert_str_eq(c.forwards[0].listen.text, want);
        snprintf(want, sizeof want, "%s/sockferry/sub/b.sock", xdg);
        cr_assert_str_eq(c.forwards[1].listen.path, want);
        cr_assert_str_eq(c.forwards[2].listen.path, "/var/tmp/x.sock", "a path of its own is left alone");
        sf_conf_free(&c);
}

Test(sockdir, an_own_directory_someone_else_made_is_refused) {
        if (geteuid() != 0)
                cr_skip_test("needs root to become uid %d", LOSER2);
        char tmp[64];
        snprintf(tmp, sizeof tmp, "/tmp/sockferry-%d", LOSER2);
        rmdir(tmp);
        mkdir_owned(tmp, 0755, NOBODY);
        struct sf_conf c;
        conf_with(&c, (const char *const[]){ "a:unix:/run/sockferry/a.sock=tcp:127.0.0.1:9", NULL });
        cr_assert_eq(seteuid(LOSER2), 0);
        cr_assert_eq(sf_sockdir_apply(&c, SF_SOCKDIR_BIND), -EPERM);
        cr_assert_str_eq(c.forwards[0].listen.path, "/run/sockferry/a.sock");
        cr_assert_eq(seteuid(0), 0);
        cr_assert_eq(rmdir(tmp), 0);
        /* Its own, made 0700 on the spot. */
        cr_assert_eq(seteuid(LOSER2), 0);
        cr_assert_eq(sf_sockdir_apply(&c, SF_SOCKDIR_BIND), 0);
        snprintf(tmp, sizeof tmp, "/tmp/sockferry-%d/a.sock", LOSER2);
        cr_assert_str_eq(c.forwards[0].listen.path, tmp);
        sf_conf_free(&c);
        cr_assert_eq(seteuid(0), 0);
        snprintf(tmp, sizeof tmp, "/tmp/sockferry-%d", LOSER2);
        cr_assert_eq(rmdir(tmp), 0);
}
