#include "relay/sys/account_win.h"

#include <sddl.h>
#include <stdio.h>

void sf_win_utf8(const wchar_t *w, char *out, size_t cap) {
        if (WideCharToMultiByte(CP_UTF8, 0, w, -1, out, (int)cap, NULL, NULL) <= 0)
                snprintf(out, cap, "?");
}

PSID sf_win_process_user(HANDLE process, union sf_win_user *u) {
        HANDLE tok;
        DWORD len = 0;
        if (!OpenProcessToken(process, TOKEN_QUERY, &tok))
                return NULL;
        BOOL ok = GetTokenInformation(tok, TokenUser, u, sizeof *u, &len);
        CloseHandle(tok);
        return ok ? u->tu.User.Sid : NULL;
}

void sf_win_sid_text(PSID sid, char *out, size_t cap) {
        wchar_t *s = NULL;
        if (sid && ConvertSidToStringSidW(sid, &s)) {
                char t[200];
                sf_win_utf8(s, t, sizeof t);
                snprintf(out, cap, "*%s", t);
                LocalFree(s);
        } else {
                snprintf(out, cap, "?");
        }
}

void sf_win_account_name(PSID sid, char *out, size_t cap) {
        wchar_t name[256], dom[256];
        DWORD nn = sizeof name / sizeof name[0], dn = sizeof dom / sizeof dom[0];
        SID_NAME_USE use;
        char n8[512], d8[512];
        if (!sid || !LookupAccountSidW(NULL, sid, name, &nn, dom, &dn, &use)) {
                sf_win_sid_text(sid, out, cap);
                return;
        }
        sf_win_utf8(name, n8, sizeof n8);
        sf_win_utf8(dom, d8, sizeof d8);
        snprintf(out, cap, "%s%s%s", d8, d8[0] ? "\\" : "", n8);
}
