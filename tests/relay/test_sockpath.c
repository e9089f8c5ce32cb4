/* What is at a unix socket path (relay/listen/sockpath.h): a socket is stale only when nobody
 * will accept on it, not while its process is between bind() and listen(). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "relay/listen/sockpath.h"

static char dir[64], path[128];

static void setup(void) {
        snprintf(dir, sizeof dir, "/tmp/sf-sockpath-test.XXXXXX");
        cr_assert_not_null(mkdtemp(dir));
        snprintf(path, sizeof path, "%s/s.sock", dir);
}

static void teardown(void) {
        unlink(path);
        rmdir(dir);
}

TestSuite(sockpath, .init = setup, .fini = teardown);

/* A socket bound at path and not listening: what a process holds between its two calls. */
static int bound(void) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert_geq(fd, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
        cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
        return fd;
}

static void *listen_later(void *arg) {
        struct timespec ms5 = { 0, 5 * 1000 * 1000 };
        nanosleep(&ms5, NULL);
        cr_assert_eq(listen(*(int *)arg, 1), 0);
        return NULL;
}

Test(sockpath, a_socket_that_listens_a_moment_after_bind_is_live) {
        int fd = bound();
        cr_assert_eq(sf_sockpath_probe(path), SF_PATH_STALE_SOCKET, "bound, not listening: refused now");
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, listen_later, &fd), 0);
        /* Asked before the binder listens (it sleeps 5 ms first): the answer must wait for it. */
        enum sf_sockpath_state st = sf_sockpath_probe_settled(path);
        pthread_join(t, NULL);
        cr_assert_eq(st, SF_PATH_LIVE_SOCKET, "a socket about to listen was called %d, not live", st);
        close(fd);
}

Test(sockpath, a_socket_nobody_listens_on_is_stale) {
        close(bound());
        cr_assert_eq(sf_sockpath_probe_settled(path), SF_PATH_STALE_SOCKET, "closed: its file stays");
        cr_assert_eq(unlink(path), 0);
        int fd = bound();
        cr_assert_eq(sf_sockpath_probe_settled(path), SF_PATH_STALE_SOCKET, "bound and never listening");
        close(fd);
}

Test(sockpath, a_missing_path_and_a_live_socket_answer_at_once) {
        cr_assert_eq(sf_sockpath_probe_settled(path), SF_PATH_MISSING);
        int fd = bound();
        cr_assert_eq(listen(fd, 1), 0);
        cr_assert_eq(sf_sockpath_probe_settled(path), SF_PATH_LIVE_SOCKET);
        close(fd);
}
