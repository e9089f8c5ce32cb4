#pragma once
/* Presets: preset = ssh-agent | gpg-agent | docker names a socket users forward most and gives
 * defaults for the keys a forward leaves out (sockferry.conf(5), preset). */
#include <stddef.h>

#include "conf/conf.h"

/* A preset's name, without case: 0, or -EINVAL with the names there are in err. */
int sf_conf_preset_parse(const char *name, enum sf_preset *out, char *err, size_t errlen);

/* Sets the defaults of f's preset for the keys f did not set, so that an explicit key wins
 * wherever it stands: call once all of f's keys are known. The connect defaults come from the
 * environment (SSH_AUTH_SOCK, XDG_RUNTIME_DIR, HOME, DOCKER_HOST). 0, or -EINVAL with what is
 * missing and what to write instead in err (f's listen, mode and env may be set then). */
int sf_conf_preset_apply(struct sf_forward *f, char *err, size_t errlen);
