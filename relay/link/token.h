#pragma once
/* Token files: 64 hex characters (32 bytes of key material), mode 0600. */
#include <stdbool.h>

#include "conf/conf.h"
#include "relay/link/frames.h"

/* Loads and checks a token file: refuses an owner other than root, the effective user and c's
 * `user` (-EPERM), group/world access, empty files, anything but a regular file and fewer than
 * 32 (more than 128) bytes of key material, logging the file and the fix, never the token.
 * Symlinks are followed; the target's owner and mode are checked. Hex, any case, surrounded by
 * optional whitespace. Calls sf_hs_init. Returns 0 or -errno; key is wiped on failure. */
int sf_token_load(const char *path, const struct sf_conf *c, struct sf_hs_key *key);
/* Writes a new random token (64 lowercase hex characters, newline) to path with mode 0600
 * whatever the umask, creating missing directories (0700). Without force an existing path
 * (even a dangling symlink) is refused; with force an existing regular file is replaced by a
 * new one (rename), never written in place and never through a symlink. path NULL writes to
 * stdout. Calls sf_hs_init. Returns 0 or -errno, logging the cause. */
int sf_token_generate(const char *path, bool force);
/* How sf_token_generate protects the file, for messages: "mode 0600", or on Windows "only
 * you can open it". */
extern const char sf_token_protection[];
