#include <stdio.h>

#include "shim/cli.h"

/* `link --stdio` is the far end of attach: it binds listen sockets in a Linux container. */
int sf_cmd_link(int argc, char **argv) {
        (void)argc;
        (void)argv;
        fprintf(stderr, "sockferry: link --stdio is the far end of attach, in a Linux container, and is not built "
                        "on this system; run `sockferry attach` here\n");
        return 64;
}
