#include "conf/endpoint.h"

#include <errno.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>

#include "conf/conf_int.h"

#define EXPECTED "expected unix:/abs/path, unix:@name, tcp:HOST:PORT, tcp:[V6]:PORT, vsock:CID|host|any:PORT, systemd:NAME or fd:N"

/* The system's sun_path: 108 bytes on Linux, 104 on macOS and the BSDs. A path must fit with
 * its NUL; an abstract name (Linux) with its leading NUL. */
#define SUN_PATH_LEN sizeof(((struct sockaddr_un *)0)->sun_path)

/* Decimal number in [min, max], whole string. */
static int parse_uint(const char *s, size_t len, uint64_t min, uint64_t max, uint64_t *out) {
        uint64_t v = 0;
        if (len == 0 || len > 10)
                return -EINVAL;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -EINVAL;
                v = v * 10 + (uint64_t)(s[i] - '0');
        }
        if (v < min || v > max)
                return -EINVAL;
        *out = v;
        return 0;
}

static bool has_prefix(const char *s, size_t len, const char *p) {
        size_t n = strlen(p);
        return len >= n && memcmp(s, p, n) == 0;
}

static int parse_port(const char *s, size_t len, const char *text, struct sf_endpoint *ep, char *err, size_t errlen) {
        uint64_t v;
        if (parse_uint(s, len, 1, 65535, &v) < 0)
                return sf_conf_fail(err, errlen, "%s: bad port, expected a number from 1 to 65535%s", text, "");
        ep->port = (uint32_t)v;
        return 0;
}

/* npipe:NAME, and the forms people paste: npipe:\\.\pipe\NAME (Windows' own) and
 * npipe:////./pipe/NAME (Docker's DOCKER_HOST), with either slash. Only this machine's pipes
 * (".") are accepted: a pipe on another host is reached over SMB, with Windows credentials. */
static int parse_npipe(const char *text, size_t len, struct sf_endpoint *ep, char *err, size_t errlen) {
        const char *p = text + 6, *end = text + len;
        size_t slashes = 0;
        while (p + slashes < end && (p[slashes] == '/' || p[slashes] == '\\'))
                slashes++;
        if (slashes) {
                if (slashes != 2 && slashes != 4)
                        return sf_conf_fail(err, errlen, "%s: bad pipe path, expected npipe:NAME or npipe:\\\\.\\pipe\\NAME%s", text, "");
                p += slashes;
                if (p >= end || *p != '.' || p + 1 >= end || (p[1] != '/' && p[1] != '\\'))
                        return sf_conf_fail(err, errlen,
                                            "%s: only pipes on this machine are supported (\\\\.\\pipe\\NAME); reach another host over tcp:%s",
                                            text, "");
                p += 2;
                if ((size_t)(end - p) < 5 || strncasecmp(p, "pipe", 4) != 0 || (p[4] != '/' && p[4] != '\\'))
                        return sf_conf_fail(err, errlen, "%s: bad pipe path, expected npipe:\\\\.\\pipe\\NAME%s", text, "");
                p += 5;
        }
        size_t n = (size_t)(end - p);
        if (n == 0)
                return sf_conf_fail(err, errlen, "%s: empty pipe name, expected npipe:NAME (for \\\\.\\pipe\\NAME)%s", text, "");
        if (n > SF_NPIPE_NAME_MAX)
                return sf_conf_fail(err, errlen, "%s: pipe name is too long (%d characters at most)%s", text, SF_NPIPE_NAME_MAX, "");
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)p[i] < ' ')
                        return sf_conf_fail(err, errlen, "%s: control character in the pipe name%s", text, "");
        ep->kind = SF_EP_NPIPE;
        memcpy(ep->pipe, p, n);
        return 0;
}

int sf_endpoint_parse_n(const char *s, size_t len, struct sf_endpoint *ep, char *err, size_t errlen) {
        memset(ep, 0, sizeof *ep);
        ep->fd = -1;
        if (err && errlen)
                err[0] = '\0';
        if (len >= sizeof ep->text)
                return sf_conf_fail(err, errlen, "endpoint is too long (%s bytes at most)%s", "299", "");
        memcpy(ep->text, s, len);
        ep->text[len] = '\0';
        const char *text = ep->text;
        if (memchr(text, '\0', len))
                return sf_conf_fail(err, errlen, "endpoint contains a NUL byte%s%s", "", "");
        if (len == 0)
                return sf_conf_fail(err, errlen, "empty endpoint, %s%s", EXPECTED, "");

        if (has_prefix(text, len, "unix:")) {
                const char *p = text + 5;
                size_t n = len - 5;
                if (n > 0 && p[0] == '@') {
                        if (n == 1)
                                return sf_conf_fail(err, errlen, "%s: empty abstract socket name, expected unix:@name%s", text, "");
                        if (n - 1 >= SUN_PATH_LEN)
                                return sf_conf_fail(err, errlen, "%s: abstract name is too long (%zu bytes at most)%s", text,
                                                    SUN_PATH_LEN - 2, "");
                        ep->kind = SF_EP_ABSTRACT;
                        memcpy(ep->path, p + 1, n - 1);
                        return 0;
                }
                if (n == 0 || p[0] != '/')
                        return sf_conf_fail(err, errlen, "%s: unix socket path must be absolute, expected unix:/abs/path%s", text, "");
                if (n >= SUN_PATH_LEN)
                        return sf_conf_fail(err, errlen,
                                            "%s: unix socket path is too long (%zu bytes at most, a kernel limit); use a shorter "
                                            "directory%s",
                                            text, SUN_PATH_LEN - 1, "");
                ep->kind = SF_EP_UNIX;
                memcpy(ep->path, p, n);
                return 0;
        }
        if (has_prefix(text, len, "tcp:")) {
                const char *p = text + 4;
                size_t n = len - 4;
                const char *colon;
                size_t hlen;
                if (n > 0 && p[0] == '[') {
                        const char *close = memchr(p, ']', n);
                        if (!close)
                                return sf_conf_fail(err, errlen, "%s: missing ']' after an IPv6 address, expected tcp:[V6]:PORT%s", text, "");
                        hlen = (size_t)(close - p - 1);
                        if (hlen == 0 || !memchr(p + 1, ':', hlen))
                                return sf_conf_fail(err, errlen, "%s: bad IPv6 address in brackets, expected tcp:[V6]:PORT%s", text, "");
                        if (close + 1 >= p + n || close[1] != ':')
                                return sf_conf_fail(err, errlen, "%s: missing port, expected tcp:[V6]:PORT%s", text, "");
                        colon = close + 1;
                        if (hlen >= sizeof ep->host)
                                return sf_conf_fail(err, errlen, "%s: host is too long%s", text, "");
                        memcpy(ep->host, p + 1, hlen);
                } else {
                        colon = NULL;
                        for (size_t i = n; i > 0; i--)
                                if (p[i - 1] == ':') {
                                        colon = p + i - 1;
                                        break;
                                }
                        if (!colon)
                                return sf_conf_fail(err, errlen, "%s: missing port, expected tcp:HOST:PORT%s", text, "");
                        hlen = (size_t)(colon - p);
                        if (hlen == 0)
                                return sf_conf_fail(err, errlen, "%s: missing host, expected tcp:HOST:PORT (tcp:127.0.0.1:PORT for loopback, tcp:0.0.0.0:PORT for every address)%s", text, "");
                        if (memchr(p, ':', hlen))
                                return sf_conf_fail(err, errlen, "%s: an IPv6 address needs brackets, expected tcp:[V6]:PORT%s", text, "");
                        if (hlen >= sizeof ep->host)
                                return sf_conf_fail(err, errlen, "%s: host is too long%s", text, "");
                        memcpy(ep->host, p, hlen);
                }
                for (size_t i = 0; ep->host[i]; i++) {
                        char c = ep->host[i];
                        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                              c == '.' || c == '-' || c == '_' || c == ':' || c == '%'))
                                return sf_conf_fail(err, errlen, "%s: bad character in host name, expected tcp:HOST:PORT%s", text, "");
                }
                ep->kind = SF_EP_TCP;
                return parse_port(colon + 1, (size_t)(p + n - colon - 1), text, ep, err, errlen);
        }
        if (has_prefix(text, len, "vsock:")) {
                const char *p = text + 6;
                size_t n = len - 6;
                const char *colon = memchr(p, ':', n);
                if (!colon)
                        return sf_conf_fail(err, errlen, "%s: missing port, expected vsock:CID|host|any:PORT%s", text, "");
                size_t clen = (size_t)(colon - p);
                uint64_t v;
                if (clen == 4 && memcmp(p, "host", 4) == 0)
                        ep->cid = SF_VSOCK_CID_HOST;
                else if (clen == 3 && memcmp(p, "any", 3) == 0)
                        ep->cid = SF_VSOCK_CID_ANY;
                else if (parse_uint(p, clen, 0, 0xFFFFFFFEu, &v) == 0)
                        ep->cid = (uint32_t)v;
                else
                        return sf_conf_fail(err, errlen, "%s: bad CID, expected a number, 'host' (CID 2) or 'any'%s", text, "");
                const char *port = colon + 1;
                size_t plen = (size_t)(p + n - port);
                if (parse_uint(port, plen, 0, 0xFFFFFFFEu, &v) < 0)
                        return sf_conf_fail(err, errlen, "%s: bad vsock port, expected a number below 4294967295%s", text, "");
                ep->kind = SF_EP_VSOCK;
                ep->port = (uint32_t)v;
                return 0;
        }
        if (has_prefix(text, len, "systemd:")) {
                size_t n = len - 8;
                if (n == 0)
                        return sf_conf_fail(err, errlen, "%s: empty name, expected systemd:NAME (a FileDescriptorName= of the socket unit)%s", text, "");
                if (n >= sizeof ep->path)
                        return sf_conf_fail(err, errlen, "%s: name is too long%s", text, "");
                for (size_t i = 0; i < n; i++)
                        if (text[8 + i] == ':' || (unsigned char)text[8 + i] <= ' ')
                                return sf_conf_fail(err, errlen, "%s: bad character in name, expected systemd:NAME%s", text, "");
                ep->kind = SF_EP_SYSTEMD;
                memcpy(ep->path, text + 8, n);
                return 0;
        }
        if (has_prefix(text, len, "fd:")) {
                uint64_t v;
                if (parse_uint(text + 3, len - 3, 0, 65535, &v) < 0)
                        return sf_conf_fail(err, errlen, "%s: bad file descriptor, expected fd:N with N a number (3 is the first passed by systemd)%s", text, "");
                ep->kind = SF_EP_FD;
                ep->fd = (int)v;
                return 0;
        }
        if (has_prefix(text, len, "npipe:"))
                return parse_npipe(text, len, ep, err, errlen);
        if (text[0] == '/')
                return sf_conf_fail(err, errlen, "%s: missing transport, did you mean unix:%s?", text, text);
        return sf_conf_fail(err, errlen, "%s: unknown endpoint type, %s", text, EXPECTED);
}

int sf_endpoint_parse(const char *s, struct sf_endpoint *ep, char *err, size_t errlen) {
        return sf_endpoint_parse_n(s, strlen(s), ep, err, errlen);
}

bool sf_endpoint_equal(const struct sf_endpoint *a, const struct sf_endpoint *b) {
        if (a->kind != b->kind)
                return false;
        switch (a->kind) {
        case SF_EP_UNIX:
        case SF_EP_ABSTRACT:
        case SF_EP_SYSTEMD:
                return strcmp(a->path, b->path) == 0;
        case SF_EP_TCP:
                return a->port == b->port && strcasecmp(a->host, b->host) == 0;
        case SF_EP_VSOCK:
                return a->port == b->port && a->cid == b->cid;
        case SF_EP_FD:
                return a->fd == b->fd;
        case SF_EP_NPIPE:
                /* Windows' pipe names are case-insensitive. */
                return strcasecmp(a->pipe, b->pipe) == 0;
        }
        return false;
}

bool sf_endpoint_is_loopback(const struct sf_endpoint *ep) {
        if (ep->kind != SF_EP_TCP)
                return false;
        return strncmp(ep->host, "127.", 4) == 0 || strcmp(ep->host, "::1") == 0 ||
               strcasecmp(ep->host, "localhost") == 0;
}

const char *sf_endpoint_kind_name(enum sf_endpoint_kind kind) {
        switch (kind) {
        case SF_EP_UNIX: return "unix";
        case SF_EP_ABSTRACT: return "unix (abstract)";
        case SF_EP_TCP: return "tcp";
        case SF_EP_VSOCK: return "vsock";
        case SF_EP_SYSTEMD: return "systemd";
        case SF_EP_FD: return "fd";
        case SF_EP_NPIPE: return "npipe";
        }
        return "?";
}
