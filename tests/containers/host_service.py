#!/usr/bin/env python3
"""The host's service for the container stages (tests/ci/containers-images.sh,
tests/ci/containers-attach.sh): the harness's http server (tests/lib/sfservers.py) on the unix
socket PATH, answering "host service: <path>" so a client in a container can tell which request
reached it. /slow... answers after 2 s and says on stderr when such a request starts (a drain
test); every request is logged on stderr.

    host_service.py PATH"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sfservers  # noqa: E402

path = sys.argv[1]
if os.path.exists(path):
    os.unlink(path)
sfservers.LOG_REQUESTS = True
sys.argv[1:] = ["http", path, "host service"]
sfservers.main()
