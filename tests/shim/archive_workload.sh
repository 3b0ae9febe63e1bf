#!/bin/sh
# tar + gzip round trip of a generated tree. The archive is made reproducible
# (sorted names, fixed owner and mtime, gzip -n) so both runs print the same
# checksums; the extracted tree must equal the original.
# Usage: archive_workload.sh PYTHON GEN_DATA TMPDIR
set -eu
py=$1 gen=$2 tmp=$3
mkdir "$tmp/src" "$tmp/out"
"$py" "$gen" tree "$tmp/src"
cd "$tmp"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf src.tar src
gzip -9 -n -c src.tar >src.tar.gz
echo "tar: $(cksum <src.tar)"
echo "tar.gz: $(cksum <src.tar.gz)"
gzip -d -c src.tar.gz | tar -xf - -C out
diff -r src out/src
gzip -1 -n -c src.tar | gzip -d | cmp - src.tar
(cd out && find . -type f | LC_ALL=C sort | xargs cksum)
