#pragma once
/* Force-included in the Windows build (compat/win/README.md): the POSIX types and calls the
 * sources use, in Windows' terms. */
#include <errno.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

/* Accounts are SIDs on Windows: user/group keys are refused there (conf/account_win.c), and
 * these types only keep the configuration structures' shape. */
typedef uint32_t uid_t;
typedef uint32_t gid_t;

/* The socket errno names mingw-w64's errno.h lacks. */
#ifndef ESHUTDOWN
#define ESHUTDOWN 200
#endif
#ifndef EPFNOSUPPORT
#define EPFNOSUPPORT 201
#endif

#ifndef CLOCK_REALTIME
#define CLOCK_REALTIME 0
#endif

/* The wall clock to the tenth of a microsecond (the only clock the sources read this way). */
int sf_win_clock_gettime(int clock, struct timespec *ts);
#define clock_gettime sf_win_clock_gettime

static inline struct tm *gmtime_r(const time_t *t, struct tm *out) {
        return gmtime_s(out, t) == 0 ? out : NULL;
}

/* The C library's strerror knows the classic errno values only: the socket ones (ECONNREFUSED,
 * ETIMEDOUT, ...) would read "Unknown error". */
#include <string.h>
char *sf_win_strerror(int err);
#define strerror sf_win_strerror

/* File status flags Windows does not have: a config or token file opens the same without them
 * (O_NOINHERIT is close-on-exec's counterpart). */
#include <fcntl.h>
#define O_CLOEXEC O_NOINHERIT
#define O_NONBLOCK 0
#define O_NOCTTY 0
#define F_SETFL 4
static inline int fcntl(int fd, int cmd, ...) {
        (void)fd;
        (void)cmd;
        return 0;
}

/* No sockets or block devices in the file system a config or token path can name. */
#include <sys/stat.h>
#ifndef S_IFSOCK
#define S_IFSOCK 0140000
#endif
#ifndef S_IFBLK
#define S_IFBLK 0060000
#endif
#define S_ISSOCK(m) (((m) & S_IFMT) == S_IFSOCK)
#ifndef S_ISBLK
#define S_ISBLK(m) (((m) & S_IFMT) == S_IFBLK)
#endif

/* No clock ticks to convert /proc's numbers with: there is no /proc. */
#define _SC_CLK_TCK 2
static inline long sysconf(int name) {
        (void)name;
        return -1;
}

/* Signals: the C library aborts on a number it does not know (its invalid-parameter handler),
 * where POSIX code expects SIG_ERR; SIGPIPE does not exist (a send to a closed socket fails
 * with an error instead). */
#include <signal.h>
#define SIGPIPE 13
typedef void (*sf_win_sighandler)(int);
sf_win_sighandler sf_win_signal(int sig, sf_win_sighandler handler);
#define signal sf_win_signal
const char *sf_win_strsignal(int sig);
#define strsignal sf_win_strsignal

/* open_memstream, on a temporary file deleted on close: *buf and *len are set by fclose. */
#include <stdio.h>
FILE *open_memstream(char **buf, size_t *len);
int sf_win_fclose(FILE *f);
#define fclose sf_win_fclose

/* mingw-w64 declares gai_strerror but links no definition of it: the resolver's codes are
 * Windows errors, which FormatMessage names. ws2tcpip.h defines the name as a macro of its
 * own, so it comes first. */
#include <winsock2.h>
#include <ws2tcpip.h>
#undef gai_strerror
const char *sf_win_gai_strerror(int code);
#define gai_strerror sf_win_gai_strerror

/* The errno value of a Win32 error from opening or using a file or a named pipe (EIO for what
 * has no counterpart); a busy pipe is EAGAIN, as a full backlog is. */
int sf_win_errno(unsigned long err);
