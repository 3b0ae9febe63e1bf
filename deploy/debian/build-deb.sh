#!/usr/bin/env bash
# Builds memd's Debian package from a configured, built tree:
#
#   deploy/debian/build-deb.sh BUILD_DIR OUTPUT_DIR      (prints the .deb's path)
#
# The package is what `cmake --install --prefix /usr` puts in place, with the
# example config as the conffile /etc/memd/memd.conf, programs and libraries
# stripped, Depends from dpkg-shlibdeps, and the maintainer scripts beside
# this file (the memd user and group, the units enabled where systemd runs).
# Only Debian's own tools: dpkg-deb, dpkg-shlibdeps.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR OUTPUT_DIR" >&2
  exit 2
fi
build=$(realpath "$1")
mkdir -p "$2"
out=$(realpath "$2")
here=$(dirname "$(realpath "$0")")
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
arch=$(dpkg --print-architecture)
[ -n "$version" ] || { echo "$0: no project version in $build/CMakeCache.txt" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
DESTDIR=$root cmake --install "$build" --prefix /usr >/dev/null

# The config is the system's, kept across upgrades (a conffile), not an example.
install -d -m 0755 "$root/etc/memd"
mv "$root/usr/etc/memd/memd.conf.example" "$root/etc/memd/memd.conf"
rmdir "$root/usr/etc/memd" "$root/usr/etc"

# Debian's man pages are compressed (man reads them so).
gzip -9n "$root"/usr/share/man/man*/*

elf_files=()
while IFS= read -r -d '' f; do
  if [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = "177ELF" ]; then elf_files+=("$f"); fi
done < <(find "$root" -type f -print0)
strip --strip-unneeded "${elf_files[@]}"

# dpkg-shlibdeps reads debian/control of the directory it runs in.
mkdir -p "$stage/source/debian"
printf 'Source: memd\n\nPackage: memd\nArchitecture: any\n' >"$stage/source/debian/control"
depends=$(cd "$stage/source" && dpkg-shlibdeps -O -l"$root/usr/lib" "${elf_files[@]}" 2>"$stage/shlibdeps.log" |
          sed -n 's/^shlibs:Depends=//p') || { cat "$stage/shlibdeps.log" >&2; exit 1; }
[ -n "$depends" ] || { echo "$0: dpkg-shlibdeps found no dependencies" >&2; cat "$stage/shlibdeps.log" >&2; exit 1; }

install -d -m 0755 "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@DEPENDS@/$depends/" -e "s/@SIZE@/$size/" \
  "$here/control.in" >"$root/DEBIAN/control"
echo /etc/memd/memd.conf >"$root/DEBIAN/conffiles"
for script in postinst prerm postrm; do install -m 0755 "$here/$script" "$root/DEBIAN/$script"; done
install -m 0644 "$here/triggers" "$root/DEBIAN/triggers"
(cd "$root" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -printf '%P\0' |
   xargs -0 md5sum) >"$root/DEBIAN/md5sums"

deb=$out/memd_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
