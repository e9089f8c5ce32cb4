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
import pathlib
import re
import subprocess
import sys

import os

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402

TAP = sftap.Tap()
check = TAP.ok
skip = TAP.skip
report = TAP.finish

try:
    import yaml
except ImportError:
    yaml = None


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


def main():
    root = pathlib.Path(sys.argv[1])
    dockerfile = (root / "packaging" / "docker" / "Dockerfile").read_text()
    info = subprocess.run(["meson", "introspect", "--projectinfo", str(root / "meson.build")],
                          capture_output=True, text=True)
    version = json.loads(info.stdout)["version"] if info.returncode == 0 else None
    m = re.search(r"^ARG VERSION=(\S+)$", dockerfile, re.M)
    check(m and version and m.group(1) == version, "the Dockerfile's ARG VERSION is meson.build's version",
          f"Dockerfile {m and m.group(1)}, meson.build {version}")
    code = "\n".join(l for l in dockerfile.splitlines() if not l.startswith("#"))
    check(not re.search(r"-linux-gnu|print-multiarch", code), "no path names a multiarch triplet")
    st = stages(dockerfile)
    for name in ("static", "final"):
        lines = " ".join(st.get(name, []))
        for label in ("title", "description", "version", "licenses"):
            check(f"org.opencontainers.image.{label}=" in lines, f"{name}: OCI label org.opencontainers.image.{label}")
        check(re.search(r'HEALTHCHECK .*CMD \["(/usr/bin/)?sockferry", "check", "--pid", "1"\]', lines),
              f"{name}: HEALTHCHECK sockferry check --pid 1 (the entrypoint's own -c or -F)")
    users = [l for l in st.get("static", []) if l.startswith("USER ")]
    check(users and re.fullmatch(r"USER (\d+):(\d+)", users[-1]) and not users[-1].startswith("USER 0"),
          "static: runs as a non-root uid and gid", repr(users))
    for doc in ("README.md", "packaging/README.md"):
        copies = re.findall(r"^COPY --from=sockferry (\S+)", (root / doc).read_text(), re.M)
        check(copies and all("-linux-gnu" not in c for c in copies) and "/usr/lib/sockferry/" in copies,
              f"{doc}: COPY --from takes /usr/lib/sockferry/, the same on every architecture", repr(copies))

    if yaml is None:
        skip("compose.yaml", "python3-yaml is not installed (packaging/install-deps.sh installs it)")
        return report()
    compose_path = root / "packaging" / "docker" / "compose.yaml"
    compose = yaml.safe_load(compose_path.read_text())
    svc = compose["services"]["agent"]
    build = svc.get("build") or {}
    context = (compose_path.parent / build.get("context", "")).resolve()
    check(context == root.resolve() and (context / build.get("dockerfile", "")).is_file(),
          "compose.yaml: build: context is the source tree, its dockerfile exists there", repr(build))
    sock = [v for v in svc.get("volumes", []) if v.endswith(":/run/host/dispatch.sock")]
    default = re.search(r"\$\{HOST_SOCKET:-([^}]+)\}", sock[0]).group(1) if sock else ""
    check(re.match(r"/(Users|Volumes|private|tmp|var/folders)/", default),
          "compose.yaml: the default host socket is under a directory Docker Desktop shares from a Mac", default)
    return report()


if __name__ == "__main__":
    sys.exit(main())
