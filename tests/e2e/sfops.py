"""What the tests of the operations commands share (test_check.py, test_stats.py,
test_vsock.py): a host link to check against, and `sockferry check`."""

from sfharness import free_port, keygen, run_sockferry


class Link:
    """A unix service behind a host relay on tcp with auth = token, in the scene sc."""

    def __init__(self, sc, service="echo"):
        self.d = sc.tmpdir()
        self.token = keygen(self.d)
        self.port = free_port()
        self.srv = sc.server(service, self.d + "/service.sock") if service else None
        self.host = sc.relay(["relay", "-F", "host:tcp:127.0.0.1:%d=unix:%s/service.sock,auth=token,token-file=%s"
                              % (self.port, self.d, self.token)])

    def spec(self, name="c", token=None, extra=""):
        return "%s:unix:%s/%s.sock=tcp:127.0.0.1:%d,auth=token,token-file=%s%s" % (
            name, self.d, name, self.port, token or self.token, extra)


def check(*args):
    rc, out, err = run_sockferry(["check"] + list(args))
    return rc, out, err
