#include "shim/attach_inject.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uv.h>

#include "conf/log.h"
#include "relay/sys/platform.h"
#include "shim/capture.h"

/* What the engine CLI prints to us while --inject asks and copies: a few lines. */
#define CAPTURE_MAX 2048

/* ---- what runs in the container --------------------------------------------------------------
 *
 * POSIX sh with the tools of coreutils or busybox (id, ls, mkdir, head, chmod, sha256sum, rm,
 * rmdir), run as `/bin/sh -c SCRIPT sf-inject ARG...`: the shell, and the tools from the
 * system's directories first, not from wherever the image's PATH begins (a directory there that
 * a user of the container can write to would choose what root runs). Every line they print for
 * attach starts "sf-inject: ", then a word: ok, failed (nothing was run), gone (the directory is
 * not there), unsafe (something there is not as attach left it: nothing was run).
 *
 * Why the directory is safe: it is made by the exec's user (root) with a name nobody knew and
 * mkdir fails on any name that exists (a directory, a symbolic link), so nothing of anyone else
 * is reused; it is 0700, so only its owner can add, replace or rename what is in it; and each
 * directory above it belongs to root (or to the exec's own user) and no one else may write to
 * it, or it is sticky (/tmp), so no one else can rename the directory away and put their own
 * under its name. Every check is on the directory the shell stands in (cd -P, ls -ldn ., cd -P
 * ..), not on a path looked up again, and the copy is run as ./sockferry from there. */

/* Shared: say, and safe_up (the current directory and every one above it are root's or this
 * user's, and writable by no one else unless sticky; in a subshell, so the caller stays), and
 * quit: exit 1, reading first what is still unread of the copy on stdin ($unread bytes). An exec
 * that ends before the engine has written all of its stdin can lose what it printed: podman
 * 4.3.1 returned nothing at all, not even our reason, for 12 of 120 such execs under load here,
 * and for none of 120 that read their stdin first. */
#define SCRIPT_COMMON                                                                                              \
        "set -f\n"                                                                                                 \
        "export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH\n"                                                        \
        "say() { printf 'sf-inject: %s\\n' \"$*\" >&2; }\n"                                                        \
        "safe_up() (\n"                                                                                            \
        "  while :; do\n"                                                                                          \
        "    here=$(pwd -P) && set -- $(ls -ldn .) && [ -n \"$3\" ] || { say \"failed: cannot list $here\"; exit 1; }\n" \
        "    if [ \"$3\" != 0 ] && [ \"$3\" != \"$me\" ]; then\n"                                                  \
        "      say \"unsafe: $here belongs to uid $3, who could rename what is in it\"; exit 1\n"                  \
        "    fi\n"                                                                                                 \
        "    case $1 in\n"                                                                                         \
        "    ?????????[tT]*) ;;\n"                                                                                 \
        "    ?????w*|????????w*) say \"unsafe: $here is writable by others than its owner (mode $1)\"; exit 1 ;;\n" \
        "    esac\n"                                                                                               \
        "    [ \"$here\" = / ] && exit 0\n"                                                                        \
        "    cd -P .. || exit 1\n"                                                                                 \
        "  done\n"                                                                                                 \
        ")\n"                                                                                                      \
        "quit() { [ -z \"${unread-}\" ] || head -c \"$unread\" >/dev/null 2>&1; exit 1; }\n"                       \
        "me=$(id -u) || { say 'failed: no id command (coreutils or busybox)'; quit; }\n"                           \
        "ours() { set -- $(ls -ldn .); [ \"$3\" = \"$me\" ] && case $1 in drwx------*) true ;; *) false ;; esac; }\n"

/* sf-inject PARENT NAME SHA256 SIZE, the binary on stdin: the new directory PARENT/NAME with
 * the checked copy in it, or nothing. Says "ok UID DIR" on stdout. */
static const char inject_script[] =
        "unread=$4\n" SCRIPT_COMMON
        "parent=$1 name=$2 sum=$3 size=$4\n"
        "cd -P -- \"$parent\" 2>/dev/null || { say \"failed: $parent: no such directory\"; quit; }\n"
        "safe_up || quit\n"
        "umask 077\n"
        "err=$(mkdir -- \"$name\" 2>&1) || { say \"failed: cannot make $(pwd -P)/$name: ${err##*: }\"; quit; }\n"
        "cd -P -- \"$name\" || quit\n"
        "d=$(pwd -P)\n"
        "drop() { rm -f ./sockferry; cd -P .. && rmdir -- \"$name\" 2>/dev/null; }\n"
        /* a default ACL of the parent may have added to the mode the umask gave */
        "chmod 0700 . && ours || { say \"failed: $d is not this user's alone after mkdir\"; drop; quit; }\n"
        "head -c \"$size\" >sockferry\n"
        "unread=\n"
        "set -- $(ls -ln sockferry)\n"
        "[ \"$5\" = \"$size\" ] || { say \"failed: $d/sockferry has ${5:-no} bytes of $size (head -c, or the exec's stdin ended early)\"; drop; exit 1; }\n"
        "if command -v sha256sum >/dev/null 2>&1; then got=$(sha256sum <sockferry)\n"
        "elif got=$(busybox sha256sum <sockferry 2>/dev/null); then :\n"
        "else say 'failed: the container has no sha256sum (coreutils or busybox) to check the copy with'; drop; exit 1\n"
        "fi\n"
        "[ \"${got%% *}\" = \"$sum\" ] || { say \"failed: the copy's sha256 is ${got%% *}, not $sum\"; drop; exit 1; }\n"
        "chmod 0700 sockferry || { drop; exit 1; }\n"
        "if ! err=$(./sockferry version 2>&1 </dev/null); then\n"
        "  say \"failed: the copy in $d does not run: $(printf '%s\\n' \"$err\" | head -n 1) (a mount with noexec, or a binary for another architecture)\"\n"
        "  drop; exit 1\n"
        "fi\n"
        "echo \"sf-inject: ok $me $d\"\n";

/* sf-inject DIR SHA256: the far end, from the copy in DIR once DIR and the copy are checked
 * again; DIR is removed when it exits by itself (not killed: the container restarting keeps
 * it for the next run). 127 when DIR is gone, 126 when it is not as it was left. */
static const char run_script[] =
        SCRIPT_COMMON
        "d=$1 sum=$2\n"
        "cd -P -- \"$d\" 2>/dev/null && [ -f sockferry ] || { say \"gone: $d\"; exit 127; }\n"
        "ours || { say \"unsafe: $d is not the directory attach made (it is not this user's alone)\"; exit 126; }\n"
        "safe_up || exit 126\n"
        "got=$(sha256sum <sockferry 2>/dev/null || busybox sha256sum <sockferry 2>/dev/null)\n"
        "[ \"${got%% *}\" = \"$sum\" ] || { say \"unsafe: $d/sockferry is not the copy attach made\"; exit 126; }\n"
        "./sockferry link --stdio\n"
        "st=$?\n"
        "[ \"$st\" -ge 128 ] || { rm -f ./sockferry; cd -P .. && rmdir -- \"${d##*/}\"; }\n"
        "exit \"$st\"\n";

/* What the container printed, for a message: its lines escaped (conf/log.h) and joined by
 * "; ", the "sf-inject: " before ours left out. */
static void plain(const char *raw, char *out, size_t cap) {
        size_t o = 0;
        out[0] = '\0';
        for (const char *p = raw; *p && o + 4 < cap;) {
                size_t n = strcspn(p, "\n");
                size_t skip = strncmp(p, "sf-inject: ", 11) == 0 ? 11 : 0;
                while (n > skip && (p[n - 1] == '\r' || p[n - 1] == ' '))
                        n--;
                if (n > skip) {
                        if (o)
                                o += (size_t)snprintf(out + o, cap - o, "; ");
                        o += sf_log_escape(p + skip, n - skip, out + o, cap - o);
                }
                p += strcspn(p, "\n");
                if (*p)
                        p++;
        }
}

/* ---- the container's architecture and a static binary for it --------------------------------- */

/* uname -m through the exec; an image without uname (scratch, distroless) runs on the machine
 * of the engine, which is ours. Only a plain word: it becomes part of a path on this host. */
static void container_arch(const struct sf_attach_engine *e, char *arch, size_t cap) {
        char out[CAPTURE_MAX], *argv[SF_ATTACH_EXEC_MAX + 3];
        size_t n = sf_attach_engine_exec(e, false, argv);
        argv[n++] = "uname";
        argv[n++] = "-m";
        argv[n] = NULL;
        if (sf_capture_run(argv, -1, out, sizeof out, SF_CAPTURE_TIMEOUT_MS) == 0) {
                size_t len = strlen(out);
                while (len && (out[len - 1] == '\n' || out[len - 1] == '\r'))
                        out[--len] = '\0';
                if (len && len < cap && len < 32 && strspn(out, "abcdefghijklmnopqrstuvwxyz0123456789_") == len) {
                        memcpy(arch, out, len + 1);
                        return;
                }
        }
        uv_utsname_t u;
        if (uv_os_uname(&u) == 0)
                snprintf(arch, cap, "%s", strcmp(u.machine, "arm64") == 0 ? "aarch64" : u.machine);
        else
                snprintf(arch, cap, "x86_64");
        sf_log_info("inject: %s has no uname: taking this machine's architecture, %s", e->target, arch);
}

static bool is_file(const char *path) {
        struct stat st;
        return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The static binary for arch: 0 with its path in src, or -1 with why. */
static int find_static(const struct sf_attach_engine *e, const char *arch, char *src, size_t cap, char *why,
                       size_t wcap) {
        if (e->inject_path) {
                snprintf(src, cap, "%s", e->inject_path);
                if (is_file(src))
                        return 0;
                struct stat st;
                snprintf(why, wcap, "--inject=%s: %s", src, stat(src, &st) < 0 ? strerror(errno) : "not a regular file");
                return -1;
        }
        char dir[PATH_MAX] = "", exe[PATH_MAX] = "";
        size_t len = sizeof exe;
        if (uv_exepath(exe, &len) == 0) {
                snprintf(dir, sizeof dir, "%s", exe);
                /* Its directory (a Windows path has backslashes). */
                size_t cut = strlen(dir);
                while (cut && dir[cut - 1] != '/' && dir[cut - 1] != '\\')
                        cut--;
                dir[cut ? cut - 1 : 0] = '\0';
        }
        /* In order: the user's, the installed one (.deb, rpm, Homebrew), then where a prefix
         * moved elsewhere or an unpacked release keeps it. */
        char cands[5][PATH_MAX + 64];
        size_t n = 0;
        const char *env = getenv("SOCKFERRY_STATIC");
        struct stat st;
        if (env && *env) {
                if (stat(env, &st) == 0 && S_ISDIR(st.st_mode))
                        snprintf(cands[n++], sizeof cands[0], "%s/linux-%s/sockferry", env, arch);
                else
                        snprintf(cands[n++], sizeof cands[0], "%s", env);
        }
        snprintf(cands[n++], sizeof cands[0], "%s/linux-%s/sockferry", SF_INJECT_DIR, arch);
        if (dir[0]) {
                snprintf(cands[n++], sizeof cands[0], "%s/../libexec/sockferry/linux-%s/sockferry", dir, arch);
                snprintf(cands[n++], sizeof cands[0], "%s/sockferry-%s-linux-%s", dir, SF_VERSION, arch);
        }
        for (size_t i = 0; i < n; i++) {
                if (is_file(cands[i])) {
                        snprintf(src, cap, "%s", cands[i]);
                        return 0;
                }
                sf_log_debug("inject: no static sockferry for %s at %s", arch, cands[i]);
        }
#if defined(__linux__) && SF_BUILD_STATIC
        /* A static build (-Dstatic=true, installed from source) is the binary itself. */
        uv_utsname_t u;
        if (exe[0] && uv_os_uname(&u) == 0 && strcmp(u.machine, arch) == 0) {
                snprintf(src, cap, "%s", exe);
                return 0;
        }
#endif
        snprintf(why, wcap,
                 "--inject has no static Linux sockferry for %s (not at %s/linux-%s/sockferry, $SOCKFERRY_STATIC, nor "
                 "next to %s): build one with packaging/linux/build-static.sh OUTDIR (then SOCKFERRY_STATIC=OUTDIR), or "
                 "download the release's sockferry-%s-linux-%s and give --inject=PATH",
                 arch, SF_INJECT_DIR, arch, exe[0] ? exe : "this binary", SF_VERSION, arch);
        return -1;
}

/* The size and sha256 (hex) of the open file fd, read from its start; 0 or -errno. */
static int file_sum(uv_file fd, int64_t *size, char hex[65]) {
        crypto_hash_sha256_state st;
        unsigned char buf[65536], sum[crypto_hash_sha256_BYTES];
        crypto_hash_sha256_init(&st);
        *size = 0;
        for (;;) {
                uv_fs_t req;
                uv_buf_t b = uv_buf_init((char *)buf, sizeof buf);
                int n = uv_fs_read(NULL, &req, fd, &b, 1, *size, NULL);
                uv_fs_req_cleanup(&req);
                if (n < 0)
                        return -sf_errno_uv(n);
                if (n == 0)
                        break;
                crypto_hash_sha256_update(&st, buf, (unsigned long long)n);
                *size += n;
        }
        crypto_hash_sha256_final(&st, sum);
        sodium_bin2hex(hex, 65, sum, sizeof sum);
        return 0;
}

/* ---- the copy ----------------------------------------------------------------------------- */

int sf_attach_inject(struct sf_attach_engine *e, char *why, size_t cap) {
        char arch[32], src[PATH_MAX], out[CAPTURE_MAX], said[CAPTURE_MAX], hex[65], size_s[24], name[32];
        container_arch(e, arch, sizeof arch);
        char found[600];
        if (find_static(e, arch, src, sizeof src, found, sizeof found) < 0) {
                snprintf(why, cap, "no sockferry in %s, and %s", e->target, found);
                return -1;
        }
        uv_fs_t req;
        uv_file fd = uv_fs_open(NULL, &req, src, UV_FS_O_RDONLY, 0, NULL);
        uv_fs_req_cleanup(&req);
        int64_t size = 0;
        int r = fd < 0 ? -sf_errno_uv(fd) : file_sum(fd, &size, hex);
        if (r < 0) {
                if (fd >= 0) {
                        uv_fs_close(NULL, &req, fd, NULL);
                        uv_fs_req_cleanup(&req);
                }
                snprintf(why, cap, "--inject cannot read %s: %s", src, strerror(-r));
                return -1;
        }
        /* A name nobody could have made ready for it: mkdir there fails if anything is. */
        unsigned char rnd[8];
        char rhex[17];
        randombytes_buf(rnd, sizeof rnd);
        sodium_bin2hex(rhex, sizeof rhex, rnd, sizeof rnd);
        snprintf(name, sizeof name, "sockferry.%s", rhex);
        snprintf(size_s, sizeof size_s, "%lld", (long long)size);

        char *argv[SF_ATTACH_EXEC_MAX + 9];
        size_t n = sf_attach_engine_exec(e, true, argv);
        argv[n++] = "/bin/sh";
        argv[n++] = "-c";
        argv[n++] = (char *)inject_script;
        argv[n++] = "sf-inject";
        argv[n++] = (char *)e->inject_dir;
        argv[n++] = name;
        argv[n++] = hex;
        argv[n++] = size_s;
        argv[n] = NULL;
        r = sf_capture_run(argv, fd, out, sizeof out, SF_CAPTURE_TIMEOUT_MS);
        uv_fs_close(NULL, &req, fd, NULL);
        uv_fs_req_cleanup(&req);

        /* "sf-inject: ok UID DIR", DIR the directory it made: its name ends DIR. */
        const char *ok = strstr(out, "sf-inject: ok ");
        unsigned long uid = 0;
        char dir[PATH_MAX] = "";
        if (r == 0 && ok) {
                char *end;
                uid = strtoul(ok + 14, &end, 10);
                size_t dl = *end == ' ' ? strcspn(end + 1, "\r\n") : 0;
                size_t nl = strlen(name);
                if (dl > nl && dl < sizeof dir && end[1] == '/' && end[dl - nl] == '/' &&
                    memcmp(end + 1 + dl - nl, name, nl) == 0) {
                        memcpy(dir, end + 1, dl);
                        dir[dl] = '\0';
                }
        }
        if (!dir[0]) {
                plain(out, said, sizeof said);
                bool ours = strstr(out, "sf-inject: ") != NULL;
                snprintf(why, cap, "no sockferry in %s, and --inject could not copy %s into %s: %s%s", e->target, src,
                         e->inject_dir,
                         said[0] ? said : r < 0 ? strerror(-r) : "the exec failed with no message",
                         ours ? " (--inject-dir DIR: a directory only root can change, on a writable mount that allows "
                                "exec, such as a volume)"
                              : " (--inject needs /bin/sh and coreutils or busybox in the container)");
                return -1;
        }
        snprintf(e->far_dir, sizeof e->far_dir, "%s", dir);
        memcpy(e->far_sum, hex, sizeof e->far_sum);
        e->injected = true;
        n = sf_attach_engine_exec(e, true, e->argv);
        e->argv[n++] = "/bin/sh";
        e->argv[n++] = "-c";
        e->argv[n++] = (char *)run_script;
        e->argv[n++] = "sf-inject";
        e->argv[n++] = e->far_dir;
        e->argv[n++] = e->far_sum;
        e->argv[n] = NULL;
        sf_log_info("inject: copied %s (%s, sha256 %s) to %s:%s", src, arch, hex, e->target, dir);
        if (uid != 0)
                sf_log_info("inject: the exec runs as uid %lu in %s, not root (kubectl runs the pod's user): the copy "
                            "is that user's, in a directory only it can change; sockets for other users need the pod "
                            "to run as root",
                            uid, e->target);
        return 0;
}
