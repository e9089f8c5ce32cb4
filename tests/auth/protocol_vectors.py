#!/usr/bin/env python3
"""sockferry/1 test vectors, computed with nothing but the Python standard library.

This is a second, independent implementation of the frames of doc/PROTOCOL.md (the first is
relay/link/frames.c): `protocol_vectors.py` prints the vector blocks for the document,
`protocol_vectors.py --check doc/PROTOCOL.md` recomputes every block found there and fails
on any difference, so the document, this script and the C code cannot drift apart.
"""
import hashlib
import hmac
import re
import sys

MAGIC = b"SFRY"
VERSION = 1
LABEL_CLIENT = b"sockferry/1 client"
LABEL_SERVER = b"sockferry/1 server"
LABEL_SERVICE = b"sockferry/1 service"

FIELDS = ("name", "key", "server-nonce", "client-nonce", "flags", "status", "reason",
          "hello", "client-frame", "status-frame")
# A frame with the SERVICE flag has its service extension (the name, then its MAC).
OPTIONAL = ("service", "service-ext")


def mac(key, label, snonce, cnonce, tail):
    return hmac.new(key, label + snonce + cnonce + tail, hashlib.sha256).digest()


def hello(snonce):
    return MAGIC + bytes([VERSION]) + snonce


def client_frame(key, snonce, cnonce, flags):
    return MAGIC + bytes([VERSION, flags]) + cnonce + mac(key, LABEL_CLIENT, snonce, cnonce, bytes([flags]))


def status_frame(key, snonce, cnonce, status, reason):
    body = bytes([status, len(reason)]) + reason
    return body + mac(key, LABEL_SERVER, snonce, cnonce, body)


def service_ext(key, snonce, cnonce, service):
    body = bytes([len(service)]) + service
    return body + mac(key, LABEL_SERVICE, snonce, cnonce, body)


def compute(name, key, snonce, cnonce, flags, status, reason, service=None):
    v = {
        "name": name,
        "key": key.hex(),
        "server-nonce": snonce.hex(),
        "client-nonce": cnonce.hex(),
        "flags": "%02x" % flags,
        "status": str(status),
        "reason": reason.decode(),
        "hello": hello(snonce).hex(),
        "client-frame": client_frame(key, snonce, cnonce, flags).hex(),
        "status-frame": status_frame(key, snonce, cnonce, status, reason).hex(),
    }
    if service is not None:
        v["service"] = service.decode()
        v["service-ext"] = service_ext(key, snonce, cnonce, service).hex()
    return v


VECTORS = [
    compute("connect", bytes(range(0x00, 0x20)), bytes(range(0x40, 0x60)), bytes(range(0x60, 0x80)),
            0x00, 0, b""),
    compute("probe, upstream down", bytes(range(0x00, 0x20)), bytes(range(0x40, 0x60)),
            bytes(range(0x60, 0x80)), 0x01, 2, b"unix:/var/run/docker.sock: connection refused"),
    # A key longer than the SHA-256 block (64 bytes) is hashed first by HMAC: both
    # implementations must do so.
    compute("long key, auth rejected", bytes(range(0x00, 0x64)), bytes([0xa5] * 32), bytes([0x5a] * 32),
            0x00, 1, b""),
    # A container relay's forward named ssh-agent asking for its own name (SERVICE | DEFAULT):
    # the extension follows the 70 bytes, and the host answers UNKNOWN_SERVICE (5) with what it
    # offers.
    compute("service by default, unknown", bytes(range(0x00, 0x20)), bytes(range(0x40, 0x60)),
            bytes(range(0x60, 0x80)), 0x0c, 5, b"unknown service ssh-agent: this listener offers agent, docker",
            b"ssh-agent"),
]


def render(v):
    lines = ["```sf-vector"]
    for f in FIELDS + OPTIONAL:
        if f in v:
            lines.append(("%-13s = %s" % (f, v[f])).rstrip())
    lines.append("```")
    return "\n".join(lines)


def parse_doc(text):
    blocks = re.findall(r"^```sf-vector\n(.*?)^```", text, re.S | re.M)
    out = []
    for b in blocks:
        v = {}
        for line in b.splitlines():
            k, sep, val = line.partition("=")
            if not sep:
                raise SystemExit("bad vector line: %r" % line)
            v[k.strip()] = val.strip()
        out.append(v)
    return out


def check(path):
    with open(path, encoding="utf-8") as f:
        doc = parse_doc(f.read())
    if len(doc) < 3:
        raise SystemExit("%s: expected at least 3 sf-vector blocks, found %d" % (path, len(doc)))
    bad = 0
    for v in doc:
        missing = [f for f in FIELDS if f not in v]
        if missing:
            print("vector %r: missing %s" % (v.get("name"), ", ".join(missing)))
            bad += 1
            continue
        want = compute(v["name"], bytes.fromhex(v["key"]), bytes.fromhex(v["server-nonce"]),
                       bytes.fromhex(v["client-nonce"]), int(v["flags"], 16), int(v["status"]),
                       v["reason"].encode(), v["service"].encode() if "service" in v else None)
        if bool(int(v["flags"], 16) & 0x04) != ("service" in v):
            print("vector %r: the SERVICE flag and the service fields disagree" % v["name"])
            bad += 1
        for f in FIELDS + tuple(k for k in OPTIONAL if k in v or k in want):
            if v[f] != want[f]:
                print("vector %r: %s is\n  %s\nexpected\n  %s" % (v["name"], f, v[f], want[f]))
                bad += 1
    print("%d vectors checked, %d differences" % (len(doc), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2]))
    if len(sys.argv) != 1:
        sys.exit("usage: protocol_vectors.py [--check doc/PROTOCOL.md]")
    print("\n\n".join(render(v) for v in VECTORS))
