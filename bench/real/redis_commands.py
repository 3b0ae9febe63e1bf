"""Generates the data set the real_redis workload loads with
`redis-cli --pipe`: the commands in Redis's wire protocol (RESP), from a
fixed seed, so every allocator's server ends up holding the same data (the
harness compares DEBUG DIGEST).

What it builds, in order: string values of log-uniform size (8 B - 2 KiB),
small lists and hashes, then a third of the strings deleted at random and
replaced by new ones of other sizes, and some strings grown by APPEND - the
mix of sizes, lifetimes and growth that fragments a long-running cache.
"""
import math
import random

KEYS = 40_000  # string keys at scale 1


def _resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def _log_uniform(rng, lo, hi):
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _value(rng, lo, hi):
    n = _log_uniform(rng, lo, hi)
    unit = b"%08x" % rng.getrandbits(32)
    return (unit * (n // 8 + 1))[:n]


def write(path, scale):
    """Writes the commands to `path`; returns how many there are."""
    rng = random.Random(11)
    keys = max(10, int(KEYS * scale))
    cmds = []
    for i in range(keys):
        cmds.append(_resp("SET", f"obj:{i}", _value(rng, 8, 2048)))
    for j in range(keys // 100):
        cmds.append(_resp("RPUSH", f"list:{j}", *[_value(rng, 8, 128) for _ in range(50)]))
    for j in range(keys // 20):
        fields = []
        for f in range(10):
            fields += [f"field{f}", _value(rng, 4, 64)]
        cmds.append(_resp("HSET", f"user:{j}", *fields))
    dropped = rng.sample(range(keys), keys // 3)
    for i in dropped:
        cmds.append(_resp("DEL", f"obj:{i}"))
    for i in range(keys // 3):
        cmds.append(_resp("SET", f"new:{i}", _value(rng, 8, 2048)))
    gone = set(dropped)
    for i in rng.sample(range(keys), keys // 10):
        if i not in gone:
            cmds.append(_resp("APPEND", f"obj:{i}", _value(rng, 16, 256)))
    with open(path, "wb") as f:
        f.write(b"".join(cmds))
    return len(cmds)
