#pragma once
/* attach --inject: a static Linux sockferry copied into a container that has none, so that
 * whatever runs the copy as root is never something a user of the container could have
 * made or changed (doc/SECURITY.md "attach --inject").
 *
 * One exec (as root where the engine can ask: docker and podman -u 0; kubectl runs the pod's
 * user) makes a new directory of a random name, mode 0700, in --inject-dir (default /tmp),
 * failing if the name exists, after checking that every directory above it belongs to root
 * (or to the exec's own user) and no one else may write to it, a sticky one aside. The
 * binary arrives on that exec's stdin, its size and sha256 are checked, and it must run
 * there (`sockferry version`). Each run of the far end after that is `sh -c` checking the
 * directory and the checksum again before it runs the copy, so a directory made anew by
 * someone else under the same name (a container re-created, its /tmp listed before) is
 * refused and a new copy made. When the far end exits by itself (attach stopped: stdin ended)
 * the directory is removed. */
#include <stddef.h>

#include "shim/attach_engine.h"

/* Finds the static binary for the container's architecture (--inject=PATH, $SOCKFERRY_STATIC,
 * the installed one, next to this binary, this binary itself when it is a static Linux one of
 * that architecture), copies it in and points e->argv at it. 0, or -1 with why in plain words
 * (what is missing and how to get it). */
int sf_attach_inject(struct sf_attach_engine *e, char *why, size_t cap);
