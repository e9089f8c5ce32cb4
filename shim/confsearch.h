#pragma once
/* Where relay, check and stats look for a configuration file when neither -c nor -F is given:
 * the user's own ($XDG_CONFIG_HOME/sockferry/sockferry.conf, by default
 * ~/.config/sockferry/sockferry.conf: the place on macOS and for a relay run as a normal
 * user), then the system's (/etc/sockferry/sockferry.conf). */
#include <stddef.h>

/* Fills buf with the first of those paths where something exists and returns buf, or returns
 * NULL when there is none. A file that exists but cannot be read is returned all the same, so
 * that loading it says why. */
const char *sf_confsearch_find(char *buf, size_t size);
/* The paths looked at, for messages: "A, then B". */
const char *sf_confsearch_places(char *buf, size_t size);
