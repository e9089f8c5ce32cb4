#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "relay/link/token.h"

#define HEX32 "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

static char dir[64];
static struct sf_conf conf; /* no `user`: root and the effective user may own a token */
static char captured[8192];
static int saved_fd = -1, capture_fd = -1;

static void setup(void) {
        snprintf(dir, sizeof dir, "/tmp/sf-auth-test.XXXXXX");
        cr_assert_not_null(mkdtemp(dir));
        cr_assert_eq(sf_hs_init(), 0);
        sf_conf_init(&conf);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(p);
}

static void teardown(void) {
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(token, .init = setup, .fini = teardown);
TestSuite(keygen, .init = setup, .fini = teardown);

static const char *path_of(const char *name) {
        static char buf[2][PATH_MAX];
        static int which;
        which ^= 1;
        snprintf(buf[which], sizeof buf[which], "%s/%s", dir, name);
        return buf[which];
}

static const char *write_file(const char *name, const char *content, mode_t mode) {
        const char *p = path_of(name);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        cr_assert_geq(fd, 0);
        cr_assert_eq(write(fd, content, strlen(content)), (ssize_t)strlen(content));
        cr_assert_eq(fchmod(fd, mode), 0);
        close(fd);
        return p;
}

/* A directory name in the test's directory, owned by uid:gid with mode (chmod: mkdir's mode
 * goes through the umask and leaves out the sticky bit). Returns its path. */
static const char *make_dir(const char *name, mode_t mode, uid_t uid, gid_t gid) {
        const char *d = path_of(name);
        cr_assert_eq(mkdir(d, 0700), 0, "%s: %s", d, strerror(errno));
        cr_assert_eq(chown(d, uid, gid), 0);
        cr_assert_eq(chmod(d, mode), 0);
        return d;
}

static size_t read_file(const char *p, char *buf, size_t cap) {
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        cr_assert_geq(fd, 0, "open %s", p);
        ssize_t n = read(fd, buf, cap - 1);
        cr_assert_geq(n, 0);
        buf[n] = '\0';
        close(fd);
        return (size_t)n;
}

/* Sends fd (2: the log) to a memfd until capture_end, which leaves the text in captured. */
static void capture_begin(int fd) {
        capture_fd = memfd_create("capture", MFD_CLOEXEC);
        cr_assert_geq(capture_fd, 0);
        saved_fd = dup(fd);
        dup2(capture_fd, fd);
}

static const char *capture_end(int fd) {
        dup2(saved_fd, fd);
        close(saved_fd);
        ssize_t n = pread(capture_fd, captured, sizeof captured - 1, 0);
        captured[n > 0 ? n : 0] = '\0';
        close(capture_fd);
        return captured;
}

/* Loads path expecting err and a log line containing every string of want (NULL-ended);
 * also checks the key is wiped and the log never quotes the token. */
static void expect_load_error(const char *p, int err, const char *const *want) {
        struct sf_hs_key key;
        memset(&key, 0xff, sizeof key);
        capture_begin(STDERR_FILENO);
        int r = sf_token_load(p, &conf, &key);
        const char *log = capture_end(STDERR_FILENO);
        cr_assert_eq(r, err, "sf_token_load(%s) = %d, expected %d; log: %s", p, r, err, log);
        for (; *want; want++)
                cr_assert_not_null(strstr(log, *want), "log lacks \"%s\": %s", *want, log);
        cr_assert_null(strstr(log, "0405060708"), "the log quotes the token: %s", log);
        cr_assert_eq(key.len, 0);
        for (size_t i = 0; i < sizeof key.bytes; i++)
                cr_assert_eq(key.bytes[i], 0, "key byte %zu not wiped", i);
}

static void expect_load_ok(const char *p, size_t len) {
        struct sf_hs_key key;
        cr_assert_eq(sf_token_load(p, &conf, &key), 0, "sf_token_load(%s)", p);
        cr_assert_eq(key.len, len);
        for (size_t i = 0; i < len; i++)
                cr_assert_eq(key.bytes[i], (uint8_t)i);
}

#define WANT(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* Refused (-EPERM) with a log line holding the printf-formatted text. */
static void expect_refused(const char *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void expect_refused(const char *p, const char *fmt, ...) {
        char want[PATH_MAX + 128];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(want, sizeof want, fmt, ap);
        va_end(ap);
        expect_load_error(p, -EPERM, WANT(want));
}

Test(token, mode_0600_ok) {
        expect_load_ok(write_file("t", HEX32 "\n", 0600), 32);
}

Test(token, mode_0400_and_0700_ok) {
        expect_load_ok(write_file("a", HEX32 "\n", 0400), 32);
        expect_load_ok(write_file("b", HEX32 "\n", 0700), 32);
}

Test(token, whitespace_and_case) {
        expect_load_ok(write_file("t", HEX32, 0600), 32);
        expect_load_ok(write_file("u", "  \n\t" HEX32 "\r\n\n ", 0600), 32);
        expect_load_ok(write_file("v", "000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F\n", 0600), 32);
}

Test(token, longest_key) {
        char hex[2 * SF_HS_KEY_MAX + 2];
        for (int i = 0; i < SF_HS_KEY_MAX; i++)
                snprintf(hex + 2 * i, 3, "%02x", i);
        strcat(hex, "\n");
        expect_load_ok(write_file("t", hex, 0600), SF_HS_KEY_MAX);
}

Test(token, too_long_key) {
        char hex[2 * (SF_HS_KEY_MAX + 1) + 2];
        for (int i = 0; i <= SF_HS_KEY_MAX; i++)
                snprintf(hex + 2 * i, 3, "%02x", i);
        const char *p = write_file("t", hex, 0600);
        expect_load_error(p, -EINVAL, WANT("holds 129 bytes of key material, at most 128 are allowed"));
}

Test(token, mode_0644_refused) {
        const char *p = write_file("t", HEX32 "\n", 0644);
        char want[PATH_MAX + 128];
        snprintf(want, sizeof want, "token file %s: mode 0644 lets other users read the token; run chmod 600 %s", p, p);
        expect_load_error(p, -EPERM, WANT(want));
}

Test(token, mode_0640_refused) {
        const char *p = write_file("t", HEX32 "\n", 0640);
        expect_load_error(p, -EPERM, WANT("mode 0640 lets other users read the token", "chmod 600"));
}

Test(token, mode_0604_refused) {
        const char *p = write_file("t", HEX32 "\n", 0604);
        expect_load_error(p, -EPERM, WANT("mode 0604 lets other users read the token"));
}

Test(token, writable_by_others_refused) {
        expect_load_error(write_file("a", HEX32 "\n", 0620), -EPERM, WANT("mode 0620 lets other users change the token"));
        expect_load_error(write_file("b", HEX32 "\n", 0602), -EPERM, WANT("mode 0602 lets other users change the token"));
}

Test(token, empty) {
        const char *p = write_file("t", "", 0600);
        char want[PATH_MAX + 128];
        snprintf(want, sizeof want, "token file %s is empty; create one with sockferry keygen -o %s", p, p);
        expect_load_error(p, -EINVAL, WANT(want));
        expect_load_error(write_file("ws", " \n\n\t", 0600), -EINVAL, WANT("is empty; create one with sockferry keygen -o"));
}

Test(token, short) {
        const char *p = write_file("t", "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e\n", 0600);
        char want[PATH_MAX + 160];
        snprintf(want, sizeof want,
                 "token file %s holds 31 bytes of key material, at least 32 are needed; "
                 "create one with sockferry keygen -o %s", p, p);
        expect_load_error(p, -EINVAL, WANT(want));
        expect_load_error(write_file("one", "ab", 0600), -EINVAL, WANT("holds 1 bytes of key material, at least 32"));
}

Test(token, not_hex) {
        const char *p = write_file("t", "000102030405060708090a0b0c0d0e0f1011121314151617181g1a1b1c1d1e1f\n", 0600);
        expect_load_error(p, -EINVAL, WANT("is not a hex token (byte 52 is not a hex digit)", "sockferry keygen -o"));
        expect_load_error(write_file("sp", "0001020304050607 08090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", 0600),
                          -EINVAL, WANT("is not a hex token (byte 17"));
        expect_load_error(write_file("b64", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", 0600), -EINVAL,
                          WANT("is not a hex token"));
}

Test(token, odd_number_of_digits) {
        expect_load_error(write_file("t", HEX32 "0\n", 0600), -EINVAL, WANT("odd number of hex digits (65)"));
}

Test(token, directory) {
        const char *p = path_of("d");
        cr_assert_eq(mkdir(p, 0700), 0);
        expect_load_error(p, -EISDIR, WANT("is a directory, not a file", "bind mount"));
}

Test(token, fifo_does_not_block) {
        const char *p = path_of("f");
        cr_assert_eq(mkfifo(p, 0600), 0);
        expect_load_error(p, -EINVAL, WANT("is a FIFO, not a regular file"));
}

Test(token, missing) {
        const char *p = path_of("nope");
        char want[PATH_MAX + 160];
        snprintf(want, sizeof want,
                 "cannot open token file %s: No such file or directory; create one with sockferry keygen -o %s", p, p);
        expect_load_error(p, -ENOENT, WANT(want));
}

Test(token, too_large) {
        char big[2001];
        memset(big, '0', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        expect_load_error(write_file("t", big, 0600), -EFBIG, WANT("2000 bytes, too large for a token"));
}

/* The limit is exact: a token padded to 1024 bytes loads, one byte more is refused. */
Test(token, size_limit_is_1024_bytes) {
        char padded[1026];
        memset(padded, '\n', sizeof padded - 1);
        memcpy(padded, HEX32, strlen(HEX32));
        padded[1024] = '\0';
        expect_load_ok(write_file("t", padded, 0600), 32);
        padded[1024] = '\n';
        padded[1025] = '\0';
        expect_load_error(write_file("u", padded, 0600), -EFBIG,
                          WANT("1025 bytes, too large for a token (at most 1024)"));
}

Test(token, symlink_to_good_file) {
        /* The Docker/Kubernetes secrets layout: the path is a link, the target is checked. */
        write_file("..data", HEX32 "\n", 0600);
        const char *link = path_of("token");
        cr_assert_eq(symlink("..data", link), 0);
        expect_load_ok(link, 32);
}

Test(token, symlink_to_open_file) {
        write_file("target", HEX32 "\n", 0644);
        const char *link = path_of("token");
        cr_assert_eq(symlink("target", link), 0);
        expect_load_error(link, -EPERM, WANT("mode 0644 lets other users read the token"));
}

Test(token, dangling_symlink) {
        const char *link = path_of("token");
        cr_assert_eq(symlink("gone", link), 0);
        expect_load_error(link, -ENOENT, WANT("No such file or directory"));
}

/* A Kubernetes secret or projected service-account volume as the kubelet writes it: the
 * volume's root (1777, root's), a timestamped directory holding the files, ..data a link to it,
 * and each name a link through ..data. Root's links in root's directories: followed. */
Test(token, kubernetes_secret_volume_layout) {
        char sa[PATH_MAX], stamp[PATH_MAX + 64], link[PATH_MAX + 16];
        snprintf(sa, sizeof sa, "%s", path_of("serviceaccount"));
        cr_assert_eq(mkdir(sa, 0700), 0);
        cr_assert_eq(chmod(sa, 01777), 0);
        snprintf(stamp, sizeof stamp, "%s/..2024_01_01_00_00_00.123456789", sa);
        cr_assert_eq(mkdir(stamp, 0755), 0);
        write_file("serviceaccount/..2024_01_01_00_00_00.123456789/token", HEX32 "\n", 0400);
        snprintf(link, sizeof link, "%s/..data", sa);
        cr_assert_eq(symlink("..2024_01_01_00_00_00.123456789", link), 0);
        snprintf(link, sizeof link, "%s/token", sa);
        cr_assert_eq(symlink("..data/token", link), 0);
        expect_load_ok(link, 32);
}

/* Whoever owns a directory on the path (or can write it) could swap the token, or put a link
 * to another trust domain's token there: refused, whatever the file itself looks like. */
Test(token, a_directory_another_user_owns_is_refused) {
        if (geteuid() != 0)
                cr_skip_test("needs root to give a directory to uid 65534");
        const char *d = path_of("theirs");
        cr_assert_eq(mkdir(d, 0755), 0);
        cr_assert_eq(chown(d, 65534, 65534), 0);
        const char *p = write_file("theirs/token", HEX32 "\n", 0600);
        char want[PATH_MAX + 64];
        snprintf(want, sizeof want, "the directory %s is owned by ", d);
        expect_load_error(p, -EPERM, WANT("token file ", want, "uid 65534", "chown root", "/etc/sockferry"));
}

Test(token, a_world_writable_directory_is_refused) {
        const char *d = path_of("open");
        cr_assert_eq(mkdir(d, 0700), 0);
        cr_assert_eq(chmod(d, 0777), 0);
        const char *p = write_file("open/token", HEX32 "\n", 0600);
        expect_load_error(p, -EPERM, WANT("with mode 0777", "chmod go-w"));
}

Test(token, a_link_another_user_owns_is_refused) {
        if (geteuid() != 0)
                cr_skip_test("needs root to give a link to uid 65534");
        write_file("root-token", HEX32 "\n", 0600);
        const char *link = path_of("token");
        cr_assert_eq(symlink("root-token", link), 0);
        cr_assert_eq(lchown(link, 65534, 65534), 0);
        char want[PATH_MAX + 64];
        snprintf(want, sizeof want, "the symbolic link %s is owned by ", link);
        expect_load_error(link, -EPERM, WANT(want, "chown -h root"));
}

static void expect_token_file(const char *p, char out[66]) {
        struct stat st;
        cr_assert_eq(stat(p, &st), 0);
        cr_assert_eq(st.st_mode & 07777, 0600, "mode %04o", (unsigned)(st.st_mode & 07777));
        cr_assert_eq(read_file(p, out, 66 + 1), 65);
        cr_assert_eq(out[64], '\n');
        for (int i = 0; i < 64; i++)
                cr_assert(strchr("0123456789abcdef", out[i]) != NULL, "byte %d is %c", i, out[i]);
        struct sf_hs_key key;
        cr_assert_eq(sf_token_load(p, &conf, &key), 0);
        cr_assert_eq(key.len, 32);
}

Test(keygen, writes_64_hex_and_newline_mode_0600_under_umask_000) {
        char a[67], b[67];
        umask(0);
        cr_assert_eq(sf_token_generate(path_of("a"), false), 0);
        expect_token_file(path_of("a"), a);
        cr_assert_eq(sf_token_generate(path_of("b"), false), 0);
        expect_token_file(path_of("b"), b);
        cr_assert_neq(strcmp(a, b), 0, "two tokens are equal");
}

Test(keygen, refuses_to_overwrite) {
        const char *p = write_file("t", "precious\n", 0600);
        char want[PATH_MAX + 64], buf[64];
        snprintf(want, sizeof want, "%s exists; use --force to replace it", p);
        capture_begin(STDERR_FILENO);
        int r = sf_token_generate(p, false);
        const char *log = capture_end(STDERR_FILENO);
        cr_assert_eq(r, -EEXIST);
        cr_assert_not_null(strstr(log, want), "log: %s", log);
        read_file(p, buf, sizeof buf);
        cr_assert_str_eq(buf, "precious\n");
}

Test(keygen, force_replaces_and_narrows_mode) {
        char out[67];
        const char *p = write_file("t", "old old old old\n", 0644);
        umask(0);
        cr_assert_eq(sf_token_generate(p, true), 0);
        expect_token_file(p, out);
}

Test(keygen, force_never_writes_through_a_symlink) {
        char buf[64];
        write_file("victim", "keep me\n", 0644);
        const char *link = path_of("token");
        cr_assert_eq(symlink("victim", link), 0);
        capture_begin(STDERR_FILENO);
        int r = sf_token_generate(link, true);
        const char *log = capture_end(STDERR_FILENO);
        cr_assert_eq(r, -ELOOP);
        cr_assert_not_null(strstr(log, "is a symbolic link; refusing to write a token through it"), "log: %s", log);
        read_file(path_of("victim"), buf, sizeof buf);
        cr_assert_str_eq(buf, "keep me\n");
}

Test(keygen, dangling_symlink_is_not_followed) {
        const char *link = path_of("token");
        struct stat st;
        cr_assert_eq(symlink("target", link), 0);
        cr_assert_eq(sf_token_generate(link, false), -EEXIST);
        cr_assert_eq(lstat(path_of("target"), &st), -1, "the link target was created");
}

Test(keygen, force_refuses_a_fifo_or_directory) {
        const char *f = path_of("fifo");
        cr_assert_eq(mkfifo(f, 0600), 0);
        capture_begin(STDERR_FILENO);
        int r = sf_token_generate(f, true);
        const char *log = capture_end(STDERR_FILENO);
        cr_assert_lt(r, 0);
        cr_assert(strstr(log, "is a FIFO") || strstr(log, "cannot replace token file"), "log: %s", log);

        const char *d = path_of("dir");
        cr_assert_eq(mkdir(d, 0700), 0);
        cr_assert_eq(sf_token_generate(d, true), -EISDIR);
}

Test(keygen, creates_missing_directories_0700) {
        char out[67];
        struct stat st;
        umask(022);
        const char *p = path_of("etc/sockferry/token");
        cr_assert_eq(sf_token_generate(p, false), 0);
        expect_token_file(p, out);
        cr_assert_eq(stat(path_of("etc/sockferry"), &st), 0);
        cr_assert_eq(st.st_mode & 07777, 0700, "mode %04o", (unsigned)(st.st_mode & 07777));
}

Test(keygen, says_which_directory_is_missing) {
        char want[PATH_MAX + 128];
        write_file("file", "x", 0600);
        const char *p = path_of("file/sub/t");
        snprintf(want, sizeof want, "the directory %s is missing and cannot be created", path_of("file/sub"));
        capture_begin(STDERR_FILENO);
        int r = sf_token_generate(p, false);
        const char *log = capture_end(STDERR_FILENO);
        cr_assert_eq(r, -ENOTDIR);
        cr_assert_not_null(strstr(log, want), "log: %s", log);
}

/* Issue 15: --force rewrote the existing inode, so another user who owned the file, or kept
 * it open, read the new token. The replacement is a new file: new inode, our owner. */
Test(keygen, force_writes_a_new_file_never_the_old_inode) {
        char out[67], old[64];
        const char *p = write_file("t", "old token\n", 0600);
        if (geteuid() == 0)
                cr_assert_eq(chown(p, 65534, 65534), 0);
        int reader = open(p, O_RDONLY | O_CLOEXEC);
        cr_assert_geq(reader, 0);
        struct stat before, after;
        cr_assert_eq(fstat(reader, &before), 0);
        cr_assert_eq(sf_token_generate(p, true), 0);
        expect_token_file(p, out);
        cr_assert_eq(stat(p, &after), 0);
        cr_assert_neq(after.st_ino, before.st_ino, "the token was written into the old inode");
        cr_assert_eq(after.st_uid, geteuid(), "the new token is not the writer's own");
        ssize_t n = pread(reader, old, sizeof old - 1, 0);
        cr_assert_geq(n, 0);
        old[n] = '\0';
        cr_assert_str_eq(old, "old token\n", "a reader of the old file sees the new token");
        close(reader);
        DIR *d = opendir(dir);
        struct dirent *e;
        while ((e = readdir(d)))
                cr_assert(e->d_name[0] != '.' || !strstr(e->d_name, ".t."), "temporary file left: %s", e->d_name);
        closedir(d);
}

/* Issue 34: a token is judged by who can change it, not by who owns it. A 0600 file that only
 * its owner can change is taken whoever that is: engines show a Mac user's files as uid 501
 * (virtiofs, 9p, sshfs). Issue 15's rule (root, the loading user or `user` only) refused them. */
Test(token, owned_by_another_user_is_taken_when_only_it_can_change_it) {
        if (geteuid() != 0)
                cr_skip_test("needs root to give a token to uid 501");
        const char *p = write_file("t", HEX32 "\n", 0600);
        cr_assert_eq(chown(p, 501, 20), 0);
        expect_load_ok(p, 32);
        cr_assert_eq(chmod(p, 0640), 0);
        expect_load_error(p, -EPERM, WANT("lets other users read the token", "chmod 600"));
        cr_assert_eq(chmod(p, 0620), 0);
        expect_load_error(p, -EPERM, WANT("lets other users change the token"));
}

/* The Mac user's home through virtiofs: the directories and the token are uid 501's. */
Test(token, a_path_of_the_tokens_owner_is_taken) {
        if (geteuid() != 0)
                cr_skip_test("needs root to give files to uid 501");
        char home[PATH_MAX], sub[PATH_MAX];
        snprintf(home, sizeof home, "%s", make_dir("Users-me", 0755, 501, 20));
        snprintf(sub, sizeof sub, "%s", make_dir("Users-me/.sockferry", 0700, 501, 20));
        const char *p = write_file("Users-me/.sockferry/token", HEX32 "\n", 0600);
        cr_assert_eq(chown(p, 501, 20), 0);
        expect_load_ok(p, 32);
        /* uid 501's link there, to uid 501's file: the same owner decides both. */
        const char *link = path_of("Users-me/token");
        cr_assert_eq(symlink(".sockferry/token", link), 0);
        cr_assert_eq(lchown(link, 501, 20), 0);
        expect_load_ok(link, 32);
        /* Another owner's file in uid 501's directory: uid 501 could have put it there. */
        cr_assert_eq(chown(p, 502, 20), 0);
        expect_refused(p, "the directory %s is owned by uid 501, who could put another file in its place, and the "
                          "token there is uid 502's; refusing to use it. Keep the token where only its owner, root "
                          "or the relay's user can change the path: run chown root %s", home, home);
        /* Two other owners on the way: refused at the second. */
        cr_assert_eq(chown(p, 501, 20), 0);
        cr_assert_eq(chown(sub, 502, 20), 0);
        expect_refused(p, "the directory %s is owned by uid 502", sub);
}

/* Where anyone may create names (a sticky directory), the name's owner made it: another user's
 * token there, another user's directory there, are refused even though they are that user's. */
Test(token, a_name_anyone_could_have_made_is_refused) {
        if (geteuid() != 0)
                cr_skip_test("needs root to give files to uid 65534");
        make_dir("tmp", 01777, 0, 0);
        const char *p = write_file("tmp/token", HEX32 "\n", 0600);
        expect_load_ok(p, 32);
        cr_assert_eq(chown(p, 65534, 65534), 0);
        expect_refused(p, "token file %s is owned by nobody (uid 65534), in a directory where anyone may create "
                          "files, so that user may have put it there; refusing to use it. Run chown root %s", p, p);
        char d[PATH_MAX];
        snprintf(d, sizeof d, "%s", make_dir("tmp/x", 0755, 65534, 65534));
        p = write_file("tmp/x/token", HEX32 "\n", 0600);
        cr_assert_eq(chown(p, 65534, 65534), 0);
        expect_refused(p, "the directory %s is owned by nobody (uid 65534)", d);
}

/* A read-only mount: nobody here can change it, whoever owns what is on it and whatever the
 * directories' modes (a Windows folder shows 0777). In a private mount namespace of this test's
 * process (criterion runs each test in a process of its own). */
Test(token, a_read_only_mount_is_taken_whoever_owns_it) {
        if (geteuid() != 0)
                cr_skip_test("needs root to mount");
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                cr_skip_test("cannot make a mount namespace: %s", strerror(errno));
        char d[PATH_MAX];
        snprintf(d, sizeof d, "%s", make_dir("shared", 0777, 65533, 65533));
        const char *p = write_file("shared/token", HEX32 "\n", 0600);
        cr_assert_eq(chown(p, 65534, 65534), 0);
        expect_load_error(p, -EPERM, WANT("with mode 0777", "chmod go-w"));
        cr_assert_eq(mount(d, d, NULL, MS_BIND, NULL), 0, "%s", strerror(errno));
        cr_assert_eq(mount(NULL, d, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL), 0, "%s", strerror(errno));
        expect_load_ok(p, 32);
        umount2(d, MNT_DETACH);
}

/* A token the container's user may not read: whose it is, and what makes it readable. */
Test(token, unreadable_says_whose_it_is_and_the_fix) {
        if (geteuid() != 0)
                cr_skip_test("needs root to read as another user");
        cr_assert_eq(chmod(dir, 0755), 0);
        const char *p = write_file("t", HEX32 "\n", 0400);
        cr_assert_eq(seteuid(1000), 0);
        expect_load_error(p, -EACCES, WANT("token file ", "uid 1000 (gid 0) cannot read it: it is owned by root (uid 0), gid 0, mode 0400",
                                           "chown 1000", "uid: \"1000\" and mode: 0400", "--secret NAME,uid=1000,mode=0400",
                                           "start sockferry as root (-u 0) with user = 1000"));
        cr_assert_eq(seteuid(0), 0);
        /* A directory on the way that the user may not search. */
        char d[PATH_MAX];
        snprintf(d, sizeof d, "%s", make_dir("closed", 0700, 0, 0));
        p = write_file("closed/t", HEX32 "\n", 0600);
        cr_assert_eq(seteuid(1000), 0);
        char want[PATH_MAX + 64];
        snprintf(want, sizeof want, "the directory %s (owner root (uid 0), group 0, mode 0700) does not let uid 1000", d);
        expect_load_error(p, -EACCES, WANT(want, "chmod o+x"));
        cr_assert_eq(seteuid(0), 0);
}

Test(token, secret_mode_hint) {
        const char *p = write_file("t", HEX32 "\n", 0444);
        expect_load_error(p, -EPERM, WANT("run chmod 600", "Compose mounts a file secret with the host file's mode", "Swarm: mode: 0400", "defaultMode: 0400"));
}

Test(keygen, stdout) {
        capture_begin(STDOUT_FILENO);
        int r = sf_token_generate(NULL, false);
        const char *out = capture_end(STDOUT_FILENO);
        cr_assert_eq(r, 0);
        cr_assert_eq(strlen(out), 65);
        cr_assert_eq(strspn(out, "0123456789abcdef"), 64);
        cr_assert_eq(out[64], '\n');
}

/* The keygen subcommand of the built binary ($SOCKFERRY), for option handling and exit codes. */
static int run_sockferry(const char *const *args, char *out, size_t outlen, char *err, size_t errlen) {
        const char *bin = getenv("SOCKFERRY");
        if (!bin || access(bin, X_OK) != 0)
                cr_skip_test("SOCKFERRY is not set to the built binary");
        int ofd = memfd_create("out", MFD_CLOEXEC), efd = memfd_create("err", MFD_CLOEXEC);
        cr_assert_geq(ofd, 0);
        cr_assert_geq(efd, 0);
        const char *argv[16] = { bin };
        size_t n = 1;
        for (; *args && n < 15; args++)
                argv[n++] = *args;
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                dup2(ofd, STDOUT_FILENO);
                dup2(efd, STDERR_FILENO);
                execv(bin, (char *const *)argv);
                _exit(127);
        }
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        ssize_t k = pread(ofd, out, outlen - 1, 0);
        out[k > 0 ? k : 0] = '\0';
        k = pread(efd, err, errlen - 1, 0);
        err[k > 0 ? k : 0] = '\0';
        close(ofd);
        close(efd);
        cr_assert(WIFEXITED(status));
        return WEXITSTATUS(status);
}

Test(keygen, cli) {
        char out[4096], err[4096], tok[67];
        const char *p = path_of("cli.token");

        cr_assert_eq(run_sockferry(WANT("keygen"), out, sizeof out, err, sizeof err), 0, "stderr: %s", err);
        cr_assert_eq(strlen(out), 65);
        cr_assert_eq(strspn(out, "0123456789abcdef"), 64);

        cr_assert_eq(run_sockferry(WANT("keygen", "-o", p), out, sizeof out, err, sizeof err), 0, "stderr: %s", err);
        cr_assert_str_eq(out, "");
        expect_token_file(p, tok);

        cr_assert_eq(run_sockferry(WANT("keygen", "-o", p), out, sizeof out, err, sizeof err), 1);
        cr_assert_not_null(strstr(err, "exists; use --force to replace it"), "stderr: %s", err);

        cr_assert_eq(run_sockferry(WANT("keygen", "--output", p, "--force"), out, sizeof out, err, sizeof err), 0,
                     "stderr: %s", err);
        char tok2[67];
        expect_token_file(p, tok2);
        cr_assert_neq(strcmp(tok, tok2), 0);

        cr_assert_eq(run_sockferry(WANT("keygen", "--help"), out, sizeof out, err, sizeof err), 0);
        cr_assert_not_null(strstr(out, "sockferry keygen [-o FILE] [--force]"), "stdout: %s", out);
        cr_assert_eq(run_sockferry(WANT("keygen", "-h"), out, sizeof out, err, sizeof err), 0);
}

Test(keygen, cli_usage_errors) {
        char out[4096], err[4096];
        cr_assert_eq(run_sockferry(WANT("keygen", "--bogus"), out, sizeof out, err, sizeof err), 64);
        cr_assert_not_null(strstr(err, "--bogus"), "stderr: %s", err);
        cr_assert_eq(run_sockferry(WANT("keygen", "-x"), out, sizeof out, err, sizeof err), 64);
        cr_assert_not_null(strstr(err, "-x"), "stderr: %s", err);
        cr_assert_eq(run_sockferry(WANT("keygen", "-o"), out, sizeof out, err, sizeof err), 64);
        cr_assert_not_null(strstr(err, "needs an argument"), "stderr: %s", err);
        cr_assert_eq(run_sockferry(WANT("keygen", "extra"), out, sizeof out, err, sizeof err), 64);
        cr_assert_not_null(strstr(err, "extra"), "stderr: %s", err);
        cr_assert_eq(run_sockferry(WANT("keygen", "--force"), out, sizeof out, err, sizeof err), 64);
        cr_assert_not_null(strstr(err, "--force needs -o FILE"), "stderr: %s", err);
        cr_assert_eq(run_sockferry(WANT("keygen", "-o", ""), out, sizeof out, err, sizeof err), 64);
        cr_assert_eq(out[0], '\0', "nothing on stdout for a usage error");
}
