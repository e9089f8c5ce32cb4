#pragma once
/* sd_notify(3) protocol: a datagram to $NOTIFY_SOCKET, so a systemd service (Type=notify) and
 * the tests learn when sockferry is ready and when it stops. */

/* Sends state (e.g. "READY=1") when NOTIFY_SOCKET is set; silently does nothing otherwise.
 * Returns 0 or -errno. */
int sf_notify(const char *state);

/* Keeps NOTIFY_SOCKET's value for sf_notify, so that it can be taken out of the environment
 * (run's payload must not answer the service manager in run's name: shim/env.h). */
void sf_notify_keep(void);
