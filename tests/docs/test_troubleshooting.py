#!/usr/bin/env python3
"""The troubleshooting table quotes messages sockferry really prints.

Usage: test_troubleshooting.py doc/TROUBLESHOOTING.md SOURCE_ROOT   (TAP output)

Each row of the table under "## Messages" starts with the message, written as one or
more `code` fragments; "…" stands for a part that varies (a path, an endpoint, an errno
text). Every fragment must match one C string literal of relay/, shim/, conf/ or preload/
(adjacent literals joined, printf conversions standing for "…"), its pieces in order.
"""
import os
import pathlib
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402

SOURCE_DIRS = ("relay", "shim", "conf", "preload")
# Error classes every table must cover: the words the link failures start with.
CLASSES = ("wrong peer", "no greeting", "version mismatch", "auth rejected", "upstream unavailable")
ELLIPSIS = "…"

LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
# A run of literals separated only by whitespace (C concatenates them).
LITERAL_RUN = re.compile(r'"(?:[^"\\\n]|\\.)*"(?:\s*"(?:[^"\\\n]|\\.)*")*')
CONVERSION = re.compile(r"%[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|z|j|t)?[diouxXcsp%]")
ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'"}


def unescape(s):
    return re.sub(r"\\(.)", lambda m: ESCAPES.get(m.group(1), m.group(1)), s)


def source_strings(root):
    """Every string literal of the sources, adjacent ones joined, conversions as '…'."""
    out = []
    for d in SOURCE_DIRS:
        for path in sorted((root / d).rglob("*.[ch]")):
            text = path.read_text(encoding="utf-8")
            text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
            for run in LITERAL_RUN.finditer(text):
                s = "".join(unescape(m.group(1)) for m in LITERAL.finditer(run.group(0)))
                s = CONVERSION.sub(lambda m: "%" if m.group(0) == "%%" else ELLIPSIS, s)
                out.append((f"{d}/{path.name}", s))
    return out


def table_rows(doc):
    text = doc.read_text(encoding="utf-8")
    m = re.search(r"^## Messages\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M)
    if not m:
        return None
    rows = []
    for line in m.group(1).splitlines():
        if not line.startswith("|") or re.match(r"^\|[-: |]+\|$", line):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) < 3 or cells[0].lower() in ("message", "sockferry prints"):
            continue
        rows.append(cells)
    return rows


def matches(fragment, literal):
    pieces = [p for p in fragment.split(ELLIPSIS)]
    pos = 0
    for i, piece in enumerate(pieces):
        if not piece:
            continue
        at = literal.find(piece, pos)
        if at < 0:
            return False
        pos = at + len(piece)
    return True


def main():
    doc, root = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    strings = source_strings(root)
    rows = table_rows(doc)
    tap = sftap.Tap()
    if rows is None:
        tap.ok(False, f"{doc.name} has a '## Messages' section")
        return tap.finish()
    tests = []
    for cells in rows:
        fragments = re.findall(r"`([^`]+)`", cells[0])
        if not fragments:
            tests.append((False, f"row without a `message` fragment: {cells[0]!r}"))
            continue
        for frag in fragments:
            frag = frag.replace("\\|", "|")
            pieces = [p for p in frag.split(ELLIPSIS) if p.strip()]
            if not pieces or max(len(p.strip()) for p in pieces) < 6:
                tests.append((False, f"fragment too short to identify a message: {frag!r}"))
                continue
            where = [f for f, s in strings if matches(frag, s)]
            tests.append((bool(where), f"{frag!r} occurs in the sources" + (f" ({where[0]})" if where else "")))
        if not cells[1] or not cells[2]:
            tests.append((False, f"row {fragments[0]!r} gives a cause and a fix"))
    quoted = " ".join(r[0] for r in rows)
    for cls in CLASSES:
        tests.append((f"`{cls}" in quoted, f"the table covers the error class '{cls}'"))
    for ok, desc in tests:
        tap.ok(ok, desc)
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())
