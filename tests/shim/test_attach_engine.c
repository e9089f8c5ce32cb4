/* attach's plain words for the ways an engine's exec ends: the engines' own messages, as
 * docker 20.10 and podman 4.3 print them, to the words and the choice (again, or give up). */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "shim/attach_engine.h"

static struct sf_attach_engine engine(const char *name) {
        struct sf_attach_engine e;
        char *none[] = { NULL };
        cr_assert_eq(sf_attach_engine_init(&e, name, NULL, "app", none, false, NULL, NULL), 0);
        return e;
}

static void says(const char *name, struct sf_attach_end end, enum sf_attach_next want, const char *words) {
        struct sf_attach_engine e = engine(name);
        char why[1024] = "";
        cr_assert_eq(sf_attach_engine_explain(&e, &end, why, sizeof why), want, "%s: %s", end.last_line, why);
        cr_assert(strstr(why, words), "%s: wanted \"%s\" in \"%s\"", end.last_line, words, why);
        sf_attach_engine_free(&e);
        sf_attach_engine_free(&e);
}

Test(explain, a_restart_is_said_whichever_way_the_engine_ends_the_exec) {
        says("docker", (struct sf_attach_end){ .exit_status = 137, .was_up = true, .last_line = "" }, SF_ATTACH_RETRY,
             "the exec was killed: app stopped or restarted");
        says("podman", (struct sf_attach_end){ .exit_status = 137, .was_up = true, .last_line = "" }, SF_ATTACH_RETRY,
             "the exec was killed: app stopped or restarted");
        /* podman 4.3, when the container's end wins the race with the exec's. */
        says("podman",
             (struct sf_attach_end){ .exit_status = 255, .was_up = true,
                                     .last_line = "Error: retrieving exec session 7c5f exit code: exec died event for "
                                                  "session 7c5f (container 6a89) not found: unable to find event" },
             SF_ATTACH_RETRY, "the exec was killed: app stopped or restarted");
}

Test(explain, a_255_before_the_link_came_up_is_not_a_restart) {
        struct sf_attach_engine e = engine("podman");
        char why[1024] = "";
        struct sf_attach_end end = { .exit_status = 255, .last_line = "Error: some other failure" };
        sf_attach_engine_explain(&e, &end, why, sizeof why);
        cr_assert_null(strstr(why, "restarted"), "%s", why);
        sf_attach_engine_free(&e);
}

Test(explain, the_engines_failures_in_plain_words) {
        says("docker", (struct sf_attach_end){ .spawn_err = -ENOENT, .last_line = "" }, SF_ATTACH_GIVE_UP,
             "the engine CLI docker was not found");
        says("docker",
             (struct sf_attach_end){ .exit_status = 1, .last_line = "Error response from daemon: No such container: app" },
             SF_ATTACH_GIVE_UP, "no such container: app");
        says("podman", (struct sf_attach_end){ .exit_status = 125, .last_line = "Error: no container with name or ID \"app\" found: no such container" },
             SF_ATTACH_GIVE_UP, "no such container: app");
        says("docker",
             (struct sf_attach_end){ .exit_status = 1,
                                     .last_line = "Error response from daemon: Container 1f2e is not running" },
             SF_ATTACH_RETRY, "container app is not running");
        says("docker",
             (struct sf_attach_end){ .exit_status = 1,
                                     .last_line = "permission denied while trying to connect to the Docker daemon socket at "
                                                  "unix:///var/run/docker.sock" },
             SF_ATTACH_GIVE_UP, "add your user to the engine's group");
        says("docker",
             (struct sf_attach_end){ .exit_status = 127,
                                     .last_line = "OCI runtime exec failed: exec failed: unable to start container process: "
                                                  "exec: \"sockferry\": executable file not found in $PATH: unknown" },
             SF_ATTACH_GIVE_UP, "give --inject");
}
