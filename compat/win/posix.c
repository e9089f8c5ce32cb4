/* The calls compat/win/posix.h declares (the Windows build only). */
#include <windows.h>

#include <errno.h>
#include <io.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#undef strerror
#undef signal
#undef fclose

int sf_win_clock_gettime(int clock, struct timespec *ts) {
        FILETIME ft;
        (void)clock;
        GetSystemTimePreciseAsFileTime(&ft);
        /* 100 ns ticks since 1601-01-01; the Unix epoch is 11644473600 s later. */
        unsigned long long t = ((unsigned long long)ft.dwHighDateTime << 32 | ft.dwLowDateTime) - 116444736000000000ULL;
        ts->tv_sec = (time_t)(t / 10000000ULL);
        ts->tv_nsec = (long)(t % 10000000ULL) * 100;
        return 0;
}

/* glibc's words for the errno values the relay reports that the Windows C library does not
 * name (mingw-w64's errno.h numbers them from 100). */
static const struct {
        int err;
        const char *text;
} socket_errors[] = {
        { EADDRINUSE, "Address already in use" },
        { EADDRNOTAVAIL, "Cannot assign requested address" },
        { EAFNOSUPPORT, "Address family not supported by protocol" },
        { EALREADY, "Operation already in progress" },
        { ECANCELED, "Operation canceled" },
        { ECONNABORTED, "Software caused connection abort" },
        { ECONNREFUSED, "Connection refused" },
        { ECONNRESET, "Connection reset by peer" },
        { EHOSTUNREACH, "No route to host" },
        { EINPROGRESS, "Operation now in progress" },
        { EISCONN, "Transport endpoint is already connected" },
        { EMSGSIZE, "Message too long" },
        { ENETDOWN, "Network is down" },
        { ENETUNREACH, "Network is unreachable" },
        { ENOBUFS, "No buffer space available" },
        { ENOTCONN, "Transport endpoint is not connected" },
        { ENOTSOCK, "Socket operation on non-socket" },
        { ENOTSUP, "Operation not supported" },
        { EPROTO, "Protocol error" },
        { EPROTONOSUPPORT, "Protocol not supported" },
        { ETIMEDOUT, "Connection timed out" },
        { EWOULDBLOCK, "Resource temporarily unavailable" },
        { ESHUTDOWN, "Cannot send after transport endpoint shutdown" },
        { EOVERFLOW, "Value too large for defined data type" },
};

char *sf_win_strerror(int err) {
        for (size_t i = 0; i < sizeof socket_errors / sizeof socket_errors[0]; i++)
                if (socket_errors[i].err == err)
                        return (char *)socket_errors[i].text;
        return strerror(err);
}

/* The one Win32 error -> errno map of the Windows build (relay/, shim/, compat/). Where libuv
 * maps a code (uv_translate_sys_error) this agrees with it: a name that is not valid is ENOENT,
 * a file another program holds open without sharing it (or locked) is EBUSY. ERROR_PIPE_BUSY is
 * EAGAIN, not libuv's EBUSY: for the dialer every instance being busy is a full backlog, retried
 * until connect-timeout. */
int sf_win_errno(unsigned long err) {
        switch (err) {
        case ERROR_PIPE_BUSY: return EAGAIN;
        case ERROR_FILE_NOT_FOUND:
        case ERROR_PATH_NOT_FOUND:
        case ERROR_BAD_PATHNAME:
        case ERROR_INVALID_NAME: return ENOENT;
        case ERROR_DIRECTORY: return ENOTDIR;
        case ERROR_ACCESS_DENIED: return EACCES;
        case ERROR_SHARING_VIOLATION:
        case ERROR_LOCK_VIOLATION: return EBUSY;
        case ERROR_FILE_EXISTS:
        case ERROR_ALREADY_EXISTS: return EEXIST;
        case ERROR_NOT_ENOUGH_MEMORY:
        case ERROR_OUTOFMEMORY: return ENOMEM;
        case ERROR_DISK_FULL:
        case ERROR_HANDLE_DISK_FULL: return ENOSPC;
        case ERROR_FILENAME_EXCED_RANGE: return ENAMETOOLONG;
        case ERROR_TOO_MANY_OPEN_FILES: return EMFILE;
        case ERROR_SEM_TIMEOUT: return ETIMEDOUT;
        case ERROR_BROKEN_PIPE:
        case ERROR_PIPE_NOT_CONNECTED:
        case ERROR_NO_DATA: return EPIPE;
        default: return EIO;
        }
}

const char *sf_win_gai_strerror(int code) {
        static char text[256];
        DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, (DWORD)code, 0, text,
                                 sizeof text, NULL);
        while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == '.'))
                text[--n] = '\0';
        if (n == 0)
                snprintf(text, sizeof text, "name resolution failed (error %d)", code);
        return text;
}

sf_win_sighandler sf_win_signal(int sig, sf_win_sighandler handler) {
        switch (sig) {
        case SIGINT:
        case SIGILL:
        case SIGFPE:
        case SIGSEGV:
        case SIGTERM:
        case SIGBREAK:
        case SIGABRT:
                return signal(sig, handler);
        default:
                errno = EINVAL;
                return SIG_ERR;
        }
}

const char *sf_win_strsignal(int sig) {
        switch (sig) {
        case SIGINT: return "Interrupt (Ctrl+C)";
        case SIGBREAK: return "Break (Ctrl+Break)";
        case SIGTERM: return "Terminated";
        case 1: return "Console closed"; /* libuv's SIGHUP (uv/win.h) */
        default: return "Signal";
        }
}

/* open_memstream's streams: few, short-lived (one stats answer each). */
#define MEMSTREAMS 16
static struct {
        FILE *f;
        char **buf;
        size_t *len;
} memstreams[MEMSTREAMS];
static SRWLOCK memstreams_lock = SRWLOCK_INIT;

FILE *open_memstream(char **buf, size_t *len) {
        wchar_t dir[MAX_PATH + 1], path[MAX_PATH + 1];
        if (!GetTempPathW(MAX_PATH + 1, dir) || !GetTempFileNameW(dir, L"sfm", 0, path)) {
                errno = EIO;
                return NULL;
        }
        HANDLE h = CreateFileW(path, GENERIC_READ | GENERIC_WRITE, 0, NULL, CREATE_ALWAYS,
                               FILE_ATTRIBUTE_TEMPORARY | FILE_FLAG_DELETE_ON_CLOSE, NULL);
        if (h == INVALID_HANDLE_VALUE) {
                DeleteFileW(path);
                errno = EIO;
                return NULL;
        }
        int fd = _open_osfhandle((intptr_t)h, _O_RDWR | _O_BINARY);
        FILE *f = fd < 0 ? NULL : _fdopen(fd, "w+b");
        if (!f) {
                if (fd >= 0)
                        _close(fd);
                else
                        CloseHandle(h);
                errno = ENOMEM;
                return NULL;
        }
        AcquireSRWLockExclusive(&memstreams_lock);
        for (size_t i = 0; i < MEMSTREAMS; i++)
                if (!memstreams[i].f) {
                        memstreams[i].f = f;
                        memstreams[i].buf = buf;
                        memstreams[i].len = len;
                        ReleaseSRWLockExclusive(&memstreams_lock);
                        *buf = NULL;
                        *len = 0;
                        return f;
                }
        ReleaseSRWLockExclusive(&memstreams_lock);
        fclose(f);
        errno = EMFILE;
        return NULL;
}

/* A memory stream's contents go to its caller's buffer, NUL-terminated as open_memstream's. */
int sf_win_fclose(FILE *f) {
        char **buf = NULL;
        size_t *len = NULL;
        AcquireSRWLockExclusive(&memstreams_lock);
        for (size_t i = 0; i < MEMSTREAMS; i++)
                if (memstreams[i].f == f) {
                        buf = memstreams[i].buf;
                        len = memstreams[i].len;
                        memstreams[i].f = NULL;
                }
        ReleaseSRWLockExclusive(&memstreams_lock);
        if (!buf)
                return fclose(f);
        long n = fflush(f) == 0 ? ftell(f) : -1;
        char *p = n >= 0 ? malloc((size_t)n + 1) : NULL;
        if (p) {
                rewind(f);
                if (fread(p, 1, (size_t)n, f) != (size_t)n) {
                        free(p);
                        p = NULL;
                }
        }
        if (p) {
                p[n] = '\0';
                *buf = p;
                *len = (size_t)n;
        }
        int r = fclose(f);
        return p ? r : EOF;
}
