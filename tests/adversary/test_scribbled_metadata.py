"""A client writes garbage over the metadata of a region it may write.

Every client maps the whole object writable: the block descriptors of its
blocks are its to write, and nothing but trust keeps it out of the page
descriptors, the lease table or the header. A region is a trust domain (its
mode says who is in it); the daemon is not in it: it reads all of this as
untrusted data and must answer every call (a status, a failed check), never
crash or hang, and go on serving every other region.

The garbage is seeded (MEMD_ADVERSARY_SEED replays a run); the layout comes
from the region's own header (docs/region-format.md).
"""
import mmap
import os
import random
import struct
import urllib.request

import hostile
from harness import DaemonTest
from memd.v1 import memd_pb2 as pb

REGION = "scribbled"
# magic, version, page_size, header_bytes, method, discipline, max_pages,
# max_owners, max_clients, max_roots, class_count, then the offsets.
HEADER = struct.Struct("<Q10I7Q")
ANSWERED = ("OK", "INVALID_ARGUMENT", "NOT_FOUND", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
            "FAILED_PRECONDITION", "DATA_LOSS", "OUT_OF_RANGE", "ALREADY_EXISTS")


def layout(buf):
    f = HEADER.unpack_from(buf, 0)
    keys = ("magic", "version", "page_size", "header_bytes", "method", "discipline", "max_pages", "max_owners",
            "max_clients", "max_roots", "class_count", "slots_offset", "lease_offset", "roots_offset",
            "page_desc_offset", "block_desc_offset", "data_offset", "total_bytes")
    return dict(zip(keys, f))


def scribble(socket, ns, target, seed):
    """As nobody, in a region of its own: lease, scribble over `target`, ask."""
    rng = random.Random(seed)
    rec = {"target": target, "seed": seed}
    with hostile.Session(socket, "scribbler") as s:
        opened = s.open_region(REGION, mode=0o600, max_bytes=16 << 20)
        rec["open"] = opened.to_json()
        if not opened.ok:
            return rec
        r = opened.response
        leased = s.lease(r.handle, r.stash_owner, count=4)
        run = s.lease_run(r.handle, 8)
        rec["lease_before"] = [leased.to_json(), run.to_json()]
        if not leased.ok or not run.ok:
            return rec
        pages = [b.page for b in leased.response.blocks]
        path = f"/dev/shm/memd.{r.object_path}"
        fd = os.open(path, os.O_RDWR)
        try:
            m = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        L = layout(m)
        committed = L["max_pages"]  # the page table spans them all; committed ones are at its start

        def garbage(offset, length):
            m[offset:offset + length] = rng.randbytes(length)

        if target in ("blocks", "run"):
            # Its own blocks (or run): descriptors and contents it can write.
            for p in pages if target == "blocks" else [run.response.run.page]:
                garbage(L["block_desc_offset"] + p * 64, 64)
                garbage(L["data_offset"] + p * 4096, 4096)
        elif target == "page_table":
            garbage(L["page_desc_offset"], min(committed, 256) * 8)
        elif target == "lease_table":
            garbage(L["lease_offset"], L["max_clients"] * 64)
        elif target == "header":
            garbage(0, 4096)
        m.close()

        def ask(key, outcome):
            rec[key] = outcome.to_json()
            return outcome

        ask("release", s.release(r.handle, pages))
        ask("release_run", s.release_run(r.handle, run.response.run.page))
        ask("stat", s.stat(REGION))
        ask("check", s.check(REGION, deadline=60))
        ask("compact", s.compact(REGION, deadline=60))
        ask("lease_after", s.lease(r.handle, r.stash_owner, count=4))
        ask("lease_run_after", s.lease_run(r.handle, 8))
        ask("list", s.list_regions())
        ask("clients", s.list_clients())
        stats = s.stats()
        try:
            address = stats.response.metrics_address if stats.ok else "unknown"
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=60) as mt:
                rec["metrics"] = mt.status
        except OSError as e:
            rec["metrics"] = str(e)
        ask("close", s.close_region(r.handle))
        ask("remove", s.remove(REGION))
    return rec


class ScribbledMetadata(DaemonTest):
    def attack(self, target):
        seed = int(os.environ.get("MEMD_ADVERSARY_SEED", random.SystemRandom().randrange(2**32)))
        print(f"\n{target}: seed {seed}", flush=True)
        # Another user's region, which must not suffer.
        code, out = self.client.run("bystander", "fill", 5, 300, 64)
        self.assertEqual(code, 0, out)
        rec = self.attacker.run("test_scribbled_metadata", "scribble", target=target, seed=seed)
        self.assertEqual(rec["open"]["code"], "OK", rec)
        self.assertTrue(self.daemon.alive(),
                        f"memd died ({self.daemon.exit_code()}) of garbage in {target}: {rec}\n{self.tail_of_log()}")
        unanswered = {k: v for k, v in rec.items() if isinstance(v, dict) and v.get("code") not in ANSWERED}
        self.assertEqual(unanswered, {}, rec)
        self.assertEqual(rec["metrics"], 200, rec)
        code, out = self.client.run("bystander", "verify", 5, 300, 64)
        self.assertEqual(code, 0, out)
        self.assert_daemon_serves()

    def test_garbage_in_its_own_blocks(self):
        self.attack("blocks")

    def test_garbage_in_its_own_run(self):
        self.attack("run")

    def test_garbage_in_the_page_table(self):
        self.attack("page_table")

    def test_garbage_in_the_lease_table(self):
        self.attack("lease_table")

    def test_garbage_in_the_header(self):
        self.attack("header")
