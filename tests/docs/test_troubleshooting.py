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


DOC, ROOT = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])


def rows():
    found = table_rows(DOC)
    assert found is not None, f"{DOC.name} has no '## Messages' section"
    return found


def fragments():
    """Every `code` fragment of the table's rows."""
    return [frag.replace("\\|", "|") for cells in rows() for frag in re.findall(r"`([^`]+)`", cells[0])]


def test_the_doc_has_a_messages_section():
    rows()


def test_every_row_quotes_a_message_in_fragments_long_enough_to_identify_it():
    bad = [cells[0] for cells in rows() if not re.findall(r"`([^`]+)`", cells[0])]
    assert not bad, f"rows without a `message` fragment: {bad}"
    short = [frag for frag in fragments()
             if not [p for p in frag.split(ELLIPSIS) if p.strip()]
             or max(len(p.strip()) for p in frag.split(ELLIPSIS) if p.strip()) < 6]
    assert not short, f"fragments too short to identify a message: {short}"


def test_every_fragment_occurs_in_the_sources():
    strings = source_strings(ROOT)
    missing = [frag for frag in fragments() if not any(matches(frag, s) for _, s in strings)]
    assert not missing, f"fragments no string of {', '.join(SOURCE_DIRS)} matches: {missing}"


def test_every_row_gives_a_cause_and_a_fix():
    bad = [cells[0] for cells in rows() if not cells[1] or not cells[2]]
    assert not bad, f"rows without a cause or a fix: {bad}"


def test_the_table_covers_every_error_class():
    quoted = " ".join(r[0] for r in rows())
    missing = [cls for cls in CLASSES if f"`{cls}" not in quoted]
    assert not missing, f"the table does not cover the error classes {missing}"


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()))
