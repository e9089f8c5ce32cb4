#!/usr/bin/env python3
"""The image files, read without Docker (TAP output): tests/ci/containers-images.sh builds and
runs them.

Usage: test_docker.py SOURCE_ROOT

* packaging/docker/Dockerfile: its ARG VERSION is meson.build's version (the OCI label); no
  path names a multiarch triplet (the same Dockerfile builds for amd64 and arm64); both images
  carry the OCI labels; the static image runs as a non-root uid; both HEALTHCHECKs are
  `check --pid 1`, which works for -c and -F entrypoints;
* packaging/docker/compose.yaml (python3-yaml): a build: whose context is the source tree and
  whose dockerfile exists there; its default host socket under a directory Docker Desktop
  shares from a Mac;
* the README.md and packaging/README.md COPY --from lines take the arch-independent path.
"""
import json
import os
import pathlib
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import yaml_module  # noqa: E402

ROOT = pathlib.Path(sys.argv[1])
DOCKERFILE = (ROOT / "packaging" / "docker" / "Dockerfile").read_text()


def stages(text):
    """{stage name: its lines} of a Dockerfile (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", text)
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"FROM\s+\S+(?:\s+AS\s+(\S+))?", line)
        if m:
            cur = m.group(1) or f"stage{len(out)}"
            out[cur] = []
        elif cur and line.strip() and not line.startswith("#"):
            out[cur].append(line.strip())
    return out


def test_the_dockerfiles_arg_version_is_meson_builds_version():
    info = subprocess.run(["meson", "introspect", "--projectinfo", str(ROOT / "meson.build")],
                          capture_output=True, text=True)
    version = json.loads(info.stdout)["version"] if info.returncode == 0 else None
    m = re.search(r"^ARG VERSION=(\S+)$", DOCKERFILE, re.M)
    assert m and version and m.group(1) == version, f"Dockerfile {m and m.group(1)}, meson.build {version}"


def test_no_path_names_a_multiarch_triplet():
    code = "\n".join(line for line in DOCKERFILE.splitlines() if not line.startswith("#"))
    assert not re.search(r"-linux-gnu|print-multiarch", code), code


def test_both_images_carry_the_oci_labels_and_healthcheck_check_pid_1():
    st = stages(DOCKERFILE)
    missing = []
    for name in ("static", "final"):
        lines = " ".join(st.get(name, []))
        missing += [f"{name}: OCI label org.opencontainers.image.{label}"
                    for label in ("title", "description", "version", "licenses")
                    if f"org.opencontainers.image.{label}=" not in lines]
        if not re.search(r'HEALTHCHECK .*CMD \["(/usr/bin/)?sockferry", "check", "--pid", "1"\]', lines):
            missing.append(f"{name}: HEALTHCHECK sockferry check --pid 1 (the entrypoint's own -c or -F)")
    assert not missing, missing


def test_the_static_image_runs_as_a_non_root_uid_and_gid():
    users = [line for line in stages(DOCKERFILE).get("static", []) if line.startswith("USER ")]
    assert users and re.fullmatch(r"USER (\d+):(\d+)", users[-1]) and not users[-1].startswith("USER 0"), users


def test_the_readmes_copy_from_takes_usr_lib_sockferry_the_same_on_every_architecture():
    for doc in ("doc/INSTALL.md", "packaging/README.md"):
        copies = re.findall(r"^COPY --from=sockferry (\S+)", (ROOT / doc).read_text(), re.M)
        assert copies and all("-linux-gnu" not in c for c in copies) and "/usr/lib/sockferry/" in copies, \
            f"{doc}: {copies!r}"


def compose():
    path = ROOT / "packaging" / "docker" / "compose.yaml"
    return path, yaml_module().safe_load(path.read_text())


def test_compose_yaml_build_context_is_the_source_tree_and_its_dockerfile_exists_there():
    path, doc = compose()
    build = doc["services"]["agent"].get("build") or {}
    context = (path.parent / build.get("context", "")).resolve()
    assert context == ROOT.resolve() and (context / build.get("dockerfile", "")).is_file(), repr(build)


def test_compose_yaml_default_host_socket_is_under_a_directory_docker_desktop_shares_from_a_mac():
    _, doc = compose()
    sock = [v for v in doc["services"]["agent"].get("volumes", []) if v.endswith(":/run/host/dispatch.sock")]
    default = re.search(r"\$\{HOST_SOCKET:-([^}]+)\}", sock[0]).group(1) if sock else ""
    assert re.match(r"/(Users|Volumes|private|tmp|var/folders)/", default), default


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()))
