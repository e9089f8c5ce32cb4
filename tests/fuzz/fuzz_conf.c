/* libFuzzer target: sf_conf_load and sf_conf_validate on arbitrary files. The input goes into
 * a memfd that sf_conf_load opens by its /proc path, as it would open a file. Run with
 * -close_fd_mask=2: every rejected input logs its errors (sanitizer reports still show). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conf/conf.h"

static int fd = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        fd = memfd_create("fuzz.conf", MFD_CLOEXEC);
        if (fd < 0)
                abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct sf_conf c;

        if (ftruncate(fd, 0) < 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
                abort();
        sf_conf_init(&c);
        if (sf_conf_load(&c, path) == 0)
                (void)sf_conf_validate(&c);
        sf_conf_free(&c);
        return 0;
}
