#pragma once
/* Windows accounts for the relay's checks and messages (relay/link/tokenfile_win.c,
 * relay/listen/listener_win.c, relay/sys/platform_win.c): who a process runs as, and an account's
 * name. */
#include <windows.h>

#include <stddef.h>

/* Room for a TOKEN_USER and the SID it points to. */
union sf_win_user {
        TOKEN_USER tu;
        BYTE bytes[sizeof(TOKEN_USER) + SECURITY_MAX_SID_SIZE];
};

/* The user process runs as: its SID, held in u, or NULL when the token cannot be read. */
PSID sf_win_process_user(HANDLE process, union sf_win_user *u);
/* "DOMAIN\name" for messages and icacls, or the SID's text when the account has no name here. */
void sf_win_account_name(PSID sid, char *out, size_t cap);
/* "*S-1-5-..." (what icacls takes for any account), or "?". */
void sf_win_sid_text(PSID sid, char *out, size_t cap);
/* UTF-8 for messages; "?" when the text cannot be converted. */
void sf_win_utf8(const wchar_t *w, char *out, size_t cap);
