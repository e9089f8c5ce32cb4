/* NTHREADS threads released together by a barrier connect to PATH ROUNDS times each and check
 * that the server answers each connection its own line: redirects running concurrently must
 * not share anything but the preload's read-only map. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct worker {
        pthread_t thread;
        int id;
        int failures;
        char error[160];
};

static const char *path;
static int rounds;
static pthread_barrier_t start;

static int one_round(struct worker *w, int round) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char want[64], got[256];
        size_t have = 0;
        int fd, wl;

        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
                snprintf(w->error, sizeof w->error, "thread %d round %d: connect: %s", w->id, round, strerror(errno));
                if (fd >= 0)
                        close(fd);
                return -1;
        }
        wl = snprintf(want, sizeof want, "t%d r%d\n", w->id, round);
        if (write(fd, want, (size_t)wl) != wl) {
                snprintf(w->error, sizeof w->error, "thread %d round %d: write: %s", w->id, round, strerror(errno));
                close(fd);
                return -1;
        }
        while (have < sizeof got - 1 && !memchr(got, '\n', have)) {
                ssize_t n = read(fd, got + have, sizeof got - 1 - have);
                if (n <= 0)
                        break;
                have += (size_t)n;
        }
        got[have] = '\0';
        close(fd);
        /* The server answers LABEL:LINE. */
        const char *colon = strchr(got, ':');
        if (!colon || strcmp(colon + 1, want) != 0) {
                snprintf(w->error, sizeof w->error, "thread %d round %d: sent \"t%d r%d\", got \"%.64s\"", w->id, round, w->id, round, got);
                return -1;
        }
        return 0;
}

static void *run(void *p) {
        struct worker *w = p;
        pthread_barrier_wait(&start);
        for (int r = 0; r < rounds; r++)
                if (one_round(w, r) < 0)
                        w->failures++;
        return NULL;
}

int main(int argc, char **argv) {
        int nthreads, failures = 0;
        struct worker *w;

        if (argc != 4) {
                fprintf(stderr, "usage: sfp-threads PATH NTHREADS ROUNDS\n");
                return 64;
        }
        path = argv[1];
        nthreads = atoi(argv[2]);
        rounds = atoi(argv[3]);
        if (nthreads < 1 || rounds < 1 || strlen(path) >= sizeof ((struct sockaddr_un *)0)->sun_path)
                return 64;
        w = calloc((size_t)nthreads, sizeof *w);
        if (!w || pthread_barrier_init(&start, NULL, (unsigned)nthreads) != 0)
                return 1;
        for (int i = 0; i < nthreads; i++) {
                w[i].id = i;
                if (pthread_create(&w[i].thread, NULL, run, &w[i]) != 0) {
                        fprintf(stderr, "pthread_create failed\n");
                        return 1;
                }
        }
        for (int i = 0; i < nthreads; i++) {
                pthread_join(w[i].thread, NULL);
                if (w[i].failures) {
                        failures += w[i].failures;
                        fprintf(stderr, "%s\n", w[i].error);
                }
        }
        printf("%d threads x %d rounds, %d failures\n", nthreads, rounds, failures);
        free(w);
        return failures ? 1 : 0;
}
