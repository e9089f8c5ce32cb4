#include "relay/control/stats.h"

#include <windows.h>
#include <psapi.h>
#include <winternl.h>

#include <stdlib.h>
#include <string.h>

/* The relay process's numbers on Windows: its handle count stands for the open descriptors
 * (sockets, pipes, files, events: what a leaking connection would leave behind). */

/* SystemExtendedHandleInformation (64) of NtQuerySystemInformation: every handle of the
 * system, with its process. */
struct handle_entry {
        void *object;
        ULONG_PTR pid, handle;
        ULONG access;
        USHORT backtrace, type;
        ULONG attributes, reserved;
};
struct handle_table {
        ULONG_PTR count, reserved;
        struct handle_entry entries[];
};

/* Counts this process's entries of the system's handle table: for where GetProcessHandleCount
 * answers nothing (Wine reports 0, which a running Windows process never has). */
static unsigned long handles_in_table(DWORD pid) {
        ULONG size = 1 << 20;
        for (int tries = 0; tries < 6; tries++, size *= 2) {
                struct handle_table *t = malloc(size);
                if (!t)
                        return 0;
                ULONG need = 0;
                NTSTATUS st = NtQuerySystemInformation((SYSTEM_INFORMATION_CLASS)64, t, size, &need);
                if (st == 0) {
                        unsigned long n = 0;
                        for (ULONG_PTR i = 0; i < t->count; i++)
                                n += t->entries[i].pid == pid;
                        free(t);
                        return n;
                }
                free(t);
                if (st != (NTSTATUS)0xC0000004L) /* STATUS_INFO_LENGTH_MISMATCH */
                        return 0;
        }
        return 0;
}

void sf_proc_stats_read(struct sf_proc_stats *p) {
        memset(p, 0, sizeof *p);
        HANDLE self = GetCurrentProcess();
        p->pid = (pid_t)GetCurrentProcessId();
        DWORD handles = 0;
        if (GetProcessHandleCount(self, &handles) && handles > 0)
                p->open_fds = handles;
        else
                p->open_fds = handles_in_table(GetCurrentProcessId());
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
                /* FILETIME counts 100 ns since 1601-01-01, 11 644 473 600 s before the Unix epoch. */
                if (c.QuadPart > 116444736000000000ULL)
                        p->start_time_s = (double)(c.QuadPart - 116444736000000000ULL) / 1e7;
        }
}
