#!/usr/bin/env python3
"""Deterministic inputs for the shim workloads (same bytes on every run).

  gen_data.py lines N     text lines for sort: words, integers, decimals, dups
  gen_data.py bytes N     N pseudo-random bytes (a --random-source for sort -R)
  gen_data.py json N      a JSON document of about N top-level records
  gen_data.py tree DIR    a directory of files, text and binary, for tar/gzip
"""
import json
import os
import random
import sys

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi "
         "omicron pi rho sigma tau upsilon phi chi psi omega").split()


def lines(n, out):
    rng = random.Random(1234)
    for i in range(n):
        r = rng.random()
        if r < 0.35:
            out.write(f"{rng.randint(-10**9, 10**9)}\n")
        elif r < 0.5:
            out.write(f"{rng.uniform(-1e4, 1e4):.3f} {rng.choice(WORDS)}\n")
        elif r < 0.6 and i:
            out.write(f"dup {i % 97}\n")  # many equal lines: ties in every sort
        else:
            k = rng.randint(1, 6)
            out.write(" ".join(rng.choice(WORDS) for _ in range(k)) + f" {i}\n")


def json_doc(n, out):
    rng = random.Random(99)
    doc = {
        f"rec{i:07d}": {
            "id": i,
            "name": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))),
            "score": round(rng.uniform(0, 1000), 4),
            "tags": [rng.choice(WORDS) for _ in range(rng.randint(0, 6))],
            "nested": {"a": [rng.randint(0, 99) for _ in range(rng.randint(0, 8))],
                       "ok": rng.random() < 0.5, "none": None},
        }
        for i in range(n)
    }
    json.dump(doc, out)


def tree(root):
    rng = random.Random(7)
    for d in range(8):
        sub = os.path.join(root, f"dir{d}")
        os.makedirs(sub, exist_ok=True)
        for f in range(12):
            path = os.path.join(sub, f"file{f:02d}")
            size = rng.choice([0, 1, 100, 4096, 65537, 300000])
            with open(path, "wb") as fh:
                if f % 3 == 0:  # incompressible
                    fh.write(rng.randbytes(size))
                else:           # compressible text
                    text = " ".join(rng.choice(WORDS) for _ in range(size // 5 + 1))
                    fh.write(text.encode()[:size])


def main():
    what, arg = sys.argv[1], sys.argv[2]
    if what == "lines":
        lines(int(arg), sys.stdout)
    elif what == "bytes":
        sys.stdout.buffer.write(random.Random(5).randbytes(int(arg)))
    elif what == "json":
        json_doc(int(arg), sys.stdout)
    elif what == "tree":
        tree(arg)
    else:
        sys.exit(f"unknown kind {what}")


if __name__ == "__main__":
    main()
