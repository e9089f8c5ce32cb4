#include "relay/listen/policy.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>

#include "conf/log.h"
#include "relay/sys/platform.h"

static bool is_loopback(const struct sockaddr *sa) {
        if (sa->sa_family == AF_INET)
                return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
        if (sa->sa_family == AF_INET6) {
                const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
                return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
        }
        return false;
}

/* "Only loopback listens without auth" is decided on every address the name resolved to,
 * before any is bound: the text of the endpoint (conf/conf.c checks it early) says nothing
 * about what a name such as localhost or 127.example resolves to on this machine. */
static int tcp_policy(const struct sf_forward *f, const struct addrinfo *res) {
        if (f->auth != SF_AUTH_NONE || f->allow_insecure)
                return 0;
        for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                if (is_loopback(ai->ai_addr))
                        continue;
                char host[NI_MAXHOST];
                if (getnameinfo(ai->ai_addr, ai->ai_addrlen, host, sizeof host, NULL, 0, NI_NUMERICHOST) != 0)
                        snprintf(host, sizeof host, "an address");
                sf_log(SF_LOG_ERROR, f->name, 0,
                       "listen %s: %s resolves to %s, which is not a loopback address: the listener would "
                       "accept connections from the network without authentication; set auth = token (see "
                       "sockferry keygen), listen on 127.0.0.1, or set allow-insecure = yes",
                       f->listen.text, f->listen.host, host);
                return -EPERM;
        }
        return 0;
}

int sf_listen_tcp_resolve(const struct sf_forward *f, struct addrinfo **res) {
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
        char port[16];
        snprintf(port, sizeof port, "%u", f->listen.port);
        int r = getaddrinfo(f->listen.host, port, &hints, res);
        if (r != 0) {
                sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: cannot resolve %s: %s", f->listen.text, f->listen.host,
                       gai_strerror(r));
                return -EADDRNOTAVAIL;
        }
        if ((r = tcp_policy(f, *res)) < 0) {
                freeaddrinfo(*res);
                return r;
        }
        return 0;
}

int sf_listen_passed_policy(const struct sf_forward *f, const struct sockaddr *sa, socklen_t len) {
        if (f->auth != SF_AUTH_NONE || f->allow_insecure)
                return 0;
        if (sa->sa_family == sf_af_vsock) {
                sf_log(SF_LOG_ERROR, f->name, 0,
                       "listen %s: the passed socket is a vsock listener, which accepts connections from other "
                       "machines (VMs or the host) without authentication; set auth = token (see sockferry "
                       "keygen) or allow-insecure = yes",
                       f->listen.text);
                return -EPERM;
        }
        if ((sa->sa_family != AF_INET && sa->sa_family != AF_INET6) || is_loopback(sa))
                return 0;
        char host[NI_MAXHOST], port[NI_MAXSERV];
        if (getnameinfo(sa, len, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
                snprintf(host, sizeof host, "an address");
                snprintf(port, sizeof port, "?");
        }
        sf_log(SF_LOG_ERROR, f->name, 0,
               "listen %s: the passed socket is bound to %s%s%s:%s, which is not a loopback address: the listener "
               "would accept connections from the network without authentication; set auth = token (see "
               "sockferry keygen), bind the socket unit to 127.0.0.1 (ListenStream=127.0.0.1:PORT), or set "
               "allow-insecure = yes",
               f->listen.text, sa->sa_family == AF_INET6 ? "[" : "", host, sa->sa_family == AF_INET6 ? "]" : "",
               port);
        return -EPERM;
}
