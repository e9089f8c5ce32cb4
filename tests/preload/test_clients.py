#!/usr/bin/python3
"""Real, unmodified clients reach a server through a path that is an empty bind-mounted
directory: curl --unix-socket, socat, python3 (blocking, non-blocking with select, asyncio,
fork, exec), redirected to unix, TCP and vsock. Each test gets a Lab (tests/lib/sfharness.py):
the client runs in its "container", the servers outside."""
import os
import shutil
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import Lab, Scene, Skip, build_paths, preload_setup, vsock_loopback  # noqa: E402

ARGS = build_paths("lib")
CURL_ASAN = "sanitizer build: curl hangs with libasan preloaded, with or without sockferry"


def target(lab, kind, mode="tagged"):
    """A server of kind unix, tcp or vsock that names itself kind (tagged: KIND:LINE; http:
    "KIND: PATH"); its endpoint."""
    if kind == "vsock":
        why = vsock_loopback()
        if why:
            raise Skip(why)
    where = {"unix": mode + ".sock", "tcp": "tcp:127.0.0.1:0", "vsock": "vsock:any:0"}[kind]
    return lab.server(mode, where, kind)


def curl_redirected(lab, kind):
    if not shutil.which("curl"):
        raise Skip("curl is not installed (apt-get install curl)")
    if lab.asan:
        raise Skip(CURL_ASAN)
    ep = target(lab, kind, "http")
    r = lab.run(["curl", "-sS", "--max-time", "10", "--unix-socket", lab.mapped, "http://localhost/hello"],
                env=lab.env(f"{lab.mapped}={ep}"))
    assert r.returncode == 0 and r.stdout == f"{kind}: /hello\n" and r.stderr == "", f"{ep}: {r}"


def socat_redirected(lab, kind):
    if not shutil.which("socat"):
        raise Skip("socat is not installed (apt-get install socat)")
    ep = target(lab, kind)
    r = lab.run(["socat", "-T", "10", "-", f"UNIX-CONNECT:{lab.mapped}"], env=lab.env(f"{lab.mapped}={ep}"),
                stdin="ping\n")
    assert r.returncode == 0 and r.stdout == f"{kind}:ping\n", r


def python_redirected(mode):
    """The python3 client in mode (tests/preload/pyclient.py) redirected to a kind of target."""
    def redirected(lab, kind):
        ep = target(lab, kind)
        r = lab.python(mode, lab.mapped, "hello", env=lab.env(f"{lab.mapped}={ep}"))
        # with select: a unix target connects at once; TCP and vsock report EINPROGRESS, as the kernel does
        want = "" if mode != "select" else "connect_ex=0 " if kind == "unix" else "connect_ex=EINPROGRESS "
        assert r.returncode == 0 and r.stdout == f"{want}{kind}:hello\n", r
    return redirected


# Each client, redirected to each kind of target: one test each (CLIENT redirected to KIND).
CLIENTS = {"curl --unix-socket": curl_redirected, "socat": socat_redirected,
           "python3 blocking socket": python_redirected("blocking"),
           "python3 non-blocking socket with select": python_redirected("select"),
           "python3 asyncio": python_redirected("asyncio")}
KINDS = ("unix", "tcp", "vsock")


def redirected_to(client, kind):
    def test(lab):
        CLIENTS[client](lab, kind)
    test.__name__ = "test_%s_redirected_to_%s" % (client, kind)
    return test


def test_control_without_the_preload_a_client_cannot_connect_to_the_bind_mounted_directory(lab):
    r = lab.python("blocking", lab.mapped, "hello")
    assert r.returncode == 2 and r.stdout == "errno=111\n", r


def test_a_forked_child_is_redirected_state_inherited(lab):
    r = lab.python("fork", lab.mapped, "forked", env=lab.env(f"{lab.mapped}={target(lab, 'tcp')}"))
    assert r.returncode == 0 and r.stdout == "tcp:forked\n", r


def test_an_execed_child_is_redirected_map_inherited_through_the_environment(lab):
    r = lab.python("exec", lab.mapped, "execed", env=lab.env(f"{lab.mapped}={target(lab, 'tcp')}"))
    assert r.returncode == 0 and r.stdout == "tcp:execed\n", r


def test_a_path_through_a_symlinked_parent_directory_finds_the_mapping(lab):
    # /var/run/x.sock vs /run/x.sock: the same socket through a symlinked directory
    os.symlink(lab.path("run"), lab.path("varrun"))
    r = lab.python("blocking", lab.path("varrun", "x.sock"), "alias", env=lab.env(f"{lab.mapped}={target(lab, 'tcp')}"))
    assert r.returncode == 0 and r.stdout == "tcp:alias\n", r


def test_a_relative_path_finds_the_mapping(lab):
    r = lab.python("blocking", "x.sock", "relative", env=lab.env(f"{lab.mapped}={target(lab, 'tcp')}"),
                   cwd=lab.path("run"))
    assert r.returncode == 0 and r.stdout == "tcp:relative\n", r


def test_a_path_with_slashes_dots_and_dotdots_is_normalised_before_matching(lab):
    messy = lab.path("run") + "//./../run/x.sock/"
    r = lab.python("blocking", messy, "messy", env=lab.env(f"{lab.mapped}={target(lab, 'tcp')}"))
    assert r.returncode == 0 and r.stdout == "tcp:messy\n", r


def test_an_abstract_socket_passes_straight_through(lab):
    abstract = f"sfp-abstract-{os.getpid()}"
    lab.server("tagged", "@" + abstract, "abstract")
    r = lab.python("abstract", abstract, "hi", env=lab.env(f"{lab.mapped}={target(lab, 'tcp')}"))
    assert r.returncode == 0 and r.stdout == "abstract:hi\n" and r.stderr == "", r


def test_an_af_inet_connect_passes_straight_through(lab):
    port = target(lab, "tcp").rsplit(":", 1)[1]
    r = lab.python("tcp", port, "hi", env=lab.env(f"{lab.mapped}={target(lab, 'unix')}"))
    assert r.returncode == 0 and r.stdout == "tcp:hi\n" and r.stderr == "", r


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()) + [redirected_to(c, k) for c in CLIENTS for k in KINDS],
               fixture=Scene.of(lambda sc: Lab(sc, ARGS.lib)), setup=preload_setup)
