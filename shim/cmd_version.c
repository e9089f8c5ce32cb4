/* sockferry version: what a bug report needs, one "key: value" line each, in a fixed order. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "relay/sys/sandbox.h"
#include "shim/cli.h"

static void help(void) {
        fputs("Usage: sockferry version\n"
              "\n"
              "Print what a bug report needs, one line each: the version, the relay's engine (linux or\n"
              "portable), libuv's version at run time and at build time, the sandbox (seccomp built in\n"
              "and whether it applies here, Landlock), the platform (system, release, machine) and the\n"
              "build options (static, portable, preload).\n"
              "\n"
              "Exit status: 0, 64 usage.\n",
              stdout);
}

/* seccomp: built in or not, and whether a filter loads here (tried in a child); Landlock: the
 * kernel's ABI (relay/sys/sandbox.h). */
static void sandbox_line(void) {
        if (!sf_sandbox_available()) {
                printf("sandbox: none (%s)\n", SF_BUILD_PORTABLE ? "the portable engine has none" : "built without libseccomp");
                return;
        }
        int probe = sf_sandbox_probe();
        if (probe == -ENOTSUP) {
                printf("sandbox: seccomp built in, does not apply here (under valgrind)\n");
                return;
        }
        if (probe == 0)
                printf("sandbox: seccomp built in, applies here");
        else
                printf("sandbox: seccomp built in, does not apply here (%s)", strerror(-probe));
        int abi = sf_sandbox_landlock_abi();
        if (abi > 0)
                printf("; Landlock ABI %d\n", abi);
        else
                printf("; no Landlock (%s)\n", strerror(-abi));
}

static const char *yes_no(int v) {
        return v ? "yes" : "no";
}

int sf_cmd_version(int argc, char **argv) {
        if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
                help();
                return 0;
        }
        if (argc > 1)
                return sf_cli_usage_error("version", "unexpected argument '%s'", argv[1]);
        printf("version: %s\n", SF_VERSION);
        printf("engine: %s\n", SF_ENGINE_NAME);
        printf("libuv: %s (built with %d.%d.%d%s%s)\n", uv_version_string(), UV_VERSION_MAJOR, UV_VERSION_MINOR,
               UV_VERSION_PATCH, UV_VERSION_IS_RELEASE ? "" : "-", UV_VERSION_IS_RELEASE ? "" : UV_VERSION_SUFFIX);
        sandbox_line();
        uv_utsname_t u;
        int r = uv_os_uname(&u);
        if (r == 0)
                printf("platform: %s %s %s\n", u.sysname, u.release, u.machine);
        else
                printf("platform: unknown (%s)\n", uv_strerror(r));
        printf("build: static=%s portable=%s preload=%s%s\n", yes_no(SF_BUILD_STATIC), yes_no(SF_BUILD_PORTABLE),
               yes_no(SF_BUILD_PRELOAD), SF_BUILD_TEST_HOOKS ? " test-hooks=yes (not for production)" : "");
        return 0;
}
