#!/usr/bin/env python3
"""Writes seed inputs for the fuzz targets: a few honest visits each, so that
a short run starts from calls that get past the first checks instead of
finding the message formats by chance.

  make_seeds.py <dir>   writes <dir>/<target>/<seed>
"""
import os
import struct
import sys


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number, value):
    """A protobuf field: an int (varint), bytes/str (length-delimited)."""
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    if isinstance(value, str):
        value = value.encode()
    return varint(number << 3 | 2) + varint(len(value)) + value


def message(*fields):
    return b"".join(field(n, v) for n, v in fields)


# daemon_rpc_fuzzer: steps of (method, flags, u16 length, request).
ALL_FLAGS = 0xFF


def rpc_step(method, request=b"", flags=ALL_FLAGS, extra=b""):
    return bytes([method, flags]) + struct.pack("<H", len(request)) + request + extra


def daemon_rpc_seeds():
    lease_small = message((3, 2), (4, 16), (6, 4))       # segregated, class 16, 4 blocks
    lease_large = message((3, 3), (6, 2))                # large blocks
    lease_run = message((3, 3), (4, 1))                  # LeaseRun: 3 pages, align 1
    release = rpc_step(6, message((3, 0)), extra=bytes([2]) + struct.pack("<HH", 0, 1))
    telemetry = message((2, message((1, message((1, ""), (2, message((1, 16), (2, 10), (4, 160))))),
                                    (5, message((1, 4096), (2, "main"))),
                                    (6, message((1, 1), (3, 65536), (4, 100), (5, 112), (6, b"\x80\x20"))))))
    yield "lease_release", rpc_step(5, lease_small) + release + rpc_step(10)
    yield "large_and_runs", (rpc_step(5, lease_large) + rpc_step(7, lease_run) +
                             rpc_step(9, message((4, 8)), extra=struct.pack("<H", 1)) +
                             rpc_step(8, b"", extra=struct.pack("<H", 1)) + rpc_step(11))
    yield "regions", (rpc_step(0, message((2, "other"), (3, 1), (5, 1))) + rpc_step(2) + rpc_step(3) +
                      rpc_step(1) + rpc_step(4, message((2, "other")), flags=1))
    yield "admin", rpc_step(14) + rpc_step(13) + rpc_step(15, message((1, "(process)"))) + rpc_step(12)
    yield "sessions", (rpc_step(16, message((3, "second"), (4, 1)), flags=1) + rpc_step(17, telemetry, flags=0) +
                       rpc_step(17, telemetry, flags=1) + rpc_step(18))


# lease_socket_fuzzer: a flags byte, then requests (op byte and fields).
def lease_socket_seeds():
    hello = bytes([1, 0])
    lease = bytes([2, 2, 16, 0, 8])              # segregated, class 16, stash, 8 blocks
    lease_large = bytes([2, 3, 0, 0, 2])
    give_back = bytes([3, 3]) + struct.pack("<HHH", 0, 1, 2)
    huge = bytes([4]) + struct.pack("<H", 20) + bytes([1])
    resize = bytes([6]) + struct.pack("<HH", 3, 40)
    release = bytes([5]) + struct.pack("<H", 3)
    yield "honest", b"\x00" + hello + lease + give_back + lease_large + huge + resize + release
    yield "no_hello", b"\x00" + lease + give_back
    yield "scribbled", b"\x01" + b"\x80" + hello + b"\x80" + lease + b"\x00" + struct.pack("<II", 64, 0xFFFFFFFF)


# telemetry_store_fuzzer: steps of (step byte, u16 length, report).
def telemetry_seeds():
    heaps = message((1, message((1, "orders"), (2, message((1, 16), (2, 5), (3, 1), (4, 80), (5, 16))))))
    samples = message((5, message((1, 4096), (2, "alloc_orders"))),
                      (6, message((1, 7), (2, "orders"), (3, 128), (4, 100), (5, 112), (6, b"\x80\x20"))))
    frees = message((7, message((1, "orders"), (2, 128))))
    for_session = lambda s, report: bytes([8 + s]) + struct.pack("<H", len(report)) + report
    yield "counters", for_session(0, heaps) + for_session(1, heaps) + for_session(0, heaps)
    yield "samples", for_session(0, samples) + for_session(1, frees) + bytes([0]) + for_session(0, samples)
    yield "forget", for_session(2, samples + heaps) + bytes([4 + 2, 1]) + bytes([2])
    # Call-chain pools: a symbol, then a pooled chain (outcome 1, pool 3,
    # 40 bytes, 100 counted, two frames) and a wrapper (outcome 2).
    chains = message((5, message((1, 4096), (2, "build_list"))),
                     (11, message((1, 9), (2, 1), (3, 1),
                                  (8, message((1, 1), (2, 3), (3, 40), (4, 100), (5, b"\x80\x20\x90\x20"))),
                                  (8, message((1, 2), (3, 40), (5, b"\x80\x20"))))))
    yield "chains", for_session(0, chains) + for_session(0, chains) + for_session(1, chains)


# region_open_fuzzer: flags, length, patches.
def region_open_seeds():
    yield "clean", bytes([0]) + struct.pack("<I", 0)
    yield "crashed", bytes([1]) + struct.pack("<I", 0)
    yield "truncated", bytes([2]) + struct.pack("<I", 1 << 20)
    yield "header_patch", bytes([1]) + struct.pack("<I", 0) + struct.pack("<I", 40) + bytes([4]) + b"\xff\xff\x00\x00"


def trace_seeds():
    # Figure 10's trace, a resize, a block from before the trace, a threaded mix.
    yield "figure10", (b"0x0:0xc648:4:(process):best:t.c,4:1:0:\n"
                       b"0x0:0xc658:5:(process):best:t.c,10:1:5:\n"
                       b"0xc658:0x0:5:(process):best:t.c,12:1:9:\n")
    yield "resize", (b"0x0:0x1000:16:(process):debug:/bin/x+0x10:7:1:\n"
                     b"0x1000:0x2000:64:(process):debug:/bin/x+0x20:7:2:\n"
                     b"0x2000:0x0:64:(process):debug:/bin/x+0x30:8:3:\n")
    yield "before", b"0xdead0:0x0:8:(process):best:a.c,1:1:1:\n0xbeef0:0xbeef8:8:(process):best:a.c,2:1:2:\n"


def profile_summary_seeds():
    # Figure 10's summary, a return-address site, two regions, other sites.
    yield "figure10", (b"ALLOCATION USAGE SUMMARY:n_alloc=2:n_free=1:s_alloc=9:s_free=5:\n"
                       b"region=(process):n_alloc=2:n_free=1:s_alloc=9:s_free=5:max_busy=9:extent=4096:\n"
                       b"file=t.c:n_alloc=2:n_free=1:s_alloc=9:s_free=5:\n"
                       b"    line=4:region=(process):n_alloc=1:n_free=0:s_alloc=4:s_free=0:\n"
                       b"    line=10:region=(process):n_alloc=1:n_free=1:s_alloc=5:s_free=5:\n")
    yield "pc", (b"ALLOCATION USAGE SUMMARY:n_alloc=1:n_free=0:s_alloc=12:s_free=0:\n"
                 b"file=<>:n_alloc=1:n_free=0:s_alloc=12:s_free=0:\n"
                 b"    pc=/lib/libc.so.6+0x8a1b2:region=0x55d0:n_alloc=1:n_free=0:s_alloc=12:s_free=0:\n"
                 b"other sites (past 4096):region=0x55d0:n_alloc=3:n_free=1:s_alloc=30:s_free=10:\n")


def main():
    root = sys.argv[1]
    for target, seeds in (("daemon_rpc_fuzzer", daemon_rpc_seeds()), ("lease_socket_fuzzer", lease_socket_seeds()),
                          ("telemetry_store_fuzzer", telemetry_seeds()), ("region_open_fuzzer", region_open_seeds()),
                          ("trace_format_fuzzer", trace_seeds()),
                          ("profile_summary_fuzzer", profile_summary_seeds())):
        os.makedirs(os.path.join(root, target), exist_ok=True)
        for name, data in seeds:
            with open(os.path.join(root, target, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
