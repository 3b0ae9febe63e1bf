#!/usr/bin/env python3
"""Allocation-heavy Python: big dicts and lists (millions of entries in all),
strings, nested lists, deletion and rebuild, a JSON round trip, growing
bytearrays (realloc). Prints checksums only, so the output is the same under
any correct malloc. Run it with PYTHONMALLOC=malloc to send every object
through malloc instead of pymalloc's own arenas.
"""
import gc
import json
import zlib


def crc(*parts):
    c = 0
    for p in parts:
        c = zlib.crc32(p if isinstance(p, bytes) else str(p).encode(), c)
    return c


def dicts():
    d = {f"key{i}": [i, str(i) * (i % 5), (i, -i)] for i in range(300_000)}
    c1 = crc(len(d), *(k for k in list(d)[::1000]))
    # Delete every other key, then rebuild with new keys and bigger values.
    for i in range(0, 300_000, 2):
        del d[f"key{i}"]
    for i in range(0, 300_000, 2):
        d[f"new{i}"] = {"v": i, "s": "x" * (i % 300)}
    total = sum(len(v) for v in d.values())
    c2 = crc(len(d), total, next(iter(d)), list(d)[-1])
    ints = {i: i * i for i in range(500_000)}
    c3 = sum(ints.values()) % (1 << 61)
    del d, ints
    return c1, c2, c3


def lists():
    rows = [[j for j in range(i % 40)] for i in range(100_000)]
    c1 = sum(map(len, rows))
    words = [("w%d" % i) * (1 + i % 7) for i in range(300_000)]
    words.sort()
    c2 = crc(words[0], words[-1], words[150_000], len(words))
    del rows[::3]
    rows.extend([["z"] * (i % 17)] for i in range(100_000))
    c3 = len(rows)
    joined = "|".join(words)
    c4 = crc(len(joined), joined[-100:])
    del words, rows, joined
    return c1, c2, c3, c4


def json_round_trip():
    doc = {"items": [{"id": i, "name": f"item-{i}", "vals": list(range(i % 23)),
                      "sub": {"x": i * 0.5, "flag": i % 2 == 0}} for i in range(60_000)]}
    text = json.dumps(doc, sort_keys=True)
    back = json.loads(text)
    assert back == doc, "json round trip changed the document"
    return len(text), crc(text.encode())


def buffers():
    # bytearray += grows by realloc; bytes objects of many sizes, some huge.
    b = bytearray()
    for i in range(20_000):
        b += bytes([i & 0xFF]) * (i % 257)
    blobs = [bytes([i & 0xFF]) * (1 << (i % 21)) for i in range(400)]
    c = crc(bytes(b), len(blobs), sum(map(len, blobs)))
    del b, blobs
    return c


def main():
    for round_ in range(2):  # the second round reuses the freed memory
        print("round", round_)
        print("dicts", *dicts())
        print("lists", *lists())
        print("json", *json_round_trip())
        print("buffers", buffers())
        print("gc", gc.collect() >= 0)


main()
