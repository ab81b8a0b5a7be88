#!/bin/sh
# Build real Timeloop (the judge of bench/timeloop*.py) from a checkout of NVlabs/timeloop.
#
#   sh bench/timeloop_build.sh SOURCE_DIR [PREFIX]
#
# SOURCE_DIR: a work tree of NVlabs/timeloop at commit 019f107 (the commit the recorded reference data and fuzz
# cases were scored with); its pat-public/ is linked into src/pat as upstream's README says. PREFIX (default:
# SOURCE_DIR/install) receives bin/timeloop-model, bin/timeloop-mapper and lib/libtimeloop-model.so, the layout
# the benches expect (--timeloop-bin PREFIX/bin; the library is found in PREFIX/lib).
# Debian packages it needs (apt-get install -y ...):
#   scons libconfig++-dev libboost-dev libboost-iostreams-dev libboost-serialization-dev libyaml-cpp-dev
#   libncurses-dev libtinfo-dev libgpm-dev g++
# Takes 10-20 minutes on two cores; JOBS (default 2) sets scons -j. Nothing fetched is committed to Tileplan.
set -eu
if [ $# -lt 1 ]; then
    echo "usage: $0 SOURCE_DIR [PREFIX]" >&2
    exit 2
fi
src=$(cd "$1" && pwd)
prefix=${2:-$src/install}
jobs=${JOBS:-2}
for tool in scons g++; do
    command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install the packages listed in $0" >&2; exit 1; }
done
[ -f "$src/SConstruct" ] || { echo "$src has no SConstruct: not a Timeloop checkout" >&2; exit 1; }
if [ ! -e "$src/src/pat" ]; then
    [ -d "$src/pat-public/src/pat" ] || { echo "$src/pat-public/src/pat missing" >&2; exit 1; }
    ln -s ../pat-public/src/pat "$src/src/pat"
fi
(cd "$src" && scons -j"$jobs")
mkdir -p "$prefix/bin" "$prefix/lib"
# copied beside and renamed into place: a binary some bench is running cannot be overwritten ("Text file busy")
for f in build/timeloop-model:bin build/timeloop-mapper:bin build/libtimeloop-model.so:lib; do
    file=${f%:*}
    dest=$prefix/${f#*:}/$(basename "$file")
    cp "$src/$file" "$dest.new"
    mv -f "$dest.new" "$dest"
done
echo "Timeloop built: --timeloop-bin $prefix/bin"
