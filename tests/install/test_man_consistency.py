#!/usr/bin/python3
"""test_man_consistency.py - the man pages' sources say what the program does.

pgpace.ini(5) (config/man/pgpace.ini.5.scd) against config/pgpace.ini.example, which the unit
test `config` keeps equal to src/config.c's key table: every section, every key under its
section with the example's default on its header line, and its "Unit", "Default" and "Range"
word for word; no key the program does not have.

pgpace(1) (config/man/pgpace.1.scd) against the binary: every command and subcommand
`pgpace --help` lists has a "## " subsection, and every option that command's own --help
names appears in that subsection; the global options appear under GLOBAL OPTIONS.

    test_man_consistency.py PGPACE SOURCE_ROOT

TAP output; stdlib only.
"""
import re
import subprocess
import sys

from tap import Tap  # beside this file: the script's folder is on sys.path

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def norm(text):
    return " ".join(text.split())


# ---- pgpace.ini(5) -------------------------------------------------------------------------

def example_keys(path):
    """[(section, key, value, {'Unit': ..., 'Default': ..., 'Range': ...})] in file order."""
    keys, section, cur, field = [], None, None, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"^\[(\w+)\]$", line)
            if m:
                section, cur, field = m.group(1), None, None
                continue
            m = re.match(r"^# (\w+)$", line)
            if m and section:
                cur, field = {"key": m.group(1), "fields": {}}, None
                continue
            m = re.match(r"^#   (What|Unit|Default|Range):\s*(.*)$", line)
            if m and cur:
                field = m.group(1)
                cur["fields"][field] = m.group(2)
                continue
            m = re.match(r"^#\s{5,}(\S.*)$", line)
            if m and cur and field:
                cur["fields"][field] += " " + m.group(1)
                continue
            m = re.match(r"^(\w+) =\s*(.*)$", line)
            if m:
                if not cur or cur["key"] != m.group(1):
                    raise SystemExit(f"{path}: '{line}' is not under its own '# {m.group(1)}' block")
                fields = {k: norm(v) for k, v in cur["fields"].items() if k != "What"}
                keys.append((section, m.group(1), m.group(2), fields))
                cur, field = None, None
    return keys


def man_ini_entries(path):
    """{(section, key): (header line, entry text)} and the section order of pgpace.ini.5.scd."""
    entries, sections, section, cur = {}, [], None, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith(";"):
                continue
            m = re.match(r"^## \[(\w+)\]$", line)
            if m:
                section, cur = m.group(1), None
                sections.append(section)
                continue
            if line.startswith("#"):
                section, cur = None, None
                continue
            m = re.match(r"^\*(\w+)\* =", line)
            if m and section:
                cur = (section, m.group(1))
                if cur in entries:
                    raise SystemExit(f"{path}: [{section}] {m.group(1)} is documented twice")
                entries[cur] = [line, []]
                continue
            if cur:
                entries[cur][1].append(line.strip())
    return {k: (h, "\n".join(body)) for k, (h, body) in entries.items()}, sections


def man_fields(text):
    """The entry's last paragraph: "Unit: U ++ / Default: D ++ / Range: R"."""
    last = norm(text.strip().split("\n\n")[-1])
    m = re.fullmatch(r"Unit: (.*?) \+\+ Default: (.*?) \+\+ Range: (.*)", last)
    return {"Unit": m.group(1), "Default": m.group(2), "Range": m.group(3)} if m else None


def unescape_scd(s):
    return s.replace("\\_", "_").replace("\\*", "*")


def check_ini_page(tap, root):
    example = example_keys(f"{root}/config/pgpace.ini.example")
    entries, man_sections = man_ini_entries(f"{root}/config/man/pgpace.ini.5.scd")
    tap.check(len(example) > 40, f"the example configuration holds {len(example)} keys")

    ex_sections = list(dict.fromkeys(s for s, _, _, _ in example))
    tap.check(man_sections == ex_sections,
              f"pgpace.ini(5) has the example's sections in its order: {' '.join(ex_sections)}",
              f"example: {ex_sections}", f"man page: {man_sections}")

    for section, key, value, fields in example:
        what = f"pgpace.ini(5) documents [{section}] {key} with its default, unit and range"
        entry = entries.get((section, key))
        if not entry:
            tap.check(False, what, f"no '*{key}* =' entry under '## [{section}]'")
            continue
        header, text = entry
        want_header = f"*{key}* = _{value}_" if value else f"*{key}* ="
        got = man_fields(unescape_scd(text))
        problems = []
        if header != want_header:
            problems.append(f"header: want '{want_header}', got '{header}'")
        if got is None:
            problems.append("no final 'Unit: ... ++ / Default: ... ++ / Range: ...' paragraph")
        else:
            for name in ("Unit", "Default", "Range"):
                if got[name] != fields.get(name):
                    problems.append(f"{name}: example says '{fields.get(name)}', "
                                    f"man page says '{got[name]}'")
        if len(norm(text.split("\n\n")[0])) < 10:
            problems.append("no description")
        tap.check(not problems, what, *problems)

    known = {(s, k) for s, k, _, _ in example}
    stale = sorted(f"[{s}] {k}" for s, k in entries if (s, k) not in known)
    tap.check(not stale, "pgpace.ini(5) documents no key the program does not have",
              *[f"not a key: {x}" for x in stale])


# ---- pgpace(1) -----------------------------------------------------------------------------

def run_help(pgpace, args):
    p = subprocess.run([pgpace, *args, "--help"], capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout + p.stderr


def help_commands(text):
    """[(command, [subcommands])] from the "commands:" block of `pgpace --help`."""
    out, inside = [], False
    for line in text.splitlines():
        if line.strip() == "commands:":
            inside = True
            continue
        if inside and not line.strip():
            break
        m = re.match(r"^  ([a-z][a-z-]*)(?: (\S+))?", line) if inside else None
        if m:
            subs = m.group(2).split("|") if m.group(2) and "|" in m.group(2) else []
            out.append((m.group(1), subs))
    return out


def man_sections(path):
    """{"## heading" or "# HEADING": text} of pgpace.1.scd."""
    parts, head = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith(";"):
                continue
            m = re.match(r"^(#{1,2}) (.+)$", line)
            if m:
                head = m.group(0)
                parts[head] = []
                continue
            if head:
                parts[head].append(line)
    return {h: unescape_scd("\n".join(t)) for h, t in parts.items()}


def has_option(text, opt):
    return re.search(rf"(?<![\w-]){re.escape(opt)}(?![a-z0-9-])", text) is not None


def check_command_page(tap, pgpace, root):
    sections = man_sections(f"{root}/config/man/pgpace.1.scd")
    for h in ("# NAME", "# SYNOPSIS", "# DESCRIPTION", "# GLOBAL OPTIONS", "# COMMANDS",
              "# EXIT STATUS", "# ENVIRONMENT", "# FILES", "# EXAMPLES", "# SEE ALSO"):
        tap.check(h in sections, f"pgpace(1) has the section {h[2:]}")

    rc, top = run_help(pgpace, [])
    tap.check(rc == 0, "pgpace --help exits 0", top)
    commands = help_commands(top)
    tap.check(len(commands) >= 10, f"pgpace --help lists {len(commands)} commands", top)

    global_opts = sorted(set(OPTION.findall(top)) | {"--help", "--version"})
    missing = [o for o in global_opts if not has_option(sections.get("# GLOBAL OPTIONS", ""), o)]
    tap.check(not missing, f"pgpace(1) GLOBAL OPTIONS has {' '.join(global_opts)}",
              *[f"missing: {o}" for o in missing])

    # "## dlq list, dlq replay, dlq purge" documents three commands.
    documented = {}
    for h, text in sections.items():
        if h.startswith("## "):
            for name in h[3:].split(", "):
                documented[name] = documented.get(name, "") + "\n" + text

    # Options every command takes (the global ones) are documented once, not per command.
    skip = set(global_opts)
    for cmd, subs in commands:
        rc, group_help = run_help(pgpace, [cmd])
        tap.check(rc == 0, f"pgpace {cmd} --help exits 0", group_help)
        names = [f"{cmd} {s}" for s in subs] or [cmd]
        for name in names:
            text = documented.get(name)
            if not tap.check(text is not None, f"pgpace(1) has a subsection for '{name}'",
                             f"no '## {name}' heading (or one listing it after a comma)"):
                continue
            help_text = group_help
            if subs:
                rc, help_text = run_help(pgpace, name.split())
                tap.check(rc == 0, f"pgpace {name} --help exits 0", help_text)
            opts = sorted(set(OPTION.findall(help_text)) - skip)
            missing = [o for o in opts if not has_option(text, o)]
            tap.check(not missing,
                      f"pgpace(1) '{name}' documents the options its --help names: "
                      f"{' '.join(opts) or '(none)'}", *[f"missing: {o}" for o in missing])
        if subs:
            # The group's own help (e.g. `pgpace customer --help`) may name options of several.
            opts = sorted(set(OPTION.findall(group_help)) - skip)
            all_text = "\n".join(documented.get(n, "") for n in names)
            missing = [o for o in opts if not has_option(all_text, o)]
            tap.check(not missing, f"pgpace(1) documents the options 'pgpace {cmd} --help' names",
                      *[f"missing: {o}" for o in missing])

    # And the other way: no subsection for a command the program does not have (a page kept
    # after a command was renamed or removed).
    known = set()
    for cmd, subs in commands:
        known.update([f"{cmd} {s}" for s in subs] or [cmd])
    extra = sorted(n for n in documented if n not in known)
    tap.check(not extra, "pgpace(1) documents only commands `pgpace --help` names",
              *[f"not a command: '{n}'" for n in extra])


def main():
    if len(sys.argv) != 3:
        print("usage: test_man_consistency.py PGPACE SOURCE_ROOT", file=sys.stderr)
        return 2
    pgpace, root = sys.argv[1], sys.argv[2]
    tap = Tap()
    check_ini_page(tap, root)
    check_command_page(tap, pgpace, root)
    print(f"1..{tap.n}")
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
