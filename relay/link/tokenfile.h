#pragma once
/* The file-system side of token files, for relay/link/token.c only: tokenfile_posix.c checks the
 * owner and the mode, tokenfile_win.c the owner and the access list (doc/SECURITY.md). */
#include <stdbool.h>
#include <stddef.h>

struct sf_conf;

/* Twice the largest key as hex, plus generous room for surrounding whitespace: anything
 * bigger is not a token file and is refused before it is read. */
#define SF_TOKENFILE_MAX 1024

#define SF_TOKENFILE_KEYGEN_HINT "create one with sockferry keygen -o"

/* Opens the token file at path (links followed), refuses anything but a regular file, access
 * rights that let someone other than its owner read or change it, a place on the way that
 * someone else could change (POSIX: a directory or link that is not root's, the loading user's,
 * c's `user` or the file owner's; Windows: an owner other than the loading user, SYSTEM or
 * Administrators, since the folders are not walked there), and a file larger than cap bytes
 * (-EFBIG, also when it grows while read). Reads it into buf (cap bytes); *n is how many. Logs
 * the file, the cause and the fix (for a file this process may not read: its owner, group and
 * mode, and what makes it readable). Returns 0 or -errno. */
int sf_tokenfile_read(const char *path, const struct sf_conf *c, char *buf, size_t cap, size_t *n);
/* Writes hex[0..len) to a new file at path that only the current user can read, creating
 * missing directories the same way: without force an existing path (even a dangling link) is
 * refused; with force an existing regular file is replaced at once by a new file, never
 * written in place nor through a link. The data is flushed to disk before it counts as
 * written; half a token is never left behind. path NULL writes to standard output. Logs the
 * cause. Returns 0 or -errno. */
int sf_tokenfile_write(const char *path, const char *hex, size_t len, bool force);

#ifdef _WIN32
/* The rule sf_tokenfile_read applies to a file's security descriptor (a
 * PSECURITY_DESCRIPTOR with owner and DACL): the owner is the current user, SYSTEM or
 * Administrators, the DACL is not NULL, and no allowed entry gives another account a right
 * that reads or changes the token. Logs the file, the account, the right and the icacls fix.
 * Returns 0 or -EPERM. */
int sf_tokenfile_check_sd(const char *path, void *sd);
#endif
