#include "relay/control/stats.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The relay process's numbers from /proc (Linux); elsewhere on POSIX (macOS) there is no
 * /proc and only the pid is known. */

void sf_proc_stats_read(struct sf_proc_stats *p) {
        memset(p, 0, sizeof *p);
        p->pid = getpid();

        DIR *d = opendir("/proc/self/fd");
        if (d) {
                struct dirent *e;
                unsigned long n = 0;
                while ((e = readdir(d)))
                        if (e->d_name[0] != '.')
                                n++;
                /* The directory's own descriptor is listed too: it is not ours to count. */
                p->open_fds = n ? n - 1 : 0;
                closedir(d);
        }

        char line[256];
        FILE *f = fopen("/proc/self/status", "re");
        if (f) {
                while (fgets(line, sizeof line, f))
                        if (sscanf(line, "VmRSS: %llu kB", &p->rss_bytes) == 1) {
                                p->rss_bytes *= 1024;
                                break;
                        }
                fclose(f);
        }

        /* Field 22 of /proc/self/stat is the start time in clock ticks after boot; the command
         * name (field 2) may hold spaces and parentheses, so count from its closing ')'. */
        unsigned long long start = 0;
        double boot_uptime = 0;
        char stat[1024];
        f = fopen("/proc/self/stat", "re");
        if (f) {
                size_t n = fread(stat, 1, sizeof stat - 1, f);
                stat[n] = '\0';
                fclose(f);
                char *q = strrchr(stat, ')');
                if (q && sscanf(q + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
                                       "%*d %llu",
                                &start) != 1)
                        start = 0;
        }
        f = fopen("/proc/uptime", "re");
        if (f) {
                if (fscanf(f, "%lf", &boot_uptime) != 1)
                        boot_uptime = 0;
                fclose(f);
        }
        long hz = sysconf(_SC_CLK_TCK);
        if (start && boot_uptime > 0 && hz > 0) {
                double up = boot_uptime - (double)start / (double)hz;
                p->uptime_s = up > 0 ? up : 0;
        }
        /* The boot time (btime in /proc/stat) plus the start after boot, as Prometheus' own
         * clients compute process_start_time_seconds: the same value at every request. */
        unsigned long long btime = 0;
        f = fopen("/proc/stat", "re");
        if (f) {
                while (fgets(line, sizeof line, f))
                        if (sscanf(line, "btime %llu", &btime) == 1)
                                break;
                fclose(f);
        }
        if (start && btime && hz > 0)
                p->start_time_s = (double)btime + (double)start / (double)hz;
}
