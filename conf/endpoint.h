#pragma once
/* Endpoint syntax (sockferry.conf(5), VALUES). Pure libc, no allocation: the preload library
 * compiles it in. */
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#define SF_ENDPOINT_TEXT_MAX 300
#define SF_UNIX_PATH_MAX 108 /* sizeof(sockaddr_un.sun_path) */
#define SF_HOST_MAX 256
#define SF_NPIPE_NAME_MAX 247 /* \\.\pipe\ and the name: 256 characters at most (Windows) */
#define SF_VSOCK_CID_ANY 0xFFFFFFFFu
#define SF_VSOCK_CID_HOST 2u

enum sf_endpoint_kind {
        SF_EP_UNIX = 1,     /* path */
        SF_EP_ABSTRACT,     /* path holds the name without '@' */
        SF_EP_TCP,          /* host (no brackets), port */
        SF_EP_VSOCK,        /* cid, port */
        SF_EP_SYSTEMD,      /* path holds the LISTEN_FDNAMES name */
        SF_EP_FD,           /* fd */
        SF_EP_NPIPE,        /* pipe: the name after \\.\pipe\ (a Windows named pipe) */
};

struct sf_endpoint {
        enum sf_endpoint_kind kind;
        char text[SF_ENDPOINT_TEXT_MAX]; /* as written, for messages */
        char path[SF_UNIX_PATH_MAX];
        char host[SF_HOST_MAX];
        char pipe[SF_NPIPE_NAME_MAX + 1];
        uint32_t port;
        uint32_t cid;
        int fd;
};

/* Parses s (NUL-terminated) into *ep. On error returns -EINVAL and writes a sentence
 * saying what was wrong and what was expected into err (which may be NULL). */
int sf_endpoint_parse(const char *s, struct sf_endpoint *ep, char *err, size_t errlen);

/* Parses at most len bytes of s: the preload parses map entries in place. */
int sf_endpoint_parse_n(const char *s, size_t len, struct sf_endpoint *ep, char *err, size_t errlen);

bool sf_endpoint_equal(const struct sf_endpoint *a, const struct sf_endpoint *b);

/* True for a TCP endpoint whose host is a loopback literal or "localhost". */
bool sf_endpoint_is_loopback(const struct sf_endpoint *ep);
/* True for a TCP or vsock endpoint: one that reaches (or is reached from) another machine. */
bool sf_endpoint_is_network(const struct sf_endpoint *ep);

const char *sf_endpoint_kind_name(enum sf_endpoint_kind kind);

/* Whether this system has ep's kind (conf/platform_*.c): 0, or -EINVAL with a sentence naming
 * the system and what to use instead in err. Configuration refuses the others (exit 78). */
int sf_endpoint_supported(const struct sf_endpoint *ep, char *err, size_t errlen);
