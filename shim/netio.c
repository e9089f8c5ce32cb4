#include "shim/netio.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "relay/link/messages.h"
#include "relay/sys/platform.h"

int64_t sf_netio_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until deadline: 0 when they came, -ETIMEDOUT, or -errno. */
static int wait_for(int fd, short events, int64_t deadline) {
        for (;;) {
                int64_t left = deadline - sf_netio_now_ms();
                if (left <= 0)
                        return -ETIMEDOUT;
                struct pollfd p = { .fd = fd, .events = events };
                int r = poll(&p, 1, (int)(left > 60000 ? 60000 : left));
                if (r > 0)
                        return 0;
                if (r < 0 && errno != EINTR)
                        return -errno;
        }
}

/* A unix socket whose listen backlog is full refuses a non-blocking connect with EAGAIN at
 * once, where a blocking one waits for room: this one waits, until deadline at most (a
 * connect's wait is bounded by SO_SNDTIMEO), so that a flood of other clients, which the
 * server turns away one by one, does not fail it. 0 or -errno. */
static int connect_unix_waiting(int fd, const struct sockaddr *sa, socklen_t len, int64_t deadline) {
        int64_t left = deadline - sf_netio_now_ms();
        if (left <= 0)
                return -ETIMEDOUT;
        struct timeval tv = { .tv_sec = (time_t)(left / 1000), .tv_usec = (suseconds_t)(left % 1000 * 1000) };
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 ||
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0)
                return -errno;
        int r = 0;
        while ((r = connect(fd, sa, len) < 0 ? -errno : 0) == -EINTR)
                ;
        struct timeval none = { 0 };
        if (fcntl(fd, F_SETFL, fl) < 0 || setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none) < 0)
                return r < 0 ? r : -errno;
        /* The wait ran out. */
        return r == -EAGAIN || r == -EWOULDBLOCK || r == -EINPROGRESS ? -ETIMEDOUT : r;
}

/* A non-blocking connect to one address, finished within deadline. fd or -errno. */
static int connect_one(const struct sockaddr *sa, socklen_t len, int64_t deadline) {
        int fd = sf_socket(sa->sa_family, SOCK_STREAM);
        if (fd < 0)
                return fd;
        int r = 0;
        if (connect(fd, sa, len) < 0) {
                r = -errno;
                if (r == -EAGAIN && sa->sa_family == AF_UNIX)
                        r = connect_unix_waiting(fd, sa, len, deadline);
                if (r == -EINPROGRESS && (r = wait_for(fd, POLLOUT, deadline)) == 0) {
                        int e = 0;
                        socklen_t elen = sizeof e;
                        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) < 0)
                                e = errno;
                        r = -e;
                }
        }
        if (r < 0) {
                close(fd);
                return r;
        }
        return fd;
}

static int dial_tcp(const struct sf_endpoint *ep, int64_t deadline, char *err, size_t errlen) {
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG }, *res;
        char port[16];
        snprintf(port, sizeof port, "%u", ep->port);
        int g = getaddrinfo(ep->host, port, &hints, &res);
        if (g != 0) {
                sf_link_resolve_cause(ep, gai_strerror(g), err, errlen);
                return -EHOSTUNREACH;
        }
        int r = -EHOSTUNREACH;
        for (struct addrinfo *ai = res; ai && r < 0; ai = ai->ai_next)
                r = connect_one(ai->ai_addr, ai->ai_addrlen, deadline);
        freeaddrinfo(res);
        return r;
}

int sf_netio_dial(const struct sf_endpoint *ep, uint64_t timeout_ms, char *err, size_t errlen) {
        int64_t deadline = sf_netio_deadline(timeout_ms);
        struct sockaddr_un un = { .sun_family = AF_UNIX };
        struct sockaddr_storage vm;
        socklen_t vmlen;
        size_t n = strlen(ep->path);
        int r;

        err[0] = '\0';
        switch (ep->kind) {
        case SF_EP_UNIX:
                memcpy(un.sun_path, ep->path, n);
                r = connect_one((struct sockaddr *)&un, sizeof un, deadline);
                break;
        case SF_EP_ABSTRACT:
                memcpy(un.sun_path + 1, ep->path, n);
                r = connect_one((struct sockaddr *)&un, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n),
                                deadline);
                break;
        case SF_EP_TCP:
                r = dial_tcp(ep, deadline, err, errlen);
                break;
        case SF_EP_VSOCK:
                r = sf_vsock_sockaddr(ep->cid, ep->port, &vm, &vmlen);
                if (r == 0)
                        r = connect_one((struct sockaddr *)&vm, vmlen, deadline);
                break;
        default:
                snprintf(err, errlen, "%s endpoints cannot be connected to", sf_endpoint_kind_name(ep->kind));
                return -EINVAL;
        }
        if (r < 0 && !err[0])
                sf_link_dial_cause(ep, r, timeout_ms, err, errlen);
        return r;
}

ssize_t sf_netio_read(int fd, void *buf, size_t len, int64_t deadline) {
        for (;;) {
                ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);
                if (n >= 0)
                        return n;
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN)
                        return -errno;
                int r = wait_for(fd, POLLIN, deadline);
                if (r < 0)
                        return r;
        }
}

int sf_netio_write_all(int fd, const void *buf, size_t len, int64_t deadline) {
        const char *p = buf;
        while (len > 0) {
                ssize_t n = send(fd, p, len, SF_MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n > 0) {
                        p += n;
                        len -= (size_t)n;
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno != EAGAIN)
                        return -errno;
                int r = wait_for(fd, POLLOUT, deadline);
                if (r < 0)
                        return r;
        }
        return 0;
}

void sf_netio_close(int fd) {
        close(fd);
}
