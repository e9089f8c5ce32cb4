#include "shim/netio.h"

#include <winsock2.h>
#include <ws2tcpip.h>
#include <windows.h>

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "relay/link/messages.h"

/* netio on Windows: a connection is a TCP socket or a named pipe opened for overlapped I/O,
 * kept in a slot whose index the callers hold as their int. */

#define SLOTS 8
#define PIPE_WAIT_STEP_MS 50

static struct slot {
        bool used, is_pipe;
        SOCKET sock;
        HANDLE pipe;
} slots[SLOTS];

int64_t sf_netio_now_ms(void) {
        return (int64_t)GetTickCount64();
}

static int errno_wsa(int err) {
        switch (err) {
        case WSAECONNREFUSED: return ECONNREFUSED;
        case WSAECONNRESET: return ECONNRESET;
        case WSAECONNABORTED: return ECONNABORTED;
        case WSAETIMEDOUT: return ETIMEDOUT;
        case WSAEHOSTUNREACH: return EHOSTUNREACH;
        case WSAENETUNREACH: return ENETUNREACH;
        case WSAENETDOWN: return ENETDOWN;
        case WSAEACCES: return EACCES;
        case WSAEADDRNOTAVAIL: return EADDRNOTAVAIL;
        case WSAEAFNOSUPPORT: return EAFNOSUPPORT;
        case WSAEWOULDBLOCK: return EAGAIN;
        case WSAEMFILE: return EMFILE;
        case WSAENOBUFS: return ENOBUFS;
        default: return EIO;
        }
}

static int slot_new(bool is_pipe, SOCKET sock, HANDLE pipe) {
        for (int i = 0; i < SLOTS; i++)
                if (!slots[i].used) {
                        slots[i] = (struct slot){ .used = true, .is_pipe = is_pipe, .sock = sock, .pipe = pipe };
                        return i;
                }
        if (is_pipe)
                CloseHandle(pipe);
        else
                closesocket(sock);
        return -EMFILE;
}

static int wsa_ready(void) {
        static bool done;
        WSADATA d;
        if (!done && WSAStartup(MAKEWORD(2, 2), &d) != 0)
                return -ENETDOWN;
        done = true;
        return 0;
}

/* Waits for events on s until deadline: 0 when they came, -ETIMEDOUT, or -errno. */
static int wait_for(SOCKET s, short events, int64_t deadline) {
        int64_t left = deadline - sf_netio_now_ms();
        if (left <= 0)
                return -ETIMEDOUT;
        WSAPOLLFD p = { .fd = s, .events = events };
        int r = WSAPoll(&p, 1, (int)(left > 60000 ? 60000 : left));
        if (r > 0)
                return 0;
        return r == 0 ? -ETIMEDOUT : -errno_wsa(WSAGetLastError());
}

static int connect_one(const struct addrinfo *ai, int64_t deadline) {
        SOCKET s = socket(ai->ai_family, SOCK_STREAM, IPPROTO_TCP);
        if (s == INVALID_SOCKET)
                return -errno_wsa(WSAGetLastError());
        u_long nb = 1;
        ioctlsocket(s, FIONBIO, &nb);
        int r = 0;
        if (connect(s, ai->ai_addr, (int)ai->ai_addrlen) == SOCKET_ERROR) {
                int e = WSAGetLastError();
                r = e == WSAEWOULDBLOCK ? wait_for(s, POLLOUT, deadline) : -errno_wsa(e);
                if (r == 0) {
                        int err = 0, len = sizeof err;
                        getsockopt(s, SOL_SOCKET, SO_ERROR, (char *)&err, &len);
                        r = err ? -errno_wsa(err) : 0;
                }
        }
        if (r < 0) {
                closesocket(s);
                return r;
        }
        return slot_new(false, s, NULL);
}

static int dial_tcp(const struct sf_endpoint *ep, int64_t deadline, char *err, size_t errlen) {
        int r = wsa_ready();
        if (r < 0)
                return r;
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG }, *res;
        char port[16];
        snprintf(port, sizeof port, "%u", ep->port);
        int g = getaddrinfo(ep->host, port, &hints, &res);
        if (g != 0) {
                sf_link_resolve_cause(ep, gai_strerror(g), err, errlen);
                return -EHOSTUNREACH;
        }
        r = -EHOSTUNREACH;
        for (struct addrinfo *ai = res; ai && r < 0; ai = ai->ai_next)
                r = connect_one(ai, deadline);
        freeaddrinfo(res);
        return r;
}

/* Waits while every instance is busy, as a client of a busy service should. */
static int dial_pipe(const struct sf_endpoint *ep, int64_t deadline) {
        wchar_t path[9 + SF_NPIPE_NAME_MAX + 1] = L"\\\\.\\pipe\\";
        if (!MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, ep->pipe, -1, path + 9, SF_NPIPE_NAME_MAX + 1))
                return -ENOENT;
        for (;;) {
                HANDLE h = CreateFileW(path, GENERIC_READ | GENERIC_WRITE, 0, NULL, OPEN_EXISTING,
                                       FILE_FLAG_OVERLAPPED | SECURITY_SQOS_PRESENT | SECURITY_IDENTIFICATION, NULL);
                if (h != INVALID_HANDLE_VALUE)
                        return slot_new(true, INVALID_SOCKET, h);
                DWORD e = GetLastError();
                int64_t left = deadline - sf_netio_now_ms();
                if (e == ERROR_PIPE_BUSY && left <= 0)
                        return -ETIMEDOUT;
                if (e != ERROR_PIPE_BUSY)
                        return -sf_win_errno(e);
                if (!WaitNamedPipeW(path, (DWORD)(left < PIPE_WAIT_STEP_MS ? left : PIPE_WAIT_STEP_MS)))
                        Sleep(1);
        }
}

int sf_netio_dial(const struct sf_endpoint *ep, uint64_t timeout_ms, char *err, size_t errlen) {
        int64_t deadline = sf_netio_deadline(timeout_ms);
        int r;
        err[0] = '\0';
        switch (ep->kind) {
        case SF_EP_TCP:
                r = dial_tcp(ep, deadline, err, errlen);
                break;
        case SF_EP_NPIPE:
                r = dial_pipe(ep, deadline);
                break;
        default:
                snprintf(err, errlen, "%s endpoints cannot be connected to on Windows", sf_endpoint_kind_name(ep->kind));
                return -EINVAL;
        }
        if (r < 0 && !err[0])
                sf_link_dial_cause(ep, r, timeout_ms, err, errlen);
        return r;
}

/* One overlapped ReadFile or WriteFile on a pipe, waited for until deadline (< 0: not at
 * all, for what is there already). Bytes moved, -ETIMEDOUT, -EPIPE at its end, or -errno. */
static ssize_t pipe_io(HANDLE h, bool write, void *buf, size_t len, int64_t deadline) {
        OVERLAPPED ov = { .hEvent = CreateEventW(NULL, TRUE, FALSE, NULL) };
        if (!ov.hEvent)
                return -ENOMEM;
        DWORD n = 0, chunk = len > 65536 ? 65536 : (DWORD)len;
        BOOL ok = write ? WriteFile(h, buf, chunk, NULL, &ov) : ReadFile(h, buf, chunk, NULL, &ov);
        ssize_t r;
        if (!ok && GetLastError() != ERROR_IO_PENDING) {
                r = -sf_win_errno(GetLastError());
        } else {
                int64_t left = deadline < 0 ? 0 : deadline - sf_netio_now_ms();
                if (WaitForSingleObject(ov.hEvent, (DWORD)(left > 0 ? left : 0)) != WAIT_OBJECT_0)
                        CancelIoEx(h, &ov);
                if (GetOverlappedResult(h, &ov, &n, TRUE))
                        r = (ssize_t)n;
                else if (GetLastError() == ERROR_OPERATION_ABORTED)
                        r = -ETIMEDOUT;
                else
                        r = -sf_win_errno(GetLastError());
        }
        CloseHandle(ov.hEvent);
        return r;
}

ssize_t sf_netio_read(int fd, void *buf, size_t len, int64_t deadline) {
        struct slot *s = &slots[fd];
        if (s->is_pipe) {
                ssize_t n = pipe_io(s->pipe, false, buf, len, deadline);
                return n == -EPIPE ? 0 : n;
        }
        for (;;) {
                int n = recv(s->sock, buf, (int)(len > INT_MAX ? INT_MAX : len), 0);
                if (n >= 0)
                        return n;
                int e = WSAGetLastError();
                if (e != WSAEWOULDBLOCK)
                        return -errno_wsa(e);
                int r = wait_for(s->sock, POLLIN, deadline);
                if (r < 0)
                        return r;
        }
}

int sf_netio_write_all(int fd, const void *buf, size_t len, int64_t deadline) {
        struct slot *s = &slots[fd];
        const char *p = buf;
        while (len > 0) {
                ssize_t n;
                if (s->is_pipe) {
                        n = pipe_io(s->pipe, true, (void *)p, len, deadline);
                } else {
                        n = send(s->sock, p, (int)(len > INT_MAX ? INT_MAX : len), 0);
                        if (n < 0) {
                                int e = WSAGetLastError();
                                if (e != WSAEWOULDBLOCK)
                                        return -errno_wsa(e);
                                int r = wait_for(s->sock, POLLOUT, deadline);
                                if (r < 0)
                                        return r;
                                continue;
                        }
                }
                if (n < 0)
                        return (int)n;
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

void sf_netio_close(int fd) {
        struct slot *s = &slots[fd];
        if (!s->used)
                return;
        if (s->is_pipe)
                CloseHandle(s->pipe);
        else
                closesocket(s->sock);
        s->used = false;
}
