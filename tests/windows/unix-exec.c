/* NAME.exe: a Windows program that runs the Linux program NAME under Wine through
 * tests/windows/unix_exec_server.py, with its arguments, standard input, output and error, and
 * exits with its status. CI's stand-in for the Windows build of a CLI (docker.exe, gpgconf.exe)
 * in front of the real Linux one.
 *
 * Why not let Wine start the Linux program: it does, from CreateProcess, but hands it /dev/null
 * for pipe handles (sockferry.exe's standard streams for its child are pipes), gives back a
 * process handle that AssignProcessToJobObject refuses (libuv's uv_spawn stops the program
 * then), and one that is signalled at once, so the end and the status cannot be waited for.
 * Sockets are what Wine and Linux share: three connections to the server on 127.0.0.1:PORT
 * (SF_UNIX_EXEC_PORT), "C" carrying the name and arguments one way and the exit status the
 * other, "O" standard input and output, "E" standard error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>
#include <winsock2.h>
#include <windows.h>
#include <shellapi.h>

struct copy {
        HANDLE from_h, to_h;
        SOCKET from_s, to_s;
};

static DWORD WINAPI copy_thread(void *arg) {
        struct copy *c = arg;
        char *buf = malloc(65536);
        if (!buf)
                return 0;
        for (;;) {
                int n;
                if (c->from_s != INVALID_SOCKET) {
                        n = recv(c->from_s, buf, 65536, 0);
                } else {
                        DWORD got = 0;
                        n = ReadFile(c->from_h, buf, 65536, &got, NULL) ? (int)got : 0;
                }
                if (n <= 0)
                        break;
                for (int off = 0; off < n;) {
                        int w;
                        if (c->to_s != INVALID_SOCKET) {
                                w = send(c->to_s, buf + off, n - off, 0);
                        } else {
                                DWORD put = 0;
                                w = WriteFile(c->to_h, buf + off, (DWORD)(n - off), &put, NULL) ? (int)put : -1;
                        }
                        if (w <= 0)
                                return 0;
                        off += w;
                }
        }
        if (c->to_s != INVALID_SOCKET)
                shutdown(c->to_s, SD_SEND);
        return 0;
}

static SOCKET connect_to(int port, const char *hello, size_t len) {
        SOCKET s = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((u_short)port) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (s == INVALID_SOCKET || connect(s, (struct sockaddr *)&a, sizeof a) != 0 || send(s, hello, (int)len, 0) != (int)len) {
                fprintf(stderr, "unix-exec: cannot reach the server on 127.0.0.1:%d: %d\n", port, WSAGetLastError());
                exit(127);
        }
        return s;
}

int main(void) {
        WSADATA wsa;
        WSAStartup(MAKEWORD(2, 2), &wsa);
        const char *port_s = getenv("SF_UNIX_EXEC_PORT");
        int port = port_s ? atoi(port_s) : 0;
        if (port <= 0) {
                fprintf(stderr, "unix-exec: SF_UNIX_EXEC_PORT is not set\n");
                return 127;
        }
        /* The name: this program's file name without .exe. */
        wchar_t self[MAX_PATH];
        DWORD n = GetModuleFileNameW(NULL, self, MAX_PATH);
        if (n == 0 || n >= MAX_PATH)
                return 127;
        wchar_t *base = wcsrchr(self, L'\\');
        base = base ? base + 1 : self;
        wchar_t *dot = wcsrchr(base, L'.');
        if (dot)
                *dot = L'\0';
        /* "C id\n" then NAME and each argument, each ended by NUL, then an empty one. */
        static char msg[65536];
        unsigned id = GetCurrentProcessId();
        int len = snprintf(msg, sizeof msg, "C %u\n", id);
        int argc;
        wchar_t **argv = CommandLineToArgvW(GetCommandLineW(), &argc);
        for (int i = 0; i < argc; i++) {
                const wchar_t *w = i == 0 ? base : argv[i];
                int k = WideCharToMultiByte(CP_UTF8, 0, w, -1, msg + len, (int)sizeof msg - len - 1, NULL, NULL);
                if (k <= 0) {
                        fprintf(stderr, "unix-exec: arguments too long\n");
                        return 127;
                }
                len += k; /* with its NUL */
        }
        msg[len++] = '\0';
        char hello[32];
        SOCKET c = connect_to(port, msg, (size_t)len);
        int hl = snprintf(hello, sizeof hello, "O %u\n", id);
        SOCKET o = connect_to(port, hello, (size_t)hl);
        hl = snprintf(hello, sizeof hello, "E %u\n", id);
        SOCKET e = connect_to(port, hello, (size_t)hl);
        static struct copy in, out, err;
        in = (struct copy){ .from_h = GetStdHandle(STD_INPUT_HANDLE), .from_s = INVALID_SOCKET, .to_s = o };
        out = (struct copy){ .from_s = o, .to_h = GetStdHandle(STD_OUTPUT_HANDLE), .to_s = INVALID_SOCKET };
        err = (struct copy){ .from_s = e, .to_h = GetStdHandle(STD_ERROR_HANDLE), .to_s = INVALID_SOCKET };
        CreateThread(NULL, 0, copy_thread, &in, 0, NULL);
        HANDLE t_out = CreateThread(NULL, 0, copy_thread, &out, 0, NULL);
        HANDLE t_err = CreateThread(NULL, 0, copy_thread, &err, 0, NULL);
        /* The status, once the program ended; then what it wrote last. */
        char status[32] = "";
        int got = 0, r;
        while (got < (int)sizeof status - 1 && (r = recv(c, status + got, (int)sizeof status - 1 - got, 0)) > 0)
                got += r;
        status[got] = '\0';
        WaitForSingleObject(t_out, 10000);
        WaitForSingleObject(t_err, 10000);
        return got ? atoi(status) : 127;
}
