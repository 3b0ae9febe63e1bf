#!/bin/sh
# The daemon links the region layer and the proto library, not libmemd's
# process heap: no symbol of client/process_heap.cc or client/heap.cc is in
# its binary (and, so that this cannot pass on an empty listing, Region's are).
#   tests/layering/daemon_links_no_process_heap.sh <memd binary>
set -u
symbols=$(nm -C "$1") || { echo "cannot list the symbols of $1"; exit 2; }
if printf '%s\n' "$symbols" | grep -E 'memd::client::process_arena\(|memd::Heap::'; then
  echo "the daemon links the process heap (the symbols above)"
  exit 1
fi
if ! printf '%s\n' "$symbols" | grep -q 'memd::Region::create'; then
  echo "no memd::Region::create in $1: not the daemon?"
  exit 2
fi
echo "the daemon links no process heap"
