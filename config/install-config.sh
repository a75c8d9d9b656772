#!/bin/sh
# install-config.sh - `meson install` step: puts the example configuration in place as the
# live one, CONFIG_DIR/pgpace.ini, only when that file does not exist yet. An existing file is
# the operator's and is never touched, so reinstalling or upgrading keeps the settings.
#
#   install-config.sh EXAMPLE CONFIG_DIR INSTALLED_EXAMPLE
#
# EXAMPLE is the source file, CONFIG_DIR the absolute configuration directory (sysconfdir/pgpace)
# and INSTALLED_EXAMPLE where the example itself is installed (named in the message). Meson sets
# DESTDIR (staged installs: the file goes under it) and MESON_INSTALL_QUIET (--quiet: no message).
#
# The new file is 0640: it will hold the database password or tokens. When the group pgpace
# exists (the unit's Group=) and this is a real install by root, the file gets that group so the
# service can read it; otherwise the message says to do so.
set -eu

if [ $# -ne 3 ]; then
    echo "install-config.sh: usage: install-config.sh EXAMPLE CONFIG_DIR INSTALLED_EXAMPLE" >&2
    exit 2
fi
example=$1
config_dir=$2
installed_example=$3
config=$config_dir/pgpace.ini
target=${DESTDIR:-}$config

# Meson 0.57 to 1.0 (Debian 12 has 1.0.1) capture an install script's output and show it only
# when the script fails. When ours is captured (our standard output is not meson's), the message
# goes to meson's own standard output if that is a terminal or a pipe. Not to a regular file:
# reopened here it would have its own offset, and meson's buffered lines could overwrite it.
say() {
    [ -z "${MESON_INSTALL_QUIET:-}" ] || return 0
    meson_out=/proc/$PPID/fd/1
    if [ "$(readlink "/proc/$$/fd/1")" != "$(readlink "$meson_out")" ] &&
        { [ -p "$meson_out" ] || [ -c "$meson_out" ]; }; then
        printf '%s\n' "$*" 2>/dev/null >>"$meson_out" && return 0
    fi
    printf '%s\n' "$*"
}

if [ -e "$target" ] || [ -L "$target" ]; then
    say "Keeping the existing $target (not overwritten; this version's example is $installed_example)"
    exit 0
fi

mkdir -p "$(dirname "$target")"
# umask 027 and noclobber: the file is created 0640 by an exclusive open, so even a file that
# appeared since the test above is never overwritten and the content is never world-readable.
(
    umask 027
    set -C
    cat "$example" >"$target"
)
chmod 0640 "$target"

mode_note="mode 0640, group $(id -gn): chgrp pgpace $config once the pgpace user exists, so the service can read it"
if [ -z "${DESTDIR:-}" ] && [ "$(id -u)" = 0 ] && getent group pgpace >/dev/null 2>&1; then
    chgrp pgpace "$target"
    mode_note="mode 0640, group pgpace"
elif [ -n "${DESTDIR:-}" ]; then
    mode_note="mode 0640"
fi
say "Installing $example to $target ($mode_note); edit it, see pgpace.ini(5)"
