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


ROOT = pathlib.Path(sys.argv[1])
MAN1 = (ROOT / "doc" / "sockferry.1.scd").read_text()
MAN5 = (ROOT / "doc" / "sockferry.conf.5.scd").read_text()
_, TABLE_COMMANDS, TABLE_KEYS = load_table(ROOT)
COMP_OPTIONS = {c.name: {n for o in c.options for n in o.names} for c in TABLE_COMMANDS}
COMMANDS = re.findall(r'\{\s*"([a-z]+)",\s*sf_cmd_\w+\s*\}', (ROOT / "shim" / "main.c").read_text())


def options():
    """(source file, command or None, long options, short options) of shim/cli.h and every
    shim/cmd_*.c; cli.h's (SF_CLI_LONGOPTS/SHORTOPTS) are those relay, run and check share."""
    out, shared = [], set()
    for src in [ROOT / "shim" / "cli.h"] + sorted((ROOT / "shim").glob("cmd_*.c")):
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
        out.append((src.name, cmd, sorted(f"--{o}" for o in longs), sorted(f"-{ch}" for ch in shorts)))
    return out


def key_table():
    conf = (ROOT / "conf" / "keys.c").read_text()
    table = conf[conf.index(" sf_conf_keys[] = {"):]
    return table[: table.index("};")]


def test_shim_main_c_lists_commands():
    assert len(COMMANDS) >= 3, COMMANDS


def test_sockferry_1_documents_every_command():
    missing = [cmd for cmd in COMMANDS if f"*sockferry {cmd}*" not in MAN1 and f"*{cmd}*" not in MAN1]
    assert not missing, "sockferry(1) does not document the commands %s" % missing


def test_the_completions_table_has_every_command():
    missing = [cmd for cmd in COMMANDS if cmd not in COMP_OPTIONS]
    assert not missing, "the completions' table lacks the commands %s" % missing


def test_the_completions_table_names_only_commands_of_shim_main_c():
    extra = sorted(set(COMP_OPTIONS) - set(COMMANDS) - {"help"})
    assert not extra, "the completions' table names commands shim/main.c lacks: %s" % extra


def test_sockferry_1_documents_every_option():
    missing = [(src, o) for src, _, longs, shorts in options() for o in longs + shorts if f"*{o}*" not in MAN1]
    assert not missing, "sockferry(1) does not document (source file, option): %s" % missing


def test_the_completions_table_gives_each_command_its_options():
    missing = [(cmd, o) for _, cmd, longs, shorts in options() if cmd in COMP_OPTIONS
               for o in longs + shorts if o not in COMP_OPTIONS[cmd]]
    assert not missing, "the completions' table does not give (command, option): %s" % missing


def test_conf_keys_c_has_a_key_table():
    keys = re.findall(r'\{\s*"([a-z-]+)",', key_table())
    assert len(keys) >= 10, "conf/keys.c has %d keys" % len(keys)


def test_sockferry_conf_5_documents_every_key():
    missing = [key for key in re.findall(r'\{\s*"([a-z-]+)",', key_table())
               if re.search(rf"^\*{re.escape(key)}\* =", MAN5, flags=re.M) is None]
    assert not missing, "sockferry.conf(5) does not document the keys %s" % missing


def test_the_completions_table_offers_the_per_forward_keys_of_conf_keys_c_after_f():
    forward_keys = {k for k, parser in re.findall(r'\{\s*"([a-z-]+)",\s*(\w+),', key_table())
                    if parser != "NULL"} - {"listen", "connect"}
    assert forward_keys == set(TABLE_KEYS), "missing: %s, extra: %s" % (
        sorted(forward_keys - set(TABLE_KEYS)), sorted(set(TABLE_KEYS) - forward_keys))


def exit_statuses():
    cli_h = (ROOT / "conf" / "conf.h").read_text() + (ROOT / "shim" / "cli.h").read_text()
    return re.findall(r"#define\s+(SF_EX_\w+)\s+(\d+)", cli_h)


def test_exit_statuses_are_defined():
    assert len(exit_statuses()) >= 2, exit_statuses()


def test_sockferry_1_exit_status_lists_every_status():
    section = MAN1[MAN1.index("# EXIT STATUS"):]
    section = section[: section.index("\n# ", 1)]
    missing = [(name, num) for name, num in exit_statuses() if f"*{num}*" not in section]
    assert not missing, "sockferry(1) EXIT STATUS does not list %s" % missing


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()))
