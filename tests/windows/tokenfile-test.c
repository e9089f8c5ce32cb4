/* Token files on Windows (relay/link/tokenfile_win.c), as TAP: keygen's private file, the owner and
 * access-list rule on real files and on descriptors built in memory, refusals and their
 * messages. Runs on Windows and under Wine; what Wine cannot show is reported as skipped with
 * the reason (tests/windows/tokenfile.sh). No criterion on Windows: plain TAP.
 *
 * The logger is replaced here by one that keeps the last message, so that the tests can check
 * what a refusal says. */
#define UNICODE
#include <windows.h>

#include <aclapi.h>
#include <errno.h>
#include <sddl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/log.h"
#include "relay/link/tokenfile.h"

static char logged[4096];
static int tests, failed;
static bool on_wine;
static PSID me;
static wchar_t me_text[200];

void sf_logv(enum sf_log_level level, const char *forward, uint64_t conn, const char *fmt, va_list ap) {
        vsnprintf(logged, sizeof logged, fmt, ap);
        printf("#   log: %s\n", logged);
}

void sf_log(enum sf_log_level level, const char *forward, uint64_t conn, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        sf_logv(level, forward, conn, fmt, ap);
        va_end(ap);
}

static void ok(bool cond, const char *what) {
        tests++;
        if (!cond)
                failed++;
        printf("%sok %d - %s\n", cond ? "" : "not ", tests, what);
        fflush(stdout);
}

static void skip(const char *what, const char *why) {
        tests++;
        printf("ok %d - %s # SKIP %s\n", tests, what, why);
        fflush(stdout);
}

static bool said(const char *s) {
        return strstr(logged, s) != NULL;
}

static wchar_t *wide(const char *s) {
        static wchar_t buf[4][MAX_PATH * 2];
        static int next;
        wchar_t *w = buf[next++ % 4];
        if (!MultiByteToWideChar(CP_UTF8, 0, s, -1, w, MAX_PATH * 2))
                w[0] = L'\0';
        return w;
}

static const char hex[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";

static bool file_is(const char *path, const char *want) {
        char buf[256];
        size_t n = 0;
        logged[0] = '\0';
        return sf_tokenfile_read(path, NULL, buf, sizeof buf, &n) == 0 && n == strlen(want) && !memcmp(buf, want, n);
}

static PSECURITY_DESCRIPTOR sd_of(const char *path, PACL *dacl) {
        PSECURITY_DESCRIPTOR sd = NULL;
        *dacl = NULL;
        if (GetNamedSecurityInfoW(wide(path), SE_FILE_OBJECT, OWNER_SECURITY_INFORMATION | DACL_SECURITY_INFORMATION,
                                  NULL, NULL, dacl, NULL, &sd) != ERROR_SUCCESS)
                return NULL;
        return sd;
}

/* Every allowed entry is for the user, SYSTEM or Administrators (what the read rule allows,
 * checked here independently); *only_user: protected, one entry, the user, full control. */
static bool private_dacl(const char *path, bool *only_user) {
        PACL dacl;
        PSECURITY_DESCRIPTOR sd = sd_of(path, &dacl);
        SECURITY_DESCRIPTOR_CONTROL ctl = 0;
        DWORD rev, user_full = 0;
        bool priv = sd && dacl;

        for (DWORD i = 0; priv && i < dacl->AceCount; i++) {
                ACCESS_ALLOWED_ACE *ace;
                if (!GetAce(dacl, i, (void **)&ace))
                        priv = false;
                else if (ace->Header.AceType == ACCESS_ALLOWED_ACE_TYPE) {
                        PSID sid = &ace->SidStart;
                        bool mine = EqualSid(sid, me);
                        user_full += mine && ace->Mask == FILE_ALL_ACCESS;
                        priv = mine || IsWellKnownSid(sid, WinLocalSystemSid) ||
                               IsWellKnownSid(sid, WinBuiltinAdministratorsSid);
                }
        }
        if (sd)
                GetSecurityDescriptorControl(sd, &ctl, &rev);
        *only_user = priv && (ctl & SE_DACL_PROTECTED) && dacl->AceCount == 1 && user_full == 1;
        LocalFree(sd);
        return priv;
}

/* SDDL with every "$ME" replaced by the user's SID. */
static const wchar_t *sddl_of(const wchar_t *in) {
        static wchar_t out[512];
        size_t o = 0, me_len = wcslen(me_text);
        for (; *in && o + me_len < 511; in++) {
                if (wcsncmp(in, L"$ME", 3) == 0) {
                        wcscpy(out + o, me_text);
                        o += me_len;
                        in += 2;
                } else {
                        out[o++] = *in;
                }
        }
        out[o] = L'\0';
        return out;
}

/* Sets the file's DACL from SDDL ("" for a NULL DACL). */
static bool set_dacl(const char *path, const wchar_t *text) {
        const wchar_t *sddl = sddl_of(text);
        PSECURITY_DESCRIPTOR sd = NULL;
        PACL dacl = NULL;
        BOOL present, def;
        DWORD e;

        if (sddl[0]) {
                if (!ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl, SDDL_REVISION_1, &sd, NULL) ||
                    !GetSecurityDescriptorDacl(sd, &present, &dacl, &def))
                        return false;
        }
        e = SetNamedSecurityInfoW(wide(path), SE_FILE_OBJECT,
                                  DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION, NULL, NULL, dacl,
                                  NULL);
        LocalFree(sd);
        return e == ERROR_SUCCESS;
}

/* The rule on a descriptor built in memory; want 0 or -EPERM with `says` in the message. */
static void rule(const wchar_t *text, int want, const char *says, const char *what) {
        const wchar_t *sddl = sddl_of(text);
        PSECURITY_DESCRIPTOR sd = NULL;
        if (!ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl, SDDL_REVISION_1, &sd, NULL)) {
                printf("#   cannot build %ls: error %lu\n", sddl, GetLastError());
                ok(false, what);
                return;
        }
        logged[0] = '\0';
        int r = sf_tokenfile_check_sd("C:\\t\\token", sd);
        LocalFree(sd);
        ok(r == want && (!says || (said(says) && said("C:\\t\\token"))), what);
}

/* An entry of `type` granting Everyone read after the user's own, built byte by byte: SDDL
 * has them (OA, XA) but Wine's parser does not. */
static void raw_ace(BYTE type, const char *what) {
        union {
                ACL acl;
                BYTE b[512];
        } a;
        BYTE ace[128] = { 0 }, world[SECURITY_MAX_SID_SIZE];
        DWORD world_len = sizeof world, off = sizeof(ACE_HEADER) + sizeof(ACCESS_MASK);
        SECURITY_DESCRIPTOR sd;
        ACCESS_MASK read = FILE_GENERIC_READ;

        if (type == ACCESS_ALLOWED_OBJECT_ACE_TYPE)
                off += sizeof(DWORD); /* Flags 0: no object type GUIDs follow */
        bool built = CreateWellKnownSid(WinWorldSid, NULL, world, &world_len) &&
                     InitializeAcl(&a.acl, sizeof a, ACL_REVISION_DS) &&
                     AddAccessAllowedAce(&a.acl, ACL_REVISION_DS, FILE_ALL_ACCESS, me);
        memcpy(ace + sizeof(ACE_HEADER), &read, sizeof read);
        memcpy(ace + off, world, world_len);
        /* A callback entry's condition follows the SID; "artx" starts a conditional expression. */
        WORD size = (WORD)(off + world_len + (type == ACCESS_ALLOWED_CALLBACK_ACE_TYPE ? 8 : 0));
        if (type == ACCESS_ALLOWED_CALLBACK_ACE_TYPE)
                memcpy(ace + off + world_len, "artx\0\0\0\0", 8);
        ((ACE_HEADER *)ace)->AceType = type;
        ((ACE_HEADER *)ace)->AceSize = size;
        built = built && AddAce(&a.acl, ACL_REVISION_DS, MAXDWORD, ace, size) &&
                InitializeSecurityDescriptor(&sd, SECURITY_DESCRIPTOR_REVISION) &&
                SetSecurityDescriptorOwner(&sd, me, FALSE) && SetSecurityDescriptorDacl(&sd, TRUE, &a.acl, FALSE);
        logged[0] = '\0';
        ok(built && sf_tokenfile_check_sd("C:\\t\\token", &sd) == -EPERM && said("lets Everyone read it"), what);
}

/* Descriptors in SDDL ($ME: the user), what the rule returns and what its message says. */
static const struct {
        const wchar_t *sddl;
        int want;
        const char *says, *what;
} rule_cases[] = {
        { L"O:$MED:P(A;;FA;;;$ME)", 0, NULL, "rule: owned by the user, only the user: accepted" },
        { L"O:BAD:P(A;;FA;;;SY)(A;;FA;;;BA)(A;;FR;;;$ME)", 0, NULL,
          "rule: owned by Administrators, SYSTEM and Administrators have access: accepted" },
        { L"O:S-1-5-21-1-2-3-1001D:P(A;;FA;;;$ME)", -EPERM, "is owned by *S-1-5-21-1-2-3-1001",
          "rule: owned by another account: refused, naming it" },
        { L"O:$MED:P(A;;FA;;;$ME)(A;;FR;;;AU)", -EPERM, "lets NT AUTHORITY\\Authenticated Users read it",
          "rule: Authenticated Users may read: refused, naming the account and the right" },
        { L"O:$MED:P(A;;FA;;;$ME)(A;;0x2;;;BU)", -EPERM, "change it (FILE_WRITE_DATA)",
          "rule: BUILTIN\\Users may write: refused" },
        { L"O:$MED:P(A;;FA;;;$ME)(A;;WD;;;S-1-5-21-1-2-3-1001)", -EPERM, "change its access list (WRITE_DAC)",
          "rule: another user may change the access list: refused" },
        { L"O:$MED:P(A;;FA;;;$ME)(A;;GA;;;WD)", -EPERM, "/remove \"*S-1-1-0\" /grant:r",
          "rule: Everyone GENERIC_ALL: refused, the icacls fix removes Everyone by SID" },
        { L"O:$MED:(A;;FA;;;$ME)(A;ID;FR;;;BU)", -EPERM, "(inherited from its folder)",
          "rule: an inherited entry is named as inherited" },
        { L"O:$MED:P(D;;FA;;;WD)(A;;FA;;;$ME)", 0, NULL, "rule: a deny entry for Everyone is no grant: accepted" },
        { L"O:$MED:P(A;OICIIO;FA;;;WD)(A;;FA;;;$ME)", 0, NULL,
          "rule: an inherit-only entry grants nothing on the file: accepted" },
        { L"O:$MED:P(A;;FA;;;$ME)(A;;0x120080;;;WD)", 0, NULL,
          "rule: Everyone may read the attributes and the access list only: accepted" },
};

static void rules(void) {
        for (size_t i = 0; i < sizeof rule_cases / sizeof rule_cases[0]; i++)
                rule(rule_cases[i].sddl, rule_cases[i].want, rule_cases[i].says, rule_cases[i].what);
        /* Built with the API, not SDDL: Wine reads "D:NO_ACCESS_CONTROL" as an empty DACL. */
        SECURITY_DESCRIPTOR null_sd;
        ok(InitializeSecurityDescriptor(&null_sd, SECURITY_DESCRIPTOR_REVISION) &&
                   SetSecurityDescriptorOwner(&null_sd, me, FALSE) && SetSecurityDescriptorDacl(&null_sd, TRUE, NULL, FALSE) &&
                   (logged[0] = '\0', sf_tokenfile_check_sd("C:\\t\\token", &null_sd) == -EPERM) &&
                   said("no access list (a NULL DACL)"),
           "rule: a NULL DACL is refused");
        raw_ace(ACCESS_ALLOWED_OBJECT_ACE_TYPE, "rule: an object entry is a grant: refused");
        raw_ace(ACCESS_ALLOWED_CALLBACK_ACE_TYPE, "rule: a conditional (callback) entry counts as if its condition "
                                                  "held: refused");
}

static void remove_tree(const wchar_t *path) {
        WIN32_FIND_DATAW f;
        wchar_t pattern[MAX_PATH * 2], child[MAX_PATH * 2];
        swprintf(pattern, MAX_PATH * 2, L"%ls\\*", path);
        HANDLE h = FindFirstFileW(pattern, &f);
        while (h != INVALID_HANDLE_VALUE) {
                if (wcscmp(f.cFileName, L".") && wcscmp(f.cFileName, L"..")) {
                        swprintf(child, MAX_PATH * 2, L"%ls\\%ls", path, f.cFileName);
                        if ((f.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) &&
                            !(f.dwFileAttributes & FILE_ATTRIBUTE_REPARSE_POINT))
                                remove_tree(child);
                        else if (!DeleteFileW(child))
                                RemoveDirectoryW(child);
                }
                if (!FindNextFileW(h, &f)) {
                        FindClose(h);
                        h = INVALID_HANDLE_VALUE;
                }
        }
        RemoveDirectoryW(path);
}

int main(void) {
        union {
                TOKEN_USER tu;
                BYTE b[sizeof(TOKEN_USER) + SECURITY_MAX_SID_SIZE];
        } u;
        HANDLE tok;
        DWORD len;
        wchar_t *s, tmpw[MAX_PATH];
        char root[MAX_PATH * 2], dir[MAX_PATH * 2], tok_path[MAX_PATH * 2], other[MAX_PATH * 2], big[2000];
        char buf[SF_TOKENFILE_MAX];
        size_t n;
        bool only;
        int r;

        setvbuf(stdout, NULL, _IONBF, 0);
        on_wine = GetProcAddress(GetModuleHandleW(L"ntdll.dll"), "wine_get_version") != NULL;
        if (!OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &tok) ||
            !GetTokenInformation(tok, TokenUser, &u, sizeof u, &len) || !ConvertSidToStringSidW(u.tu.User.Sid, &s)) {
                printf("1..0 # SKIP cannot read this process's user: error %lu\n", GetLastError());
                return 0;
        }
        me = u.tu.User.Sid;
        wcsncpy(me_text, s, 199);
        printf("# user %ls%s\n", me_text, on_wine ? ", under Wine" : "");

        rules();

        /* A non-ASCII folder name: paths are UTF-8 in sockferry, UTF-16 for Windows. */
        GetTempPathW(MAX_PATH, tmpw);
        WideCharToMultiByte(CP_UTF8, 0, tmpw, -1, root, sizeof root, NULL, NULL);
        snprintf(root + strlen(root), sizeof root - strlen(root), "sf-tokenfile-\xc3\xa9-%lu",
                 (unsigned long)GetCurrentProcessId());
        snprintf(dir, sizeof dir, "%s\\keys", root);
        snprintf(tok_path, sizeof tok_path, "%s\\keys/sockferry.token", root);
        CreateDirectoryW(wide(root), NULL);

        r = sf_tokenfile_write(tok_path, hex, strlen(hex), false);
        ok(r == 0 && file_is(tok_path, hex), "keygen creates the token and its missing folder; it reads back whole");
        ok(private_dacl(tok_path, &only), "the token's access list grants nobody but the user, SYSTEM, Administrators");
        bool only_file = only;
        private_dacl(dir, &only);
        if (only_file && only)
                ok(true, "the token and its new folder have a protected access list: the user alone, full control");
        else if (on_wine)
                skip("the token and its new folder have a protected access list: the user alone, full control",
                     "Wine keeps no security descriptor on files: it maps the DACL onto the unix mode and makes one "
                     "back from the mode (owner, SYSTEM; not protected)");
        else
                ok(false, "the token and its new folder have a protected access list: the user alone, full control");

        /* The file keygen would have made without its own descriptor: it shows whether the
         * check above can tell the difference here. */
        snprintf(other, sizeof other, "%s\\plain", root);
        HANDLE h = CreateFileW(wide(other), GENERIC_WRITE, 0, NULL, CREATE_NEW, FILE_ATTRIBUTE_NORMAL, NULL);
        if (h != INVALID_HANDLE_VALUE) {
                WriteFile(h, hex, (DWORD)strlen(hex), &len, NULL);
                CloseHandle(h);
        }
        logged[0] = '\0';
        r = sf_tokenfile_read(other, NULL, buf, sizeof buf, &n);
        if (r == -EPERM && !private_dacl(other, &only))
                ok(said("lets ") && said("icacls"), "control: a file made with the default security here is refused "
                                                    "(so the access-list check above can fail)");
        else
                skip("control: a file made with the default security here is refused",
                     "the default security in this temporary folder is already private");

        ok(set_dacl(tok_path, L"D:P(A;;FA;;;$ME)(A;;FR;;;WD)"), "setup: the token's access list grants Everyone read");
        logged[0] = '\0';
        r = sf_tokenfile_read(tok_path, NULL, buf, sizeof buf, &n);
        ok(r == -EPERM && said("lets Everyone read it (FILE_READ_DATA)") && said(tok_path) && said("icacls \"") &&
                   said("/remove \"*S-1-1-0\""),
           "a token Everyone may read is refused with the account, the right and the icacls fix");

        r = sf_tokenfile_write(tok_path, hex + 2, strlen(hex) - 2, true);
        ok(r == 0 && file_is(tok_path, hex + 2) && private_dacl(tok_path, &only),
           "keygen --force replaces it with a new private file (Everyone's entry is gone)");

        logged[0] = '\0';
        r = sf_tokenfile_write(tok_path, hex, strlen(hex), false);
        ok(r == -EEXIST && said("exists; use --force to replace it") && file_is(tok_path, hex + 2),
           "keygen without --force refuses an existing file and leaves it alone");

        ok(set_dacl(tok_path, L""), "setup: the token gets a NULL DACL");
        PACL dacl;
        PSECURITY_DESCRIPTOR sd = sd_of(tok_path, &dacl);
        bool null_dacl = sd && !dacl;
        LocalFree(sd);
        logged[0] = '\0';
        r = sf_tokenfile_read(tok_path, NULL, buf, sizeof buf, &n);
        if (null_dacl)
                ok(r == -EPERM && said("no access list (a NULL DACL)"), "a token with a NULL DACL is refused");
        else
                ok(r == -EPERM && said("lets Everyone"),
                   "a token with a NULL DACL is refused (Wine shows it as full access for Everyone; the NULL-DACL "
                   "branch itself is the rule test above)");

        snprintf(other, sizeof other, "%s\\a-folder", root);
        CreateDirectoryW(wide(other), NULL);
        logged[0] = '\0';
        r = sf_tokenfile_read(other, NULL, buf, sizeof buf, &n);
        ok(r == -EISDIR && said("is a directory, not a file (Docker creates one"), "a folder is refused, naming Docker");
        logged[0] = '\0';
        r = sf_tokenfile_write(other, hex, strlen(hex), true);
        ok(r == -EISDIR && said("is a directory; refusing to replace it"), "keygen --force refuses to replace a folder");

        memset(big, 'a', sizeof big);
        snprintf(other, sizeof other, "%s\\big", root);
        r = sf_tokenfile_write(other, big, sizeof big, false);
        logged[0] = '\0';
        r = r == 0 ? sf_tokenfile_read(other, NULL, buf, sizeof buf, &n) : r;
        ok(r == -EFBIG && said("is 2000 bytes, too large for a token (at most 1024)"),
           "a 2000-byte private file is refused before it is read");

        snprintf(other, sizeof other, "%s\\missing", root);
        logged[0] = '\0';
        r = sf_tokenfile_read(other, NULL, buf, sizeof buf, &n);
        ok(r == -ENOENT && said("create one with sockferry keygen -o"), "a missing file is refused with the keygen hint");

        /* The one Win32 -> errno map (compat/win/posix.c), as libuv maps these codes. */
        ok(sf_win_errno(ERROR_INVALID_NAME) == ENOENT && sf_win_errno(ERROR_BAD_PATHNAME) == ENOENT,
           "a name that is not valid maps to ENOENT, as libuv maps it");
        ok(sf_win_errno(ERROR_SHARING_VIOLATION) == EBUSY && sf_win_errno(ERROR_LOCK_VIOLATION) == EBUSY,
           "a sharing or lock violation maps to EBUSY, as libuv maps it");
        snprintf(other, sizeof other, "%s\\bad<name", root);
        logged[0] = '\0';
        r = sf_tokenfile_read(other, NULL, buf, sizeof buf, &n);
        ok(r == -ENOENT, "a token path with a character Windows does not allow is refused as not found");
        snprintf(other, sizeof other, "%s\\held", root);
        r = sf_tokenfile_write(other, hex, strlen(hex), false);
        HANDLE held = r == 0 ? CreateFileW(wide(other), GENERIC_READ, 0, NULL, OPEN_EXISTING, 0, NULL)
                             : INVALID_HANDLE_VALUE;
        logged[0] = '\0';
        r = held == INVALID_HANDLE_VALUE ? 0 : sf_tokenfile_read(other, NULL, buf, sizeof buf, &n);
        ok(r == -EBUSY, "a token file another program holds open without sharing is refused as busy");
        if (held != INVALID_HANDLE_VALUE)
                CloseHandle(held);

        logged[0] = '\0';
        r = sf_tokenfile_read("NUL", NULL, buf, sizeof buf, &n);
        ok(r == -EINVAL && said("a character device"), "NUL (a character device) is refused");

        char pipe[128];
        snprintf(pipe, sizeof pipe, "\\\\.\\pipe\\sf-tokenfile-test-%lu", (unsigned long)GetCurrentProcessId());
        HANDLE srv = CreateNamedPipeW(wide(pipe), PIPE_ACCESS_DUPLEX, PIPE_TYPE_BYTE, 1, 512, 512, 0, NULL);
        logged[0] = '\0';
        r = srv == INVALID_HANDLE_VALUE ? 0 : sf_tokenfile_read(pipe, NULL, buf, sizeof buf, &n);
        ok(r == -EINVAL && said("a named pipe"), "a named pipe is refused");
        if (srv != INVALID_HANDLE_VALUE)
                CloseHandle(srv);

        snprintf(other, sizeof other, "%s\\link", root);
        /* Wine's CreateSymbolicLinkW reports success and makes nothing: look at what is there. */
        DWORD attrs = CreateSymbolicLinkW(wide(other), wide(tok_path), 0) ? GetFileAttributesW(wide(other))
                                                                           : INVALID_FILE_ATTRIBUTES;
        if (attrs != INVALID_FILE_ATTRIBUTES && (attrs & FILE_ATTRIBUTE_REPARSE_POINT)) {
                logged[0] = '\0';
                r = sf_tokenfile_write(other, hex, strlen(hex), true);
                ok(r == -ELOOP && said("symbolic link") && file_is(tok_path, hex + 2),
                   "keygen --force refuses to write through a symbolic link");
        } else {
                char why[160];
                if (on_wine)
                        snprintf(why, sizeof why, "Wine creates no symbolic link (CreateSymbolicLinkW reports "
                                 "success, nothing is there)");
                else
                        snprintf(why, sizeof why, "cannot create a symbolic link here (error %lu: it needs developer "
                                 "mode or the privilege)", GetLastError());
                skip("keygen --force refuses to write through a symbolic link", why);
        }

        snprintf(other, sizeof other, "%s\\stdout", root);
        h = CreateFileW(wide(other), GENERIC_READ | GENERIC_WRITE, FILE_SHARE_READ, NULL, CREATE_NEW, 0, NULL);
        HANDLE saved = GetStdHandle(STD_OUTPUT_HANDLE);
        SetStdHandle(STD_OUTPUT_HANDLE, h);
        r = sf_tokenfile_write(NULL, hex, strlen(hex), false);
        SetStdHandle(STD_OUTPUT_HANDLE, saved);
        CloseHandle(h);
        char got[sizeof hex] = "";
        h = CreateFileW(wide(other), GENERIC_READ, FILE_SHARE_READ, NULL, OPEN_EXISTING, 0, NULL);
        ReadFile(h, got, sizeof got - 1, &len, NULL);
        CloseHandle(h);
        ok(r == 0 && strcmp(got, hex) == 0, "keygen without -o writes the token to standard output");

        remove_tree(wide(root));

        printf("1..%d\n", tests);
        return failed ? 1 : 0;
}
