#!/usr/bin/env bash
# test_install.sh - `meson install` of this build into a temporary DESTDIR, and the tree it
# leaves: the binary runs, the systemd unit names the installed binary and configuration, the
# example configuration is there, the live configuration is created once and never overwritten
# (the install runs three times), nothing else is installed (no demo receiver, no benchmark
# tool), and the man pages render without a single groff warning. Never writes outside DESTDIR.
# TAP output.
#
#   test_install.sh MESON BUILD_ROOT SOURCE_ROOT BINDIR CONFIG EXAMPLE UNITDIR MANDIR MAN_BUILT
#
# BINDIR ... MANDIR are the absolute install paths this build was configured with (from
# config/meson.build); MAN_BUILT is yes or no (-Dman, scdoc found).
set -uo pipefail

if [ $# -ne 9 ]; then
    echo "usage: test_install.sh MESON BUILD_ROOT SOURCE_ROOT BINDIR CONFIG EXAMPLE UNITDIR MANDIR MAN_BUILT" >&2
    exit 2
fi
meson=$1 build=$2 src=$3 bindir=$4 config=$5 example=$6 unitdir=$7 mandir=$8 man_built=$9

dest=$(mktemp -d "${TMPDIR:-/tmp}/pgpace-install.XXXXXX") || exit 1
trap 'rm -rf "$dest"' EXIT

n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
    n=$((n + 1))
    failed=$((failed + 1))
    echo "not ok $n - $1"
    shift
    # Every line of the details as a TAP comment (a multi-line one too).
    for detail in "$@"; do printf '%s\n' "$detail" | sed 's/^/#   /'; done
}
# check DESCRIPTION COMMAND...: ok when COMMAND succeeds.
check() {
    local what=$1
    shift
    if "$@"; then ok "$what"; else not_ok "$what" "failed: $*"; fi
}

# One install into $dest; its output (meson's and our install script's) in $install_out. The
# output is read through a pipe: that is how the script's message reaches it (see
# config/install-config.sh).
install_out=
run_install() {
    install_out=$("$meson" install -C "$build" --no-rebuild --destdir "$dest" "$@" 2>&1 | cat)
    return "${PIPESTATUS[0]}"
}

# ---- first install: an empty DESTDIR -------------------------------------------------------
if run_install; then
    ok "meson install --destdir succeeds"
else
    not_ok "meson install --destdir succeeds" "$install_out"
    echo "1..$n"
    exit 1
fi

# Exactly these files: anything else installed (the demo receiver, a bench tool, a build-time
# tool) fails here.
expected=("$bindir/pgpace" "$unitdir/pgpace.service" "$example" "$config")
if [ "$man_built" = yes ]; then
    expected+=("$mandir/man1/pgpace.1" "$mandir/man5/pgpace.ini.5")
fi
want=$(printf '%s\n' "${expected[@]}" | sort)
got=$(cd "$dest" && find . ! -type d | sed 's|^\.||' | sort)
if [ "$got" = "$want" ]; then
    ok "the installed files are exactly: $(tr '\n' ' ' <<<"$want")"
else
    not_ok "the installed files are exactly the expected ones" "expected:" "$want" "installed:" "$got"
fi

# The binary.
bin=$dest$bindir/pgpace
check "pgpace is installed executable in the bindir" test -f "$bin" -a -x "$bin"
version_out=$("$bin" --version 2>&1)
if [[ "$version_out" =~ ^pgpace\ [0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    ok "the installed pgpace runs: $version_out"
else
    not_ok "the installed pgpace runs --version" "got: $version_out"
fi
schema_out=$("$bin" version 2>&1)
if [[ "$schema_out" =~ ^pgpace\ [0-9.]+\ \(schema\ version\ [0-9]+\)$ ]]; then
    ok "the installed pgpace carries its schema: $schema_out"
else
    not_ok "the installed pgpace version names its schema version" "got: $schema_out"
fi

# The systemd unit.
unit=$dest$unitdir/pgpace.service
want_exec="ExecStart=$bindir/pgpace --config $config run"
got_exec=$(grep '^ExecStart=' "$unit" 2>/dev/null)
if [ "$got_exec" = "$want_exec" ]; then
    ok "the unit starts the installed binary with the installed configuration: $got_exec"
else
    not_ok "the unit's ExecStart names the installed binary and configuration" \
        "want: $want_exec" "got:  $got_exec"
fi
check "the unit's ExecStart binary exists in the installed tree" test -x "$dest$bindir/pgpace"
if grep -n '@' "$unit" >/dev/null; then
    not_ok "no @PLACEHOLDER@ is left in the unit" "$(grep -n '@' "$unit")"
else
    ok "no @PLACEHOLDER@ is left in the unit"
fi
for line in "Type=notify" "User=pgpace" "Group=pgpace" "ExecReload=/bin/kill -HUP \$MAINPID" \
    "RestartPreventExitStatus=1" "WantedBy=multi-user.target"; do
    check "the unit has $line" grep -qxF "$line" "$unit"
done
# Exactly the installed man pages: the project has no web site to send an operator to
# (test_urls.py checks every URL installed or printed).
check "the unit's Documentation= names the two man pages and nothing else" \
    grep -qxF 'Documentation=man:pgpace(1) man:pgpace.ini(5)' "$unit"
# systemd's own check, where systemd is installed (it is not needed to build or test pgpace):
# on a copy whose ExecStart points into DESTDIR (verify wants the binary to exist), with man
# looking in DESTDIR for the Documentation= pages. Any output is a complaint (an unknown key or
# a bad value is only a warning, exit status 0), so there must be none.
if command -v systemd-analyze >/dev/null 2>&1; then
    mkdir -p "$dest.verify" && trap 'rm -rf "$dest" "$dest.verify"' EXIT
    sed "s|^ExecStart=$bindir/pgpace |ExecStart=$dest$bindir/pgpace |" "$unit" >"$dest.verify/pgpace.service"
    # Without the man pages (-Dman=disabled) their Documentation= entries cannot resolve.
    [ "$man_built" = yes ] || sed -i '/^Documentation=/d' "$dest.verify/pgpace.service"
    verify_out=$(MANPATH="$dest$mandir" systemd-analyze verify "$dest.verify/pgpace.service" 2>&1)
    verify_rc=$?
    if [ "$verify_rc" -eq 0 ] && [ -z "$verify_out" ]; then
        ok "systemd-analyze verify finds nothing wrong with the unit"
    else
        not_ok "systemd-analyze verify finds nothing wrong with the unit" "exit $verify_rc" "$verify_out"
    fi
fi

# The example configuration, and the live one made from it.
check "the example configuration is the repository's config/pgpace.ini.example" \
    cmp -s "$src/config/pgpace.ini.example" "$dest$example"
live=$dest$config
check "the configuration was created from the example" cmp -s "$src/config/pgpace.ini.example" "$live"
mode=$(stat -c %a "$live" 2>/dev/null)
if [ "$mode" = 640 ]; then ok "the configuration is mode 0640"; else not_ok "the configuration is mode 0640" "mode: $mode"; fi
if grep -qF "Installing $src/config/pgpace.ini.example to $live (mode 0640" <<<"$install_out"; then
    ok "the install said it created the configuration"
else
    not_ok "the install said it created the configuration" "$install_out"
fi
# The installed binary loads the installed file: it gets as far as connecting (to nowhere).
status_out=$("$bin" --config "$live" --db "host=$dest/no-socket-here port=1" status 2>&1)
if grep -qF "cannot connect to the database at host=$dest/no-socket-here" <<<"$status_out"; then
    ok "the installed binary loads the installed configuration"
else
    not_ok "the installed binary loads the installed configuration" "$status_out"
fi

# ---- second install: the operator has edited the configuration ------------------------------
printf '\n# edited by the operator\n[dispatcher]\nlease_seconds = 90\n' >>"$live"
chmod 0600 "$live"
before=$(sha256sum <"$live")
if run_install; then ok "a second install succeeds"; else not_ok "a second install succeeds" "$install_out"; fi
after=$(sha256sum <"$live")
if [ "$before" = "$after" ] && grep -qx 'lease_seconds = 90' "$live"; then
    ok "the second install left the edited configuration as it was"
else
    not_ok "the second install left the edited configuration as it was" "$(tail -5 "$live")"
fi
mode=$(stat -c %a "$live" 2>/dev/null)
if [ "$mode" = 600 ]; then ok "its mode too (0600)"; else not_ok "the edited configuration keeps its mode 0600" "mode: $mode"; fi
if grep -qF "Keeping the existing $live (not overwritten; this version's example is $example)" <<<"$install_out"; then
    ok "the install said it kept the existing configuration"
else
    not_ok "the install said it kept the existing configuration" "$install_out"
fi
check "the example was updated beside it" cmp -s "$src/config/pgpace.ini.example" "$dest$example"

# ---- third install: --quiet --------------------------------------------------------------------
if run_install --quiet; then ok "meson install --quiet succeeds"; else not_ok "meson install --quiet succeeds" "$install_out"; fi
if [ -z "$install_out" ]; then
    ok "--quiet: the install script said nothing"
else
    not_ok "--quiet: the install script said nothing" "$install_out"
fi
after=$(sha256sum <"$live")
if [ "$before" = "$after" ]; then ok "--quiet: the configuration is still the edited one"; else not_ok "--quiet: the configuration is still the edited one"; fi

# ---- the man pages -------------------------------------------------------------------------
if [ "$man_built" = yes ]; then
    for page in man1/pgpace.1 man5/pgpace.ini.5; do
        f=$dest$mandir/$page
        # -ww: every groff warning; -z: no output, only the diagnostics.
        warnings=$(LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$f" 2>&1)
        if [ -f "$f" ] && [ -z "$warnings" ]; then
            ok "$page renders without warnings"
        else
            not_ok "$page renders without warnings" "$warnings"
        fi
        text=$(LC_ALL=C.UTF-8 groff -man -Tutf8 -P-cbou "$f" 2>&1)
        for heading in NAME SYNOPSIS DESCRIPTION FILES "SEE ALSO"; do
            check "$page has the section $heading" grep -qx "$heading" <<<"$text"
        done
        # The paths it names are this build's (substituted, not the template's @...@).
        check "$page names the installed configuration $config" grep -qF "$config" <<<"$text"
        if grep -q '@[A-Z_]*@' <<<"$text"; then
            not_ok "$page has no @PLACEHOLDER@ left" "$(grep '@[A-Z_]*@' <<<"$text")"
        else
            ok "$page has no @PLACEHOLDER@ left"
        fi
        # No hyphen added by hyphenation: a path or key broken as "pg-pace" would be copied so.
        hyphen=$'\xe2\x80\x90' # U+2010, what groff prints where it hyphenates
        if grep -qF "$hyphen" <<<"$text"; then
            not_ok "$page breaks no word with a hyphen" "$(grep -F "$hyphen" <<<"$text" | head -3)"
        else
            ok "$page breaks no word with a hyphen"
        fi
    done
    # What man(1) finds under the installed tree.
    for page in 1:pgpace 5:pgpace.ini; do
        section=${page%%:*} name=${page#*:}
        found=$(MANPATH="$dest$mandir" man -w "$section" "$name" 2>&1)
        if [ "$found" = "$dest$mandir/man$section/$name.$section" ]; then
            ok "man finds $name($section) in the installed mandir"
        else
            not_ok "man finds $name($section) in the installed mandir" "$found"
        fi
    done
fi

echo "1..$n"
[ "$failed" -eq 0 ]
