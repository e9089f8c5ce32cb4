/* The Windows side of the Wine tests (tests/ci/windows.sh builds it; not shipped):
 * services and clients on named pipes and TCP, written against the Win32 API only, so what
 * works here works for sockferry.exe's libuv on the same Wine.
 *
 *   npipe-service echo NAME [--instances N]  echo server on \\.\pipe\NAME: a thread per client,
 *                                            at most N instances at once (default: unlimited)
 *   npipe-service hold NAME SECONDS          ONE instance: accepts one client, reads nothing
 *                                            for SECONDS (others get ERROR_PIPE_BUSY), then
 *                                            echoes to it and to the next clients, one at a time
 *   npipe-service client NAME                sends stdin to \\.\pipe\NAME (waiting while it is
 *                                            busy, or absent up to 2 s), prints the reply: as many
 *                                            bytes as were sent
 *   npipe-service tcp-echo PORT              echo server on 127.0.0.1:PORT
 *   npipe-service tcp-client PORT            as client, over TCP to 127.0.0.1:PORT
 *   npipe-service afunix                     socket(AF_UNIX, SOCK_STREAM): prints the result
 *   npipe-service handles PID|IMAGE.exe      "PID COUNT SOURCE": handles a process holds
 *
 * Servers print "ready" on stdout once clients can connect. Exit status: 0 done, 1 failure
 * (the message names the call and the Windows error), 2 afunix: not supported, 64 usage.
 */
#include <winsock2.h>
#include <ws2tcpip.h>
#include <windows.h>
#include <tlhelp32.h>

#include <fcntl.h>
#include <io.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_SIZE 65536
/* client: stdin is read whole before sending, so that the reply's end is known. */
#define CLIENT_MAX (64u << 20)

static wchar_t pipe_path[300];

static int usage(void)
{
        fputs("usage: npipe-service echo NAME [--instances N] | hold NAME SECONDS | client NAME |\n"
              "       tcp-echo PORT | tcp-client PORT | afunix | handles PID|IMAGE.exe\n", stderr);
        return 64;
}

static int fail(const char *what, DWORD err)
{
        char msg[256] = "";
        FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, err, 0, msg,
                       sizeof(msg), NULL);
        msg[strcspn(msg, "\r\n")] = '\0';
        fprintf(stderr, "npipe-service: %s: error %lu (%s)\n", what, (unsigned long)err, msg);
        return 1;
}

static void ready(void)
{
        puts("ready");
        fflush(stdout);
}

static int set_pipe_path(const char *name)
{
        if (strlen(name) > 256 || strpbrk(name, "\\/")) {
                fprintf(stderr, "npipe-service: bad pipe name '%s': 1 to 256 characters, no \\ or /\n", name);
                return -1;
        }
        swprintf(pipe_path, sizeof(pipe_path) / sizeof(pipe_path[0]), L"\\\\.\\pipe\\%hs", name);
        return 0;
}

/* ---- named pipes ------------------------------------------------------------------------ */

static HANDLE pipe_instance(DWORD max_instances)
{
        return CreateNamedPipeW(pipe_path, PIPE_ACCESS_DUPLEX,
                                PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS,
                                max_instances, BUF_SIZE, BUF_SIZE, 0, NULL);
}

/* Waits for a client on instance h; a client that connected between CreateNamedPipe and
 * ConnectNamedPipe counts too. */
static BOOL pipe_accept(HANDLE h)
{
        return ConnectNamedPipe(h, NULL) || GetLastError() == ERROR_PIPE_CONNECTED;
}

/* Echoes until the client closes its end. */
static void pipe_echo(HANDLE h)
{
        char buf[BUF_SIZE];
        DWORD n, w;
        while (ReadFile(h, buf, sizeof(buf), &n, NULL) && n > 0)
                for (DWORD off = 0; off < n; off += w)
                        if (!WriteFile(h, buf + off, n - off, &w, NULL))
                                return;
}

static HANDLE instance_slots;

static DWORD WINAPI pipe_client_thread(LPVOID arg)
{
        HANDLE h = arg;
        pipe_echo(h);
        FlushFileBuffers(h);
        DisconnectNamedPipe(h);
        CloseHandle(h);
        ReleaseSemaphore(instance_slots, 1, NULL);
        return 0;
}

static int echo_main(DWORD max_instances)
{
        LONG slots = max_instances == PIPE_UNLIMITED_INSTANCES ? 1 << 20 : (LONG)max_instances;
        instance_slots = CreateSemaphoreW(NULL, slots, slots, NULL);
        if (!instance_slots)
                return fail("CreateSemaphore", GetLastError());
        for (int first = 1;; first = 0) {
                WaitForSingleObject(instance_slots, INFINITE);
                HANDLE h = pipe_instance(max_instances);
                if (h == INVALID_HANDLE_VALUE)
                        return fail("CreateNamedPipe", GetLastError());
                if (first)
                        ready();
                if (!pipe_accept(h)) {
                        fail("ConnectNamedPipe", GetLastError());
                        CloseHandle(h);
                        ReleaseSemaphore(instance_slots, 1, NULL);
                        continue;
                }
                HANDLE t = CreateThread(NULL, 0, pipe_client_thread, h, 0, NULL);
                if (!t)
                        return fail("CreateThread", GetLastError());
                CloseHandle(t);
        }
}

static int hold_main(unsigned seconds)
{
        HANDLE h = pipe_instance(1);
        if (h == INVALID_HANDLE_VALUE)
                return fail("CreateNamedPipe", GetLastError());
        ready();
        for (int first = 1;; first = 0) {
                if (!pipe_accept(h))
                        return fail("ConnectNamedPipe", GetLastError());
                if (first) {
                        printf("holding %u s\n", seconds);
                        fflush(stdout);
                        Sleep(seconds * 1000u);
                        puts("released");
                        fflush(stdout);
                }
                pipe_echo(h);
                FlushFileBuffers(h);
                DisconnectNamedPipe(h);
        }
}

/* ---- clients ------------------------------------------------------------------------------ */

struct conn {
        int (*send)(struct conn *c, const char *p, DWORD n, DWORD *sent);
        int (*recv)(struct conn *c, char *p, DWORD n, DWORD *got);
        HANDLE h;
        SOCKET s;
        const char *data;
        DWORD len;
};

static int pipe_send(struct conn *c, const char *p, DWORD n, DWORD *sent)
{
        return WriteFile(c->h, p, n, sent, NULL) ? 0 : -1;
}

static int pipe_recv(struct conn *c, char *p, DWORD n, DWORD *got)
{
        return ReadFile(c->h, p, n, got, NULL) ? 0 : -1;
}

static int sock_send(struct conn *c, const char *p, DWORD n, DWORD *sent)
{
        int r = send(c->s, p, (int)(n > INT_MAX ? INT_MAX : n), 0);
        *sent = r > 0 ? (DWORD)r : 0;
        return r > 0 ? 0 : -1;
}

static int sock_recv(struct conn *c, char *p, DWORD n, DWORD *got)
{
        int r = recv(c->s, p, (int)(n > INT_MAX ? INT_MAX : n), 0);
        *got = r > 0 ? (DWORD)r : 0;
        return r >= 0 ? 0 : -1;
}

static DWORD WINAPI sender_thread(LPVOID arg)
{
        struct conn *c = arg;
        DWORD w;
        for (DWORD off = 0; off < c->len; off += w)
                if (c->send(c, c->data + off, c->len - off, &w) < 0)
                        return 1;
        return 0;
}

/* Sends stdin from a second thread while this one prints the reply, until as many bytes came
 * back as were sent: a pipe has no half-close to say the request is complete. */
static int client_run(struct conn *c)
{
        static char buf[BUF_SIZE];
        char *data = malloc(CLIENT_MAX);
        DWORD len = 0, n, got = 0;
        HANDLE in = GetStdHandle(STD_INPUT_HANDLE);
        if (!data)
                return fail("malloc", ERROR_NOT_ENOUGH_MEMORY);
        while (len < CLIENT_MAX && ReadFile(in, data + len, CLIENT_MAX - len, &n, NULL) && n > 0)
                len += n;
        c->data = data;
        c->len = len;
        HANDLE t = CreateThread(NULL, 0, sender_thread, c, 0, NULL);
        if (!t)
                return fail("CreateThread", GetLastError());
        HANDLE out = GetStdHandle(STD_OUTPUT_HANDLE);
        while (got < len) {
                if (c->recv(c, buf, sizeof(buf), &n) < 0 || n == 0) {
                        fprintf(stderr, "npipe-service: the reply ended after %lu of %lu bytes\n",
                                (unsigned long)got, (unsigned long)len);
                        return 1;
                }
                for (DWORD off = 0, w; off < n; off += w)
                        if (!WriteFile(out, buf + off, n - off, &w, NULL))
                                return fail("WriteFile(stdout)", GetLastError());
                got += n;
        }
        WaitForSingleObject(t, INFINITE);
        free(data);
        return 0;
}

static int client_main(void)
{
        HANDLE h;
        /* A busy pipe (every instance connected) is waited for, as a client should; so is a
         * pipe between two instances for a moment (the last one closed, the next one not yet
         * created: the name does not exist then). */
        for (int absent = 0;;) {
                h = CreateFileW(pipe_path, GENERIC_READ | GENERIC_WRITE, 0, NULL, OPEN_EXISTING, 0, NULL);
                if (h != INVALID_HANDLE_VALUE)
                        break;
                DWORD err = GetLastError();
                if (err == ERROR_FILE_NOT_FOUND && ++absent < 40) {
                        Sleep(50);
                        continue;
                }
                if (err != ERROR_PIPE_BUSY)
                        return fail("CreateFile(pipe)", err);
                if (!WaitNamedPipeW(pipe_path, 20000))
                        return fail("WaitNamedPipe", GetLastError());
        }
        struct conn c = { .send = pipe_send, .recv = pipe_recv, .h = h };
        int rc = client_run(&c);
        CloseHandle(h);
        return rc;
}

/* ---- TCP ------------------------------------------------------------------------------------ */

static int wsa_start(void)
{
        WSADATA wsa;
        int err = WSAStartup(MAKEWORD(2, 2), &wsa);
        return err ? fail("WSAStartup", (DWORD)err) : 0;
}

static struct sockaddr_in loopback(unsigned short port)
{
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        return a;
}

static DWORD WINAPI tcp_client_thread(LPVOID arg)
{
        SOCKET s = (SOCKET)(ULONG_PTR)arg;
        char buf[BUF_SIZE];
        int n;
        while ((n = recv(s, buf, sizeof(buf), 0)) > 0)
                for (int off = 0, w; off < n; off += w)
                        if ((w = send(s, buf + off, n - off, 0)) <= 0)
                                goto out;
        shutdown(s, SD_SEND);
out:
        closesocket(s);
        return 0;
}

/* A TCP socket and 127.0.0.1:port; 1 after saying why when there is none. */
static int tcp_socket(unsigned short port, SOCKET *s, struct sockaddr_in *a)
{
        if (wsa_start())
                return 1;
        *s = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
        *a = loopback(port);
        return *s == INVALID_SOCKET ? fail("socket(AF_INET)", (DWORD)WSAGetLastError()) : 0;
}

static int tcp_echo_main(unsigned short port)
{
        SOCKET l;
        struct sockaddr_in a;
        if (tcp_socket(port, &l, &a))
                return 1;
        if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, SOMAXCONN))
                return fail("bind/listen 127.0.0.1", (DWORD)WSAGetLastError());
        ready();
        for (;;) {
                SOCKET s = accept(l, NULL, NULL);
                if (s == INVALID_SOCKET)
                        return fail("accept", (DWORD)WSAGetLastError());
                HANDLE t = CreateThread(NULL, 0, tcp_client_thread, (LPVOID)(ULONG_PTR)s, 0, NULL);
                if (!t)
                        return fail("CreateThread", GetLastError());
                CloseHandle(t);
        }
}

static int tcp_client_main(unsigned short port)
{
        SOCKET s;
        struct sockaddr_in a;
        if (tcp_socket(port, &s, &a))
                return 1;
        if (connect(s, (struct sockaddr *)&a, sizeof(a)))
                return fail("connect 127.0.0.1", (DWORD)WSAGetLastError());
        struct conn c = { .send = sock_send, .recv = sock_recv, .s = s };
        int rc = client_run(&c);
        closesocket(s);
        return rc;
}

static int afunix_main(void)
{
        if (wsa_start())
                return 1;
        /* AF_UNIX is 1 on Windows too; mingw's headers of zig 0.11 lack <afunix.h>. */
        SOCKET s = socket(1, SOCK_STREAM, 0);
        if (s != INVALID_SOCKET) {
                puts("afunix: socket(AF_UNIX, SOCK_STREAM) succeeded");
                closesocket(s);
                return 0;
        }
        int err = WSAGetLastError();
        printf("afunix: socket(AF_UNIX, SOCK_STREAM) failed: WSA error %d%s\n", err,
               err == WSAEAFNOSUPPORT ? " (WSAEAFNOSUPPORT)" : "");
        return 2;
}

/* ---- handle counts ------------------------------------------------------------------------- */

/* NtQuerySystemInformation(SystemExtendedHandleInformation): every handle of every process.
 * Wine answers GetProcessHandleCount with 0 for any process; its wineserver does list the
 * handles here, so the count comes from this table when GetProcessHandleCount has none. */
#define SF_SYSTEM_EXTENDED_HANDLE_INFORMATION 64
#define SF_STATUS_INFO_LENGTH_MISMATCH ((LONG)0xC0000004)
struct sf_handle_entry {
        PVOID object;
        ULONG_PTR pid;
        ULONG_PTR handle;
        ULONG access;
        USHORT backtrace;
        USHORT type;
        ULONG attributes;
        ULONG reserved;
};
struct sf_handle_table {
        ULONG_PTR count;
        ULONG_PTR reserved;
        struct sf_handle_entry entries[];
};
typedef LONG(WINAPI *nt_query_fn)(ULONG, PVOID, ULONG, PULONG);

static int table_handle_count(DWORD pid, DWORD *count)
{
        nt_query_fn query = (nt_query_fn)(void (*)(void))GetProcAddress(GetModuleHandleW(L"ntdll.dll"),
                                                                        "NtQuerySystemInformation");
        ULONG size = 1 << 20, need = 0;
        struct sf_handle_table *t = NULL;
        LONG st = SF_STATUS_INFO_LENGTH_MISMATCH;
        if (!query)
                return fail("GetProcAddress(NtQuerySystemInformation)", GetLastError());
        while (st == SF_STATUS_INFO_LENGTH_MISMATCH && size <= (256u << 20)) {
                free(t);
                if (!(t = malloc(size)))
                        return fail("malloc", ERROR_NOT_ENOUGH_MEMORY);
                st = query(SF_SYSTEM_EXTENDED_HANDLE_INFORMATION, t, size, &need);
                size = need > size ? need + 65536 : size * 2;
        }
        if (st < 0) {
                free(t);
                fprintf(stderr, "npipe-service: NtQuerySystemInformation(SystemExtendedHandleInformation): status 0x%08lx\n",
                        (unsigned long)st);
                return 1;
        }
        *count = 0;
        for (ULONG_PTR i = 0; i < t->count; i++)
                *count += t->entries[i].pid == pid;
        free(t);
        return 0;
}

static int print_handles(DWORD pid)
{
        DWORD count = 0;
        const char *source = "GetProcessHandleCount";
        HANDLE p = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, pid);
        if (!p)
                return fail("OpenProcess", GetLastError());
        if (!GetProcessHandleCount(p, &count))
                count = 0;
        CloseHandle(p);
        if (count == 0) {
                source = "system handle table";
                if (table_handle_count(pid, &count))
                        return 1;
        }
        printf("%lu %lu %s\n", (unsigned long)pid, (unsigned long)count, source);
        return 0;
}

/* A PID, or every other process running an image of that name (Wine's PIDs are not Linux's). */
static int handles_main(const char *arg)
{
        char *end;
        unsigned long pid = strtoul(arg, &end, 10);
        if (*arg && !*end)
                return print_handles((DWORD)pid);
        HANDLE snap = CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0);
        PROCESSENTRY32 pe = { .dwSize = sizeof(pe) };
        int found = 0, rc = 0;
        if (snap == INVALID_HANDLE_VALUE)
                return fail("CreateToolhelp32Snapshot", GetLastError());
        for (BOOL ok = Process32First(snap, &pe); ok; ok = Process32Next(snap, &pe))
                if (!_stricmp(pe.szExeFile, arg) && pe.th32ProcessID != GetCurrentProcessId()) {
                        found = 1;
                        rc |= print_handles(pe.th32ProcessID);
                }
        CloseHandle(snap);
        if (!found) {
                fprintf(stderr, "npipe-service: no process runs %s\n", arg);
                return 1;
        }
        return rc;
}

static int parse_uint(const char *s, unsigned long max, unsigned long *v)
{
        char *end;
        *v = strtoul(s, &end, 10);
        return *s && !*end && *v >= 1 && *v <= max ? 0 : -1;
}

int main(int argc, char **argv)
{
        unsigned long v;
        /* "ready\n", not "ready\r\n": the tests read these lines on Linux. */
        _setmode(_fileno(stdout), _O_BINARY);
        if (argc < 2)
                return usage();
        const char *mode = argv[1];
        if (!strcmp(mode, "echo") && (argc == 3 || (argc == 5 && !strcmp(argv[3], "--instances")))) {
                DWORD max = PIPE_UNLIMITED_INSTANCES;
                if (argc == 5) {
                        if (parse_uint(argv[4], PIPE_UNLIMITED_INSTANCES - 1, &v))
                                return usage();
                        max = (DWORD)v;
                }
                return set_pipe_path(argv[2]) ? 64 : echo_main(max);
        }
        if (!strcmp(mode, "hold") && argc == 4)
                return set_pipe_path(argv[2]) || parse_uint(argv[3], 3600, &v) ? usage() : hold_main((unsigned)v);
        if (!strcmp(mode, "client") && argc == 3)
                return set_pipe_path(argv[2]) ? 64 : client_main();
        if (!strcmp(mode, "tcp-echo") && argc == 3)
                return parse_uint(argv[2], 65535, &v) ? usage() : tcp_echo_main((unsigned short)v);
        if (!strcmp(mode, "tcp-client") && argc == 3)
                return parse_uint(argv[2], 65535, &v) ? usage() : tcp_client_main((unsigned short)v);
        if (!strcmp(mode, "afunix") && argc == 2)
                return afunix_main();
        if (!strcmp(mode, "handles") && argc == 3)
                return handles_main(argv[2]);
        return usage();
}
