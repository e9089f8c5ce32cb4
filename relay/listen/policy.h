#pragma once
/* Who may listen where, decided the same way on every system (relay/listen/listener.c,
 * relay/listen/listener_win.c). */
#include <netdb.h>
#include <sys/socket.h>

#include "conf/conf.h"

/* Resolves a TCP listen endpoint into *res (freeaddrinfo is the caller's), refusing (-EPERM,
 * logged with the address and the fix) a listener without auth = token (nor allow-insecure)
 * when any address the name gives is not a loopback one. 0 or -errno, logged. */
int sf_listen_tcp_resolve(const struct sf_forward *f, struct addrinfo **res);

/* A listening socket the relay was handed (systemd:, fd:) under the rule above, judged on the
 * address it is bound to (getsockname: sa, len): without auth = token (nor allow-insecure), a
 * TCP one on a non-loopback address and a vsock one are refused (-EPERM, logged with the
 * address and the fix), as a tcp: or vsock: listener of the configuration would be. 0 or
 * -EPERM. */
int sf_listen_passed_policy(const struct sf_forward *f, const struct sockaddr *sa, socklen_t len);
