#!/bin/sh
# sort over ~5 MB of generated lines: plain, numeric, shuffled with a fixed
# random source, and an external multithreaded sort (small buffer, temp
# files, --parallel) that mallocs from several threads.
# Usage: sort_workload.sh PYTHON GEN_DATA TMPDIR
set -eu
py=$1 gen=$2 tmp=$3
"$py" "$gen" lines 300000 >"$tmp/lines"
"$py" "$gen" bytes 65536 >"$tmp/random"
echo "== sort"
sort "$tmp/lines"
echo "== sort -n"
sort -n "$tmp/lines"
echo "== sort -R"
sort -R --random-source="$tmp/random" "$tmp/lines"
echo "== sort -u -k2 external parallel"
sort -u -k2 -S 512K --parallel=2 -T "$tmp" "$tmp/lines"
