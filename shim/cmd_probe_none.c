#include <stdio.h>

#include "shim/cli.h"

/* probe explains what is at a unix socket path: Windows' sockferry has none. */
int sf_cmd_probe(int argc, char **argv) {
        fprintf(stderr, "sockferry: probe looks at unix socket paths and is not built on Windows; "
                        "use `sockferry check` for the forwards of a configuration\n");
        return 64;
}
