#include "relay/control.h"

#include <windows.h>
#include <psapi.h>

#include <string.h>

/* The relay process's numbers on Windows: its handle count stands for the open descriptors
 * (sockets, pipes, files, events: what a leaking connection would leave behind). */
void sf_proc_stats_read(struct sf_proc_stats *p) {
        memset(p, 0, sizeof *p);
        HANDLE self = GetCurrentProcess();
        p->pid = (pid_t)GetCurrentProcessId();
        DWORD handles;
        if (GetProcessHandleCount(self, &handles))
                p->open_fds = handles;
        PROCESS_MEMORY_COUNTERS mc = { .cb = sizeof mc };
        if (GetProcessMemoryInfo(self, &mc, sizeof mc))
                p->rss_bytes = mc.WorkingSetSize;
        FILETIME created, exited, kernel, user, now;
        if (GetProcessTimes(self, &created, &exited, &kernel, &user)) {
                GetSystemTimeAsFileTime(&now);
                ULARGE_INTEGER c = { .LowPart = created.dwLowDateTime, .HighPart = created.dwHighDateTime },
                               n = { .LowPart = now.dwLowDateTime, .HighPart = now.dwHighDateTime };
                if (n.QuadPart > c.QuadPart)
                        p->uptime_s = (double)(n.QuadPart - c.QuadPart) / 1e7;
        }
}
