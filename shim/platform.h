#pragma once
/* Process controls that exist on Linux only (shim/platform_linux.c): the container side
 * (`run`) and the relay's no-new-privs use them; a macOS build has neither. */

/* PR_SET_NO_NEW_PRIVS. 0 or -errno. */
int sf_proc_no_new_privs(void);
/* PR_SET_CHILD_SUBREAPER: orphans of the payload are reparented to us. 0 or -errno. */
int sf_proc_child_subreaper(void);
