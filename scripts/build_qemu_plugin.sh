#!/usr/bin/env bash
# Builds the instruction-counting TCG plugin scripts/qemu_insn_count.c into
# target/qemu-plugin/libqemu_insn_count.so for the installed QEMU (7.2, plugin API version 1).
#
#   scripts/build_qemu_plugin.sh                 # header from $QEMU_SRC, else Debian's source package
#   QEMU_SRC=~/src/qemu-7.2.0 scripts/build_qemu_plugin.sh
#   scripts/build_qemu_plugin.sh /path/to/qemu-7.2.0     # the same, as an argument
#
# Contract: prints the plugin's path on its last line and exits 0, or exits non-zero saying why.
# The plugin needs QEMU's public include/qemu/qemu-plugin.h of the QEMU version it is loaded into
# (the API changed after 7.2: version 2 replaced the inline op this plugin uses). That header is
# GPL-2.0-or-later and is not kept in this repository: it is taken from a QEMU source tree given
# by $QEMU_SRC or the argument, or else extracted from Debian's `qemu` source package
# (`apt-get source --download-only qemu`, about 24 MB; a deb-src entry is added to apt's sources if
# there is none) into target/qemu-plugin/. The build is skipped when the .so is newer than the
# source and the header. Used by bench/arm.sh; not by scripts/test.sh or CI.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/qemu-plugin
mkdir -p "$out"
src="${1:-${QEMU_SRC:-}}"
header=""
if [ -n "$src" ]; then
    header="$src/include/qemu/qemu-plugin.h"
    [ -f "$header" ] || { echo "build_qemu_plugin: no $header" >&2; exit 1; }
elif [ -f "$out/include/qemu-plugin.h" ]; then
    header="$out/include/qemu-plugin.h"
else
    # Debian's source package of the installed QEMU.
    if ! apt-cache showsrc qemu >/dev/null 2>&1 || [ -z "$(apt-cache showsrc qemu 2>/dev/null)" ]; then
        echo "build_qemu_plugin: adding deb-src for bookworm to apt's sources" >&2
        suites="$(. /etc/os-release && echo "$VERSION_CODENAME")"
        cat >/etc/apt/sources.list.d/debian-src-qemu.sources <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $suites $suites-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: $suites-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
        apt-get update -qq
    fi
    dl="$out/debian-src"
    rm -rf "$dl" && mkdir -p "$dl"
    (cd "$dl" && apt-get source --download-only qemu >/dev/null 2>&1) || {
        echo "build_qemu_plugin: apt-get source qemu failed; give a QEMU 7.2 source tree as QEMU_SRC" >&2
        exit 1
    }
    orig="$(ls "$dl"/qemu_*.orig.tar.* | head -n1)"
    tar -xf "$orig" -C "$dl" --wildcards '*/include/qemu/qemu-plugin.h'
    mkdir -p "$out/include"
    cp "$dl"/qemu-*/include/qemu/qemu-plugin.h "$out/include/qemu-plugin.h"
    rm -rf "$dl"
    header="$out/include/qemu-plugin.h"
fi
version="$(sed -n 's/^#define QEMU_PLUGIN_VERSION \([0-9]*\)/\1/p' "$header")"
[ "$version" = 1 ] || {
    echo "build_qemu_plugin: $header is plugin API version '$version'; QEMU 7.2's is 1" >&2
    exit 1
}
so="$out/libqemu_insn_count.so"
if [ ! -f "$so" ] || [ scripts/qemu_insn_count.c -nt "$so" ] || [ "$header" -nt "$so" ]; then
    incdir="$(dirname "$header")"
    # In 7.2 the header needs only the C library (no glib).
    cc -O2 -Wall -Wextra -shared -fPIC -I "$incdir" scripts/qemu_insn_count.c -o "$so" -lpthread
fi
echo "$so"
