/* One-shot client of the preload tests: connects a unix stream socket to PATH, sends MESSAGE
 * and a newline, prints the answer. Built three ways (glibc, musl, static) because which libc
 * the client links decides whether a preload library can reach it at all. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char buf[4096];
        ssize_t n;
        int fd;

        if (argc != 3 || strlen(argv[1]) >= sizeof sa.sun_path) {
                fprintf(stderr, "usage: sfp-client PATH MESSAGE\n");
                return 64;
        }
        strcpy(sa.sun_path, argv[1]);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                perror("socket");
                return 1;
        }
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
                int e = errno;
                fprintf(stderr, "connect %s: %s\n", argv[1], strerror(e));
                printf("errno=%d\n", e);
                return 2;
        }
        if (dprintf(fd, "%s\n", argv[2]) < 0 || shutdown(fd, SHUT_WR) < 0) {
                perror("write");
                return 1;
        }
        while ((n = read(fd, buf, sizeof buf)) > 0)
                fwrite(buf, 1, (size_t)n, stdout);
        if (n < 0) {
                perror("read");
                return 1;
        }
        close(fd);
        return 0;
}
