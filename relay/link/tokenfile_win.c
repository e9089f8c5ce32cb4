/* Token files on Windows: files have no modes there; the owner and the access list (DACL) of
 * the file's security descriptor decide who can read or change the token (relay/link/tokenfile.h,
 * doc/SECURITY.md). The rule is the one Windows OpenSSH applies to private keys. */
#include "relay/link/tokenfile.h"

#include <windows.h>

#include <aclapi.h>
#include <errno.h>
#include <ntsecapi.h>
#include <sddl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/log.h"
#include "relay/link/token.h"
#include "relay/sys/account_win.h"

const char sf_token_protection[] = "only you can open it";

#define KEYGEN_HINT SF_TOKENFILE_KEYGEN_HINT

/* What lets an account other than the trusted ones read the token, change it, or give itself
 * those rights; generic rights count as what they map to on files. Execute is counted too: a
 * file that can be mapped for execution can be read. What remains (READ_CONTROL, SYNCHRONIZE,
 * attributes, extended attributes, DELETE) neither shows nor changes the token. */
static const struct {
        DWORD mask;
        const char *what;
} bad_rights[] = {
        { FILE_READ_DATA, "read it (FILE_READ_DATA)" },
        { GENERIC_ALL, "do anything with it (GENERIC_ALL)" },
        { GENERIC_READ, "read it (GENERIC_READ)" },
        { FILE_WRITE_DATA, "change it (FILE_WRITE_DATA)" },
        { FILE_APPEND_DATA, "change it (FILE_APPEND_DATA)" },
        { GENERIC_WRITE, "change it (GENERIC_WRITE)" },
        { WRITE_DAC, "change its access list (WRITE_DAC)" },
        { WRITE_OWNER, "take ownership of it (WRITE_OWNER)" },
        { FILE_EXECUTE, "map it for execution (FILE_EXECUTE)" },
        { GENERIC_EXECUTE, "map it for execution (GENERIC_EXECUTE)" },
};

/* The system's sentence for a Win32 error, without its final period and line break. */
static const char *win_error(DWORD e, char *out, size_t cap) {
        wchar_t w[256];
        DWORD n = FormatMessageW(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, e, 0, w,
                                 sizeof w / sizeof w[0], NULL);
        while (n > 0 && (w[n - 1] == L'\r' || w[n - 1] == L'\n' || w[n - 1] == L'.' || w[n - 1] == L' '))
                n--;
        if (n == 0) {
                snprintf(out, cap, "Windows error %lu", (unsigned long)e);
                return out;
        }
        w[n] = L'\0';
        sf_win_utf8(w, out, cap);
        size_t len = strlen(out);
        snprintf(out + len, cap - len, " (error %lu)", (unsigned long)e);
        return out;
}

/* path as UTF-16 for the W functions (malloc'ed), or NULL: logged as `what` PATH. */
static wchar_t *wide_of(const char *path, const char *what) {
        int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, NULL, 0);
        wchar_t *w = n > 0 ? malloc((size_t)n * sizeof *w) : NULL;
        if (w && MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, w, n) == n)
                return w;
        if (n <= 0)
                sf_log_error("%s %s: the path is not valid UTF-8", what, path);
        else
                sf_log_error("%s %s: out of memory", what, path);
        free(w);
        return NULL;
}

static bool trusted(PSID sid, PSID me) {
        return IsValidSid(sid) &&
               ((me && EqualSid(sid, me)) || IsWellKnownSid(sid, WinLocalSystemSid) ||
                IsWellKnownSid(sid, WinBuiltinAdministratorsSid));
}

/* The account and rights of an entry that grants access to the file, or NULL for one that
 * does not: deny entries only take rights away, and an inherit-only one applies to what a
 * folder will hold, not to the folder or file itself. Callback (conditional) entries count as
 * if their condition held, object entries whatever object type they name. */
static PSID granted(ACE_HEADER *h, ACCESS_MASK *mask) {
        if (h->AceFlags & INHERIT_ONLY_ACE)
                return NULL;
        switch (h->AceType) {
        case ACCESS_ALLOWED_ACE_TYPE:
        case ACCESS_ALLOWED_CALLBACK_ACE_TYPE:
                *mask = ((ACCESS_ALLOWED_ACE *)h)->Mask;
                return &((ACCESS_ALLOWED_ACE *)h)->SidStart;
        case ACCESS_ALLOWED_OBJECT_ACE_TYPE:
        case ACCESS_ALLOWED_CALLBACK_OBJECT_ACE_TYPE: {
                ACCESS_ALLOWED_OBJECT_ACE *o = (ACCESS_ALLOWED_OBJECT_ACE *)h;
                BYTE *sid = (BYTE *)&o->ObjectType;
                if (o->Flags & ACE_OBJECT_TYPE_PRESENT)
                        sid += sizeof(GUID);
                if (o->Flags & ACE_INHERITED_OBJECT_TYPE_PRESENT)
                        sid += sizeof(GUID);
                *mask = o->Mask;
                return sid;
        }
        default:
                return NULL;
        }
}

int sf_tokenfile_check_sd(const char *path, void *sd) {
        union sf_win_user u;
        PSID me = sf_win_process_user(GetCurrentProcess(), &u), owner = NULL;
        PACL dacl = NULL;
        BOOL present = FALSE, defaulted = FALSE;
        char my_name[600], name[600], sid[200];

        sf_win_account_name(me, my_name, sizeof my_name);
        if (!GetSecurityDescriptorOwner(sd, &owner, &defaulted) || !owner || !trusted(owner, me)) {
                sf_win_account_name(owner, name, sizeof name);
                sf_log_error("token file %s is owned by %s, who can change its access list and so read or replace "
                             "the token; only you (%s), SYSTEM or Administrators may own it: from an administrator's "
                             "prompt run icacls \"%s\" /setowner \"%s\"",
                             path, owner ? name : "nobody", my_name, path, my_name);
                return -EPERM;
        }
        if (!GetSecurityDescriptorDacl(sd, &present, &dacl, &defaulted) || !present || !dacl) {
                sf_log_error("token file %s has no access list (a NULL DACL), which lets everyone read and change "
                             "the token; run icacls \"%s\" /inheritance:r /grant:r \"%s:F\"",
                             path, path, my_name);
                return -EPERM;
        }
        for (DWORD i = 0; i < dacl->AceCount; i++) {
                ACE_HEADER *h;
                if (!GetAce(dacl, i, (void **)&h)) {
                        sf_log_error("token file %s: entry %lu of its access list cannot be read", path,
                                     (unsigned long)i + 1);
                        return -EPERM;
                }
                ACCESS_MASK mask = 0;
                PSID who = granted(h, &mask);
                if (!who || trusted(who, me))
                        continue;
                for (size_t r = 0; r < sizeof bad_rights / sizeof bad_rights[0]; r++) {
                        if (!(mask & bad_rights[r].mask))
                                continue;
                        sf_win_account_name(who, name, sizeof name);
                        sf_win_sid_text(who, sid, sizeof sid);
                        sf_log_error("token file %s: its access list lets %s %s%s; only you (%s), SYSTEM and "
                                     "Administrators may have access: run icacls \"%s\" /inheritance:r /remove \"%s\" "
                                     "/grant:r \"%s:F\"",
                                     path, name, bad_rights[r].what,
                                     (h->AceFlags & INHERITED_ACE) ? " (inherited from its folder)" : "", my_name,
                                     path, sid, my_name);
                        return -EPERM;
                }
        }
        return 0;
}

static const char *file_type_name(DWORD type) {
        switch (type) {
        case FILE_TYPE_PIPE:
                return "a named pipe or a socket";
        case FILE_TYPE_CHAR:
                return "a character device (a console, NUL, a serial port)";
        default:
                return "of an unknown kind";
        }
}

/* Reads up to cap bytes; *n is how many. Returns 0 or the Win32 error. */
static DWORD read_all(HANDLE h, char *buf, size_t cap, size_t *n) {
        size_t got = 0;
        while (got < cap) {
                DWORD want = cap - got > MAXDWORD ? MAXDWORD : (DWORD)(cap - got), r = 0;
                if (!ReadFile(h, buf + got, want, &r, NULL))
                        return GetLastError();
                if (r == 0)
                        break;
                got += r;
        }
        *n = got;
        return 0;
}

/* The checks of sf_tokenfile_read on an open handle. */
static int check_and_read(HANDLE h, const char *path, char *buf, size_t cap, size_t *n) {
        BY_HANDLE_FILE_INFORMATION info;
        PSECURITY_DESCRIPTOR sd = NULL;
        char err[300], extra;
        size_t more = 0;
        DWORD type = GetFileType(h), e;
        int r;

        if (type != FILE_TYPE_DISK) {
                sf_log_error("token file %s is %s, not a regular file; " KEYGEN_HINT " FILE", path,
                             file_type_name(type));
                return -EINVAL;
        }
        if (!GetFileInformationByHandle(h, &info)) {
                e = GetLastError();
                sf_log_error("cannot query token file %s: %s", path, win_error(e, err, sizeof err));
                return -sf_win_errno(e);
        }
        if (info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) {
                sf_log_error("token file %s is a directory, not a file (Docker creates one at the target of a bind "
                             "mount whose source is missing); check the path, or " KEYGEN_HINT " FILE",
                             path);
                return -EISDIR;
        }
        e = GetSecurityInfo(h, SE_FILE_OBJECT, OWNER_SECURITY_INFORMATION | DACL_SECURITY_INFORMATION, NULL, NULL,
                            NULL, NULL, &sd);
        if (e != ERROR_SUCCESS) {
                sf_log_error("cannot read the owner and access list of token file %s: %s", path,
                             win_error(e, err, sizeof err));
                return -sf_win_errno(e);
        }
        r = sf_tokenfile_check_sd(path, sd);
        LocalFree(sd);
        if (r < 0)
                return r;
        unsigned long long size = ((unsigned long long)info.nFileSizeHigh << 32) | info.nFileSizeLow;
        if (size > cap) {
                sf_log_error("token file %s is %llu bytes, too large for a token (at most %zu); " KEYGEN_HINT " %s",
                             path, size, cap, path);
                return -EFBIG;
        }
        e = read_all(h, buf, cap, n);
        /* One byte more than the size allowed means the file grew after it was checked. */
        if (e == 0 && *n == cap)
                e = read_all(h, &extra, 1, &more);
        if (e != 0) {
                sf_log_error("cannot read token file %s: %s", path, win_error(e, err, sizeof err));
                return -sf_win_errno(e);
        }
        if (more > 0) {
                sf_log_error("token file %s grew past %zu bytes while being read; a token is smaller", path, cap);
                return -EFBIG;
        }
        return 0;
}

int sf_tokenfile_read(const char *path, const struct sf_conf *c, char *buf, size_t cap, size_t *n) {
        char err[300];
        int r;

        *n = 0;
        wchar_t *w = wide_of(path, "token file");
        if (!w)
                return -EINVAL;
        /* Links are followed, as on POSIX: the checks apply to the file that was opened. Others
         * may keep reading it, and keygen --force may replace it meanwhile, never write it. */
        HANDLE h = CreateFileW(w, GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_DELETE, NULL, OPEN_EXISTING,
                               FILE_ATTRIBUTE_NORMAL, NULL);
        if (h == INVALID_HANDLE_VALUE) {
                DWORD e = GetLastError(), attrs = GetFileAttributesW(w);
                free(w);
                /* Without backup semantics a directory cannot be opened at all: name it. */
                if (e == ERROR_ACCESS_DENIED && attrs != INVALID_FILE_ATTRIBUTES &&
                    (attrs & FILE_ATTRIBUTE_DIRECTORY)) {
                        sf_log_error("token file %s is a directory, not a file (Docker creates one at the target of "
                                     "a bind mount whose source is missing); check the path, or " KEYGEN_HINT " FILE",
                                     path);
                        return -EISDIR;
                }
                if (e == ERROR_FILE_NOT_FOUND || e == ERROR_PATH_NOT_FOUND)
                        sf_log_error("cannot open token file %s: %s; " KEYGEN_HINT " %s", path,
                                     win_error(e, err, sizeof err), path);
                else
                        sf_log_error("cannot open token file %s: %s", path, win_error(e, err, sizeof err));
                return -sf_win_errno(e);
        }
        free(w);
        r = check_and_read(h, path, buf, cap, n);
        CloseHandle(h);
        return r;
}

/* A descriptor whose access list is protected from inheritance and grants full control to the
 * current user alone (for directories, inherited by what they will hold). Free with
 * LocalFree(sa->lpSecurityDescriptor). Returns 0 or the Win32 error. */
static DWORD private_sa(SECURITY_ATTRIBUTES *sa, bool dir) {
        union sf_win_user u;
        PSID me = sf_win_process_user(GetCurrentProcess(), &u);
        wchar_t *s = NULL, sddl[256];

        if (!me || !ConvertSidToStringSidW(me, &s))
                return GetLastError();
        swprintf(sddl, sizeof sddl / sizeof sddl[0], L"D:P(A;%ls;FA;;;%ls)", dir ? L"OICI" : L"", s);
        LocalFree(s);
        sa->nLength = sizeof *sa;
        sa->bInheritHandle = FALSE;
        sa->lpSecurityDescriptor = NULL;
        if (!ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl, SDDL_REVISION_1, &sa->lpSecurityDescriptor,
                                                                  NULL))
                return GetLastError();
        return 0;
}

static bool is_sep(char c) {
        return c == '\\' || c == '/';
}

/* Where the directories one may create start: after "C:\", "\\server\share\", "\\?\C:\". */
static size_t root_len(const char *p) {
        if (is_sep(p[0]) && is_sep(p[1])) {
                int seps = 0;
                for (size_t i = 2; p[i]; i++)
                        if (is_sep(p[i]) && ++seps == 2)
                                return i + 1;
                return strlen(p);
        }
        if (p[0] && p[1] == ':')
                return is_sep(p[2]) ? 3 : 2;
        return is_sep(p[0]) ? 1 : 0;
}

/* mkdir -p of the token's folder, each new one private to the current user like the token. */
static int make_parents(const char *path) {
        char dir[MAX_PATH * 4], err[300];
        SECURITY_ATTRIBUTES sa;
        DWORD e;
        int r = 0;

        if (strlen(path) >= sizeof dir) {
                sf_log_error("cannot write the token to %s: the path is too long", path);
                return -ENAMETOOLONG;
        }
        snprintf(dir, sizeof dir, "%s", path);
        e = private_sa(&sa, true);
        if (e != 0) {
                sf_log_error("cannot write the token to %s: cannot build its access list: %s", path,
                             win_error(e, err, sizeof err));
                return -sf_win_errno(e);
        }
        for (size_t i = root_len(dir); dir[i] && r == 0; i++) {
                if (!is_sep(dir[i]) || is_sep(dir[i - 1]))
                        continue;
                char sep = dir[i];
                dir[i] = '\0';
                wchar_t *w = wide_of(dir, "the directory");
                if (!w) {
                        r = -EINVAL;
                        break;
                }
                if (CreateDirectoryW(w, &sa)) {
                        sf_log_info("created the directory %s (only you have access) for the token", dir);
                } else {
                        DWORD attrs = GetFileAttributesW(w);
                        e = GetLastError();
                        if (attrs == INVALID_FILE_ATTRIBUTES || !(attrs & FILE_ATTRIBUTE_DIRECTORY)) {
                                e = attrs == INVALID_FILE_ATTRIBUTES ? e : ERROR_DIRECTORY;
                                sf_log_error("cannot write the token to %s: the directory %s is missing and cannot be "
                                             "created: %s",
                                             path, dir, win_error(e, err, sizeof err));
                                r = -sf_win_errno(e);
                        }
                }
                free(w);
                dir[i] = sep;
        }
        LocalFree(sa.lpSecurityDescriptor);
        return r;
}

/* Writes, flushes to disk and closes h. Returns 0 or the Win32 error. */
static DWORD write_close(HANDLE h, const char *buf, size_t len) {
        DWORD e = 0;
        while (len > 0 && e == 0) {
                DWORD w = 0;
                if (!WriteFile(h, buf, len > MAXDWORD ? MAXDWORD : (DWORD)len, &w, NULL))
                        e = GetLastError();
                buf += w;
                len -= w;
        }
        if (e == 0 && !FlushFileBuffers(h))
                e = GetLastError();
        if (!CloseHandle(h) && e == 0)
                e = GetLastError();
        return e;
}

/* A new file at w (never an existing one, never through a link) with the token, private to
 * the current user; removed again if the token is not whole on disk. Returns 0 or the Win32
 * error, not logged. */
static DWORD create_private(const wchar_t *w, const char *hex, size_t len) {
        SECURITY_ATTRIBUTES sa;
        DWORD e = private_sa(&sa, false);
        if (e != 0)
                return e;
        HANDLE h = CreateFileW(w, GENERIC_WRITE, 0, &sa, CREATE_NEW, FILE_ATTRIBUTE_NORMAL, NULL);
        e = h == INVALID_HANDLE_VALUE ? GetLastError() : 0;
        LocalFree(sa.lpSecurityDescriptor);
        if (e != 0)
                return e;
        e = write_close(h, hex, len);
        if (e != 0)
                DeleteFileW(w);
        return e;
}

static int token_create(const char *path, const wchar_t *w, const char *hex, size_t len) {
        char err[300];
        DWORD e = create_private(w, hex, len);
        if (e == ERROR_FILE_EXISTS || e == ERROR_ALREADY_EXISTS)
                sf_log_error("%s exists; use --force to replace it", path);
        else if (e != 0)
                sf_log_error("cannot create token file %s: %s", path, win_error(e, err, sizeof err));
        return e ? -sf_win_errno(e) : 0;
}

/* With force: what is at path must be a regular file, not a link or another reparse point.
 * The token goes to a new private file beside it that replaces it in one move, written
 * through to disk: the old file is never written, so whoever could read it never sees the new
 * token, and the new one keeps its own access list. */
static int token_replace(const char *path, const wchar_t *w, const char *hex, size_t len) {
        char err[300], tmp[MAX_PATH * 4];
        DWORD attrs = GetFileAttributesW(w), e = 0;
        size_t dir_len = 0;

        if (attrs != INVALID_FILE_ATTRIBUTES && (attrs & FILE_ATTRIBUTE_REPARSE_POINT)) {
                sf_log_error("%s is a symbolic link or another reparse point; refusing to write a token through it, "
                             "remove it first",
                             path);
                return -ELOOP;
        }
        if (attrs != INVALID_FILE_ATTRIBUTES && (attrs & FILE_ATTRIBUTE_DIRECTORY)) {
                sf_log_error("%s is a directory; refusing to replace it with a token", path);
                return -EISDIR;
        }
        for (size_t i = 0; path[i]; i++)
                if (is_sep(path[i]) || (i == 1 && path[i] == ':'))
                        dir_len = i + 1;
        e = ERROR_FILE_EXISTS;
        for (int tries = 0; tries < 16 && (e == ERROR_FILE_EXISTS || e == ERROR_ALREADY_EXISTS); tries++) {
                unsigned int rnd = 0;
                if (!RtlGenRandom(&rnd, sizeof rnd)) {
                        sf_log_error("cannot replace token file %s: no random name for the new file", path);
                        return -EIO;
                }
                snprintf(tmp, sizeof tmp, "%.*s.%.200s.%08x", (int)dir_len, path, path + dir_len, rnd);
                wchar_t *wt = wide_of(tmp, "a new token file");
                if (!wt)
                        return -EINVAL;
                e = create_private(wt, hex, len);
                if (e == 0 && !MoveFileExW(wt, w, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH)) {
                        e = GetLastError();
                        DeleteFileW(wt);
                        free(wt);
                        sf_log_error("cannot replace token file %s: %s", path, win_error(e, err, sizeof err));
                        return -sf_win_errno(e);
                }
                free(wt);
        }
        if (e != 0)
                sf_log_error("cannot create a new token file beside %s: %s", path, win_error(e, err, sizeof err));
        return e ? -sf_win_errno(e) : 0;
}

int sf_tokenfile_write(const char *path, const char *hex, size_t len, bool force) {
        char err[300];
        int r;

        if (!path) {
                HANDLE out = GetStdHandle(STD_OUTPUT_HANDLE);
                DWORD e = 0;
                for (size_t off = 0; off < len && e == 0;) {
                        DWORD w = 0;
                        if (!out || out == INVALID_HANDLE_VALUE)
                                e = ERROR_INVALID_HANDLE;
                        else if (!WriteFile(out, hex + off, (DWORD)(len - off), &w, NULL))
                                e = GetLastError();
                        off += w;
                }
                if (e != 0)
                        sf_log_error("cannot write the token to standard output: %s", win_error(e, err, sizeof err));
                return e ? -sf_win_errno(e) : 0;
        }
        r = make_parents(path);
        if (r < 0)
                return r;
        wchar_t *w = wide_of(path, "token file");
        if (!w)
                return -EINVAL;
        r = force ? token_replace(path, w, hex, len) : token_create(path, w, hex, len);
        free(w);
        return r;
}
