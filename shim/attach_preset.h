#pragma once
/* attach's presets (--ssh-agent, --gpg-agent, --docker): the host's agent or engine socket
 * found here, a forward for each, and what the container's user needs there, set up again
 * at each run of the far end (a container restarted or made anew):
 *
 *   ssh-agent  /run/sockferry/ssh-agent.sock, the user's, 0600; SSH_AUTH_SOCK for the shells
 *              users open (/etc/profile.d/sockferry.sh, sourced from /etc/bash.bashrc)
 *   gpg-agent  the host's extra socket to /run/sockferry/gpg-agent.sock, 0600, and the
 *              user's `gpgconf --list-dirs agent-socket` a link to it; the gpg home 0700, the
 *              user's, with no-autostart; the public keys of the host's secret keys imported
 *   docker     the host engine's socket (DOCKER_HOST, else the current context) to
 *              /var/run/docker.sock, the user's and the user's group's, 0660
 *
 * The user (--user, else the container's configured one) does its part in an exec of its
 * own, as that user: root never acts in a directory the user can change. */
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "shim/attach_engine.h"
#include "shim/cli.h"

struct sf_attach_preset {
        bool ssh, gpg, gpg_keys, docker;
        const char *user; /* --user; NULL: the container's configured user */
        char exec_user[256];
        unsigned long uid, gid;
        char gpg_link[PATH_MAX]; /* the user's agent-socket in the container */
        char ssh_src[PATH_MAX + 16], gpg_src[PATH_MAX + 16], docker_src[PATH_MAX + 16]; /* here */
        char specs[3][3 * PATH_MAX];
        char *keys; /* the host's public keys, armored, for the container's gpg */
        size_t keys_len;
        unsigned keys_count;
        bool set_up; /* the first set-up was done (sf_attach_preset_prepare) */
};

static inline bool sf_attach_preset_any(const struct sf_attach_preset *p) {
        return p->ssh || p->gpg || p->docker;
}

/* Finds the host's sockets, the container's user and does the set-up there once (through
 * e's engine), and adds the forwards to o's -F specs. 0, or the exit status (logged): 1
 * when the container or a host socket cannot be used, SF_EX_USAGE for -- CMD. */
int sf_attach_preset_prepare(struct sf_attach_preset *p, struct sf_attach_engine *e, struct sf_cli_opts *o);
/* The set-up in the container again (attach's starting hook): after the first run, a
 * restarted container lost /run and a new one lost the user's links and keys. */
void sf_attach_preset_setup(struct sf_attach_preset *p, struct sf_attach_engine *e);
void sf_attach_preset_free(struct sf_attach_preset *p);
