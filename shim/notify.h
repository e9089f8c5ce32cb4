#pragma once
/* sd_notify(3) protocol: a datagram to $NOTIFY_SOCKET, so a systemd service (Type=notify) and
 * the tests learn when sockferry is ready and when it stops. */

/* Sends state (e.g. "READY=1") when NOTIFY_SOCKET is set; silently does nothing otherwise.
 * Returns 0 or -errno. */
int sf_notify(const char *state);
