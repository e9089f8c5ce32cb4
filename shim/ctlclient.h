#pragma once
/* The client side of a relay's control socket, for `sockferry stats` and `sockferry reload`. */
#include "shim/cli.h"

/* Finds the control socket (--control PATH; else o->file's control = key; else the configuration
 * file looked for where relay looks), sends request (one line with its newline), and copies the
 * answer to stdout, or to stderr when it is an error. cmd names the command in messages. Returns
 * the exit status: 0, 1 (the relay could not be asked or answered an error), 64 usage, 78
 * configuration. */
int sf_ctlclient_ask(const char *cmd, struct sf_cli_opts *o, const char *control, const char *request);
