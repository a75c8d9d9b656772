#!/bin/sh
# scdoc.sh - turns one scdoc(5) page into roff: SCDOC < IN > OUT, then hyphenation off.
#
#   scdoc.sh SCDOC IN OUT
#
# scdoc writes its ".nh" before ".TH", and .TH (groff's man macros) turns hyphenation back on:
# man would break paths, key names and options at a hyphen it adds ("/etc/pg-pace/pgpace.ini"),
# and a reader copying them would copy that hyphen. A ".nh" after ".TH" keeps words whole.
set -eu
[ $# -eq 3 ] || { echo "usage: scdoc.sh SCDOC IN OUT" >&2; exit 2; }
"$1" <"$2" >"$3.tmp"
sed '/^\.TH /a\
.nh' "$3.tmp" >"$3"
rm -f "$3.tmp"
awk 'after_th && /^\.nh$/ { ok = 1 } { after_th = /^\.TH / } END { exit !ok }' "$3" ||
    { echo "scdoc.sh: no .TH line in $3" >&2; exit 1; }
