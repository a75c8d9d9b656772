#!/usr/bin/python3
"""test_urls.py - every URL pgpace installs or prints leads somewhere that exists.

An operator follows what the unit's Documentation=, a man page, the example configuration, a
message or the status page names. The project has no web site of its own, so nothing it installs
or prints may send anyone to one: what it points at is a man page it installs, or (from the
Markdown documents in the source tree) a file of the source tree.

Scanned:
  - what `meson install` puts in place, as `meson introspect --installed BUILD_ROOT` lists it
    (the binary as its printable strings: its help texts, messages, embedded SQL and status
    page; the man pages as roff; the unit with this build's paths), so a file installed later
    is scanned without editing this test;
  - the sources of what is installed or printed: config/pgpace.service.in, config/man/*.scd,
    config/pgpace.ini.example, config/grafana-dashboard.json (imported by operators),
    config/install-config.sh (its messages), sql/**/*.sql (run by `pgpace migrate`; RAISE
    messages and hints reach users), src/status/* and src/demo/* whole, and the string
    literals of src/**/*.c and *.h (comments are not printed);
  - the Markdown files of the source tree, for their links to relative paths.

A URL is `scheme://` followed by a host or a `/` (so file:///x counts), or `man:NAME(N)`, or a
Markdown link target. "http:// or https://" names a scheme, not a place, and is not a URL.
Allowed, and nothing else:
  1. man:NAME(N) where this project builds that page (config/man/NAME.N.scd).
  2. A Markdown link to a relative path (its #fragment dropped) that exists, relative to the
     Markdown file. Markdown links with a scheme are not followed (no network here), and a
     Markdown file is neither installed nor printed.
  3. Placeholders that cannot be mistaken for a real place: the host is example.com,
     example.net or example.org or a name under them (RFC 2606), localhost, 127.0.0.1 or [::1];
     any user, port or path.
  4. Syntax descriptions: the host is an upper-case metavariable (http://HOST:PORT).
  5. XML namespace names, only as the value of an xmlns or xmlns:PREFIX attribute: identifiers
     nobody fetches (there are none today).
Anything else fails: a real host (https://github.com/..., https://www.w3.org/...), a bare
name such as db, a file: URL, a host made at run time ("http://%s").

    test_urls.py MESON SOURCE_ROOT BUILD_ROOT

TAP output; stdlib only.
"""
import json
import os
import re
import subprocess
import sys

from tap import Tap  # beside this file: the script's folder is on sys.path

# A scheme, "://", then what follows up to white space. The scheme must not continue a word.
SCHEME_URL = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*)://([^\s\"'<>`]*)")
# Optional user info, then the host: a bracketed IPv6 literal or a name up to ":", "/", ...
HOST = re.compile(r"^(?:[^\s/?#@\[\]]*@)?(\[[^\]\s]*\]|[^\s/?#:()\\,;\[\]]*)")
MAN_URL = re.compile(r"(?<![A-Za-z0-9_-])man:([^\s()\"'<>]*)(\((\w+)\))?")
XMLNS = re.compile(r"\bxmlns(?::[\w.-]+)?\s*=\s*[\"']([^\"']*)[\"']")
MD_INLINE = re.compile(r"\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
MD_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(\S+)", re.M)
PLACEHOLDER_DOMAINS = ("example.com", "example.net", "example.org")
LOOPBACK = ("localhost", "127.0.0.1", "[::1]")


def man_pages(root):
    """{"pgpace(1)", "pgpace.ini(5)"}: the pages config/man builds."""
    pages = set()
    for name in os.listdir(os.path.join(root, "config", "man")):
        m = re.fullmatch(r"(.+)\.(\d\w*)\.scd", name)
        if m:
            pages.add(f"{m.group(1)}({m.group(2)})")
    return pages


def verdict(url, host, pages):
    """None when the URL is allowed, else why not."""
    if url.startswith("man:"):
        return None if url[4:] in pages else "not a man page this project installs"
    h = host.lower()
    if h in LOOPBACK:
        return None
    if any(h == d or h.endswith("." + d) for d in PLACEHOLDER_DOMAINS):
        return None
    if re.fullmatch(r"[A-Z][A-Z0-9_]*", host):
        return None
    if host == "":
        return "no host: a path on the machine it is read on, not a file of the repository"
    return f"host {host!r}: not a placeholder (RFC 2606, loopback), nor a man page"


def urls_in(text, pages):
    """[(line, url, reason or None)] for every URL in text."""
    found = []
    namespaces = {m.start(1) for m in XMLNS.finditer(text)}

    def line_of(pos):
        return text.count("\n", 0, pos) + 1

    for m in SCHEME_URL.finditer(text):
        rest = m.group(2)
        host = HOST.match(rest).group(1)
        if not re.match(r"[\w\[%$]", host) and not rest.startswith("/"):
            continue  # "http:// or https://.", "'^http://('": a scheme named, no place
        url = m.group(0).rstrip(".,;:)")
        reason = None if m.start() in namespaces else verdict(url, host, pages)
        found.append((line_of(m.start()), url, reason))
    for m in MAN_URL.finditer(text):
        url = m.group(0)
        found.append((line_of(m.start()), url, verdict(url, "", pages)))
    return found


def c_string_literals(text):
    """The text of a C file's string literals at their own offsets, everything else blanked
    (newlines kept, so line numbers hold): comments and code are not printed."""
    out = [c if c == "\n" else " " for c in text]
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == "'":
            j = i + 1
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif c == '"':
            j = i + 1
            while j < n and text[j] not in '"\n':
                j += 2 if text[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                out[k] = text[k]
            i = j + 1
        else:
            i += 1
    return "".join(out)


def printable_strings(data):
    """A binary's runs of 4 or more printable bytes, one per line."""
    return "\n".join(m.group().decode("ascii")
                     for m in re.finditer(rb"[\x20-\x7e\t]{4,}", data))


def roff_text(text):
    """A man page as its words: roff's escapes taken out (scdoc writes hooks\\&.example)."""
    return text.replace("\\&", "").replace("\\-", "-").replace("\\e", "\\")


def read_scannable(path):
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data:
        return printable_strings(data), False
    text = data.decode("utf-8", errors="replace")
    if re.search(r"\.\d\w*$", path):
        text = roff_text(text)
    return text, True


def sources(root):
    """The source files whose text is installed or printed, with whether only C literals count."""
    out = [os.path.join(root, "config", f) for f in
           ("pgpace.service.in", "pgpace.ini.example", "grafana-dashboard.json",
            "install-config.sh")]
    out += sorted(os.path.join(root, "config", "man", f)
                  for f in os.listdir(os.path.join(root, "config", "man")) if f.endswith(".scd"))
    picked = []
    for sub, exts in (("sql", (".sql",)), ("src/status", None), ("src/demo", None),
                      ("src", (".c", ".h"))):
        for d, dirs, files in os.walk(os.path.join(root, sub)):
            dirs.sort()
            for f in sorted(files):
                if exts is None or f.endswith(exts):
                    picked.append(os.path.join(d, f))
    out += list(dict.fromkeys(picked))
    return [(p, p.endswith((".c", ".h"))) for p in out]


def markdown_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        # Build directories (any name) and git's own.
        dirs[:] = sorted(x for x in dirs if x != ".git" and not os.path.isdir(
            os.path.join(d, x, "meson-private")))
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith(".md")]
    return out


def self_test(tap, pages):
    """The rules on known cases: the URLs this test exists to catch (the unit's old
    Documentation=, a hint naming a web page) are refused, the allowed kinds pass."""
    cases = [
        ("Documentation=man:pgpace(1) man:pgpace.ini(5)", []),
        ("Documentation=man:pgpace(1) https://github.com/pgpace/pgpace",
         ["https://github.com/pgpace/pgpace"]),
        ("see man:pgpace(8)", ["man:pgpace(8)"]),
        ("HINT = 'see https://www.w3.org/TR/trace-context/'",
         ["https://www.w3.org/TR/trace-context/"]),
        ("URL (\"postgresql://pgpace@db/pgpace\")", ["postgresql://pgpace@db/pgpace"]),
        ("file:///etc/pgpace/pgpace.ini", ["file:///etc/pgpace/pgpace.ini"]),
        ("http://%s:%d/", ["http://%s:%d/"]),
        ("https://example.com.evil.org/x", ["https://example.com.evil.org/x"]),
        ("--url https://hooks.example.com/pgpace, http://127.0.0.1:9187/ http://[::1]:80/ "
         "http://localhost/ http://HOST:PORT postgresql://pgpace@db.example.org/pgpace", []),
        ("http:// or https://. '^http://([A-Za-z0-9.-]+)', socks5://)", []),
        ('<svg xmlns="http://www.w3.org/2000/svg">', []),
        ('<a href="http://www.w3.org/2000/svg">', ["http://www.w3.org/2000/svg"]),
    ]
    for text, want in cases:
        got = [u for _, u, r in urls_in(text, pages) if r]
        tap.check(got == want, f"rule: {text!r} -> refused {want}", f"refused: {got}")


def main():
    if len(sys.argv) != 4:
        print("usage: test_urls.py MESON SOURCE_ROOT BUILD_ROOT", file=sys.stderr)
        return 2
    meson, root, build = sys.argv[1:]
    tap = Tap()
    pages = man_pages(root)
    tap.check(pages >= {"pgpace(1)", "pgpace.ini(5)"},
              f"config/man builds {' '.join(sorted(pages))}")
    self_test(tap, pages)

    total = 0
    installed = json.loads(subprocess.run([meson, "introspect", "--installed", build],
                                          check=True, capture_output=True, text=True).stdout)
    tap.check(len(installed) >= 3, f"meson installs {len(installed)} files")
    def where(path):
        inside = os.path.commonpath([os.path.abspath(build), os.path.abspath(path)])
        return os.path.relpath(path, build if inside == os.path.abspath(build) else root)

    targets = [(path, False, f"{where(path)} (installed as {dest})")
               for path, dest in sorted(installed.items())]
    targets += [(path, literals_only, os.path.relpath(path, root))
                for path, literals_only in sources(root)]
    for path, literals_only, label in targets:
        text, is_text = read_scannable(path)
        if literals_only:
            text = c_string_literals(text)
        found = urls_in(text, pages)
        total += len(found)
        bad = [f"{label}:{line}: {url}: {reason}" if is_text else f"{label}: {url}: {reason}"
               for line, url, reason in found if reason]
        if found or bad:
            tap.check(not bad, f"{label}: {len(found)} URL(s), each allowed", *bad)
    # The unit's Documentation= is the one URL every install has: had the scan missed it, the
    # checks above would be vacuous.
    tap.check(total > 0, f"{total} URLs found in what is installed or printed")

    for md in markdown_files(root):
        with open(md, encoding="utf-8", errors="replace") as f:
            text = f.read()
        label = os.path.relpath(md, root)
        links, bad = 0, []
        for m in list(MD_INLINE.finditer(text)) + list(MD_REFERENCE.finditer(text)):
            target = m.group(1)
            if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            links += 1
            rel = target.split("#", 1)[0]
            if not os.path.exists(os.path.join(os.path.dirname(md), rel)):
                bad.append(f"{label}:{text.count(chr(10), 0, m.start()) + 1}: {target}: "
                           "no such file in the source tree")
        if links:
            tap.check(not bad, f"{label}: {links} link(s) to files of the source tree, all there",
                      *bad)

    print(f"1..{tap.n}")
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
