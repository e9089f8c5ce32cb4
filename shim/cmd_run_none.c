#include <stdio.h>

#include "shim/cli.h"

/* `run` is the container side: Linux namespaces, capabilities and the preload library. */
int sf_cmd_run(int argc, char **argv) {
        fprintf(stderr, "sockferry: run is the container (Linux) side and is not built on this system; "
                        "use `sockferry relay` here\n");
        return 64;
}
