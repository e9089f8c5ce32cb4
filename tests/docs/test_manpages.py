#!/usr/bin/env python3
"""The man pages and the bash completion cover what the code accepts (TAP output).

Usage: test_manpages.py SOURCE_ROOT

* every long and short option of every `sockferry COMMAND` (struct option arrays and
  getopt strings of shim/cmd_*.c and the shared ones of shim/cli.h) is in doc/sockferry.1.scd and in the bash completion;
* every command of shim/main.c is in both;
* every configuration key (conf/keys.c sf_conf_keys[]) is in doc/sockferry.conf.5.scd;
* every exit status the CLI defines (SF_EX_* in conf/conf.h, shim/cli.h) is in sockferry(1)'s EXIT STATUS.
"""
import os
import pathlib
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402


def main():
    root = pathlib.Path(sys.argv[1])
    man1 = (root / "doc" / "sockferry.1.scd").read_text()
    man5 = (root / "doc" / "sockferry.conf.5.scd").read_text()
    comp = (root / "packaging" / "bash-completion" / "sockferry").read_text()
    tests = []

    main_c = (root / "shim" / "main.c").read_text()
    commands = re.findall(r'\{\s*"([a-z]+)",\s*sf_cmd_\w+\s*\}', main_c)
    tests.append((len(commands) >= 3, f"shim/main.c lists commands ({', '.join(commands)})"))
    for cmd in commands:
        tests.append((f"*sockferry {cmd}*" in man1 or f"*{cmd}*" in man1, f"sockferry(1) documents the command {cmd}"))
        tests.append((re.search(rf"\b{cmd}\b", comp.split("commands=")[1].splitlines()[0]) is not None,
                      f"the completion offers the command {cmd}"))

    # shim/cli.h holds the options relay, run and check share (SF_CLI_LONGOPTS/SHORTOPTS).
    for src in sorted((root / "shim").glob("cmd_*.c")) + [root / "shim" / "cli.h"]:
        text = src.read_text()
        longs = set(re.findall(r'\{\s*"([a-z][a-z-]*)",\s*(?:required|no|optional)_argument', text))
        shorts = set()
        for spec in re.findall(r'getopt_long\([^,]+,[^,]+,\s*"([^"]*)"', text) + \
                re.findall(r'#define\s+SF_CLI_SHORTOPTS\s+"([^"]*)"', text):
            shorts |= {ch for ch in spec if ch.isalpha()}
        for opt in sorted(longs):
            tests.append((f"*--{opt}*" in man1, f"sockferry(1) documents --{opt} ({src.name})"))
            tests.append((re.search(rf"(?<![\w-])--{opt}(?![\w-])", comp) is not None,
                          f"the completion offers --{opt} ({src.name})"))
        for ch in sorted(shorts):
            tests.append((f"*-{ch}*" in man1, f"sockferry(1) documents -{ch} ({src.name})"))

    conf = (root / "conf" / "keys.c").read_text()
    table = conf[conf.index(" sf_conf_keys[] = {"):]
    table = table[: table.index("};")]
    keys = re.findall(r'\{\s*"([a-z-]+)",', table)
    tests.append((len(keys) >= 10, f"conf/keys.c has a key table ({len(keys)} keys)"))
    for key in keys:
        tests.append((re.search(rf"^\*{re.escape(key)}\* =", man5, flags=re.M) is not None,
                      f"sockferry.conf(5) documents the key {key}"))

    cli_h = (root / "conf" / "conf.h").read_text() + (root / "shim" / "cli.h").read_text()
    exit_section = man1[man1.index("# EXIT STATUS"):]
    exit_section = exit_section[: exit_section.index("\n# ", 1)]
    statuses = re.findall(r"#define\s+(SF_EX_\w+)\s+(\d+)", cli_h)
    tests.append((len(statuses) >= 2, f"exit statuses defined: {statuses}"))
    for name, num in statuses:
        tests.append((f"*{num}*" in exit_section, f"sockferry(1) EXIT STATUS lists {num} ({name})"))

    tap = sftap.Tap()
    for ok, desc in tests:
        tap.ok(ok, desc)
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())
