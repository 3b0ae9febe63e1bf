"""A Python program that builds and reshapes a large in-memory data set, run
by the harness as the real_python workload:

    PYTHONMALLOC=malloc python3 -S -s python_objects.py SCALE

PYTHONMALLOC=malloc sends every object to malloc instead of Python's own
small-object allocator (which takes 256 KiB arenas from mmap and would leave
the allocator under test only the large objects), so this is a Python
program whose many small, short-lived objects all go to the allocator being
measured. It prints checksum=<crc32> computed from its results, which must be
the same under every allocator.
"""
import json
import random
import sys
import zlib

LETTERS = "abcdefghijklmnopqrstuvwxyz"
RECORDS = 25_000  # at scale 1


def make_records(rng, n):
    records = {}
    for i in range(n):
        key = "user:%010x" % rng.getrandbits(40)
        name = "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 18)))
        tags = [rng.choice(LETTERS) * rng.randint(1, 6) for _ in range(rng.randint(0, 5))]
        records[key] = {"id": i, "name": name, "tags": tags, "score": round(rng.random() * 1000, 3)}
    return records


def index_by_tag(records):
    index = {}
    for key, rec in records.items():
        for tag in rec["tags"]:
            index.setdefault(tag, []).append(key)
    return index


def main():
    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    rng = random.Random(7)
    records = make_records(rng, max(1, int(RECORDS * scale)))
    index = index_by_tag(records)

    # A serialise/parse round trip of a third of the records, as a program
    # that writes and reads back its state does.
    keys = sorted(records)
    part = {k: records[k] for k in keys[::3]}
    restored = json.loads(json.dumps(part))
    if restored != part:
        raise SystemExit("json round trip changed the data")

    # Drop half the records, then rank what is left.
    for k in keys[::2]:
        del records[k]
    ranked = sorted(records.values(), key=lambda r: (-r["score"], r["name"]))
    words = {}
    for rec in ranked:
        words[rec["name"][:3]] = words.get(rec["name"][:3], 0) + 1

    summary = {
        "left": len(records),
        "tags": sorted((t, len(v)) for t, v in index.items())[:50],
        "top": [(r["name"], r["score"]) for r in ranked[:100]],
        "prefixes": sorted(words.items())[:200],
    }
    crc = zlib.crc32(json.dumps(summary, sort_keys=True).encode())
    print("checksum=%08x" % crc)


if __name__ == "__main__":
    main()
