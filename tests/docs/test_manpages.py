#!/usr/bin/env python3
"""The man pages and the completions' table cover what the code accepts (TAP output).

Usage: test_manpages.py SOURCE_ROOT

* every long and short option of every `sockferry COMMAND` (struct option arrays and
  getopt strings of shim/cmd_*.c and the shared ones of shim/cli.h) is in doc/sockferry.1.scd
  and in packaging/completions/sockferry.cli, among the options of its command there;
* every command of shim/main.c is in both, and the table names no command main.c lacks;
* every per-forward configuration key (conf/keys.c sf_conf_keys[] with a forward parser) is among the
  table's keys, and the table names no other;
* every configuration key (conf/keys.c sf_conf_keys[]) is in doc/sockferry.conf.5.scd;
* every exit status the CLI defines (SF_EX_* in conf/conf.h, shim/cli.h) is in sockferry(1)'s EXIT STATUS.
"""
import importlib.util
import os
import pathlib
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402


def load_table(root):
    """The completions' table, read by the generator itself."""
    spec = importlib.util.spec_from_file_location("gen", root / "packaging" / "completions" / "gen.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen.load(str(root / "packaging" / "completions" / "sockferry.cli"))


def main():
    root = pathlib.Path(sys.argv[1])
    man1 = (root / "doc" / "sockferry.1.scd").read_text()
    man5 = (root / "doc" / "sockferry.conf.5.scd").read_text()
    _, table_commands, table_keys = load_table(root)
    comp_options = {c.name: {n for o in c.options for n in o.names} for c in table_commands}
    tests = []

    main_c = (root / "shim" / "main.c").read_text()
    commands = re.findall(r'\{\s*"([a-z]+)",\s*sf_cmd_\w+\s*\}', main_c)
    tests.append((len(commands) >= 3, f"shim/main.c lists commands ({', '.join(commands)})"))
    for cmd in commands:
        tests.append((f"*sockferry {cmd}*" in man1 or f"*{cmd}*" in man1, f"sockferry(1) documents the command {cmd}"))
        tests.append((cmd in comp_options, f"the completions' table has the command {cmd}"))
    extra = sorted(set(comp_options) - set(commands) - {"help"})
    tests.append((not extra, f"the completions' table names only commands of shim/main.c (extra: {extra})"))

    # shim/cli.h holds the options relay, run and check share (SF_CLI_LONGOPTS/SHORTOPTS).
    shared = set()
    for src in [root / "shim" / "cli.h"] + sorted((root / "shim").glob("cmd_*.c")):
        text = src.read_text()
        # check --pid parses relay's and run's options from their command line: not check's own.
        text = re.sub(r"relay_run_opts\[\] = \{.*?\n\s*\};", "", text, flags=re.S)
        # The file's command: cmd_NAME.c (cmd_NAME_none.c is the same command elsewhere); the
        # options of cli.h belong to every command that includes SF_CLI_LONGOPTS.
        m = re.match(r"cmd_([a-z]+)", src.name)
        cmd = m.group(1) if m else None
        longs = set(re.findall(r'\{\s*"([a-z][a-z-]*)",\s*(?:required|no|optional)_argument', text))
        shorts = set()
        for spec in re.findall(r'getopt_long\([^,]+,[^,]+,\s*"([^"]*)"', text) + \
                re.findall(r'#define\s+SF_CLI_SHORTOPTS\s+"([^"]*)"', text):
            shorts |= {ch for ch in spec if ch.isalpha()}
        if cmd is None:
            shared = {f"--{o}" for o in longs} | {f"-{ch}" for ch in shorts}
        elif "SF_CLI_LONGOPTS" in text:
            longs |= {o[2:] for o in shared if o.startswith("--")}
            shorts |= {o[1:] for o in shared if not o.startswith("--")}
        for opt in sorted(longs):
            tests.append((f"*--{opt}*" in man1, f"sockferry(1) documents --{opt} ({src.name})"))
            if cmd in comp_options:
                tests.append((f"--{opt}" in comp_options[cmd], f"the completions' table gives {cmd} --{opt}"))
        for ch in sorted(shorts):
            tests.append((f"*-{ch}*" in man1, f"sockferry(1) documents -{ch} ({src.name})"))
            if cmd in comp_options:
                tests.append((f"-{ch}" in comp_options[cmd], f"the completions' table gives {cmd} -{ch}"))

    conf = (root / "conf" / "keys.c").read_text()
    table = conf[conf.index(" sf_conf_keys[] = {"):]
    table = table[: table.index("};")]
    keys = re.findall(r'\{\s*"([a-z-]+)",', table)
    tests.append((len(keys) >= 10, f"conf/keys.c has a key table ({len(keys)} keys)"))
    for key in keys:
        tests.append((re.search(rf"^\*{re.escape(key)}\* =", man5, flags=re.M) is not None,
                      f"sockferry.conf(5) documents the key {key}"))
    forward_keys = {k for k, parser in re.findall(r'\{\s*"([a-z-]+)",\s*(\w+),', table)
                    if parser != "NULL"} - {"listen", "connect"}
    tests.append((forward_keys == set(table_keys),
                  "the completions' table offers the per-forward keys of conf/keys.c after -F ...,"
                  f" (missing: {sorted(forward_keys - set(table_keys))}, extra: {sorted(set(table_keys) - forward_keys)})"))

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
