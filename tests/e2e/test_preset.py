#!/usr/bin/env python3
"""preset = ssh-agent end to end: a host relay whose forward names only its listen socket and
the preset reaches the real ssh-agent named by its SSH_AUTH_SOCK (a path with a space), and
ssh-add through the forward sees that agent's keys; without SSH_AUTH_SOCK it refuses to start."""
import os
import shutil
import stat
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import Scene, Skip, run_sockferry, wait_for, write_conf  # noqa: E402


def need_openssh():
    for tool in ("ssh-agent", "ssh-add", "ssh-keygen"):
        if not shutil.which(tool):
            raise Skip("%s is not installed (openssh-client)" % tool)


def ssh_add(args, sock):
    p = subprocess.run(["ssh-add"] + args, env=dict(os.environ, SSH_AUTH_SOCK=sock), capture_output=True, text=True,
                       timeout=20)
    return p.returncode, p.stdout + p.stderr


def test_ssh_agent_preset_reaches_the_agent_of_ssh_auth_sock(sc):
    need_openssh()
    d = sc.tmpdir()
    os.mkdir(d + "/agent dir")
    agent = d + "/agent dir/agent.sock"
    sc.popen(["ssh-agent", "-D", "-a", agent], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: os.path.exists(agent), 10, "ssh-agent's socket")
    conf = write_conf(d, "[agent]\npreset = ssh-agent\nlisten = unix:%s/out.sock\n" % d)
    r = sc.relay(["relay", "-c", conf], env={"SSH_AUTH_SOCK": agent})
    out = d + "/out.sock"
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600, oct(os.stat(out).st_mode)

    # "Could not open a connection to your authentication agent" (2) when nothing answers:
    # 1 and no identities is the empty agent itself answering.
    rc, text = ssh_add(["-l"], out)
    assert rc == 1 and "The agent has no identities." in text, (rc, text, r.text())

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sf-preset-test", "-f", d + "/key"],
                   check=True)
    rc, text = ssh_add(["-q", d + "/key"], agent)
    assert rc == 0, text
    rc, text = ssh_add(["-l"], out)
    assert rc == 0 and "sf-preset-test" in text and "ED25519" in text, (rc, text, r.text())


def test_ssh_agent_preset_without_ssh_auth_sock(sc):
    d = sc.tmpdir()
    conf = write_conf(d, "[agent]\npreset = ssh-agent\nlisten = unix:%s/out.sock\n" % d)
    rc, out, err = run_sockferry(["relay", "-t", "-c", conf], env={"SSH_AUTH_SOCK": ""})
    assert rc == 78, (rc, out, err)
    assert "%s:1: [agent] preset: SSH_AUTH_SOCK is unset" % conf in err, err
    assert not os.path.exists(d + "/out.sock")


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene)
