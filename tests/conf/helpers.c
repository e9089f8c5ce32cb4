#include "helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char dir[PATH_MAX];
static FILE *captured;
static int saved_stderr = -1;

void capture_start(void) {
        captured = tmpfile();
        cr_assert_not_null(captured);
        saved_stderr = dup(STDERR_FILENO);
        cr_assert_geq(saved_stderr, 0);
        cr_assert_geq(dup2(fileno(captured), STDERR_FILENO), 0);
}

char *capture_end(void) {
        cr_assert_geq(dup2(saved_stderr, STDERR_FILENO), 0);
        close(saved_stderr);
        saved_stderr = -1;
        /* The logger wrote through fd 2, which shares the file offset with the FILE's fd. */
        off_t size = lseek(fileno(captured), 0, SEEK_END);
        cr_assert_geq(size, 0);
        char *text = calloc(1, (size_t)size + 1);
        cr_assert_not_null(text);
        cr_assert_eq(pread(fileno(captured), text, (size_t)size, 0), size);
        fclose(captured);
        captured = NULL;
        return text;
}

void scratch_setup(void) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/sf-conf-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(path);
}

void scratch_teardown(void) {
        if (dir[0])
                nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        dir[0] = '\0';
}

const char *scratch_dir(void) {
        return dir;
}

const char *scratch_file(const char *name, const char *text) {
        /* A small ring of buffers: a test may hold a few paths at once. */
        static char paths[8][PATH_MAX];
        static unsigned next;
        char *path = paths[next++ % 8];

        snprintf(path, PATH_MAX, "%s/%s", dir, name);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f, "%s: %s", path, strerror(errno));
        cr_assert_eq(fwrite(text, 1, strlen(text), f), strlen(text));
        cr_assert_eq(fclose(f), 0);
        return path;
}

int load_text(struct sf_conf *c, const char *text, char **log) {
        const char *path = scratch_file("sf.conf", text);
        capture_start();
        int r = sf_conf_load(c, path);
        *log = capture_end();
        return r;
}

int add_spec(struct sf_conf *c, const char *spec, char **log) {
        capture_start();
        int r = sf_conf_add_spec(c, spec);
        *log = capture_end();
        return r;
}

int validate(struct sf_conf *c, char **log) {
        capture_start();
        int r = sf_conf_validate(c);
        *log = capture_end();
        return r;
}

size_t count_errors(const char *log) {
        size_t n = 0;
        for (const char *p = log; (p = strstr(p, " sockferry error: ")); p++)
                n++;
        return n;
}

bool has_error(const char *log, const char *fmt, ...) {
        char msg[4096], line[4200];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(line, sizeof line, " sockferry error: %s\n", msg);
        return strstr(log, line) != NULL;
}
