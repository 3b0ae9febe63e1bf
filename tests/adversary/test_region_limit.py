"""Issue 14.9: the daemon serves up to max-regions (256 by default) regions.

Each region the daemon opened used to take one of its process's heap slots
(63 of them), so the 64th region was refused ("too many heaps and regions
open in this process") although max-regions said 256. One unprivileged user
makes 100 small regions: all of them must be served.
"""
import hostile
from harness import DaemonTest
from memd.v1 import memd_pb2 as pb

REGIONS = 100


def create_many(socket, ns, count):
    """As nobody: `count` small shm regions on one session."""
    codes, first_refusal = {}, None
    with hostile.Session(socket, "many regions") as s:
        for i in range(count):
            o = s.open_region(f"small-{i}", discipline=pb.DISCIPLINE_SHM, max_bytes=4 << 20)
            codes[o.code] = codes.get(o.code, 0) + 1
            if not o.ok and first_refusal is None:
                first_refusal = {"index": i, **o.to_json()}
        listed = s.list_regions()
        mine = [r.name for r in listed.response.regions if r.name.startswith("small-")] if listed.ok else []
    return {"codes": codes, "first_refusal": first_refusal, "listed": len(mine)}


class RegionLimit(DaemonTest):
    # One user may own 64 regions by default (max-regions-per-uid): raised
    # here, so that what is tested is the daemon's own limit.
    daemon_args = ("--max-regions-per-uid", "200")

    def test_one_user_makes_a_hundred_regions(self):
        rec = self.attacker.run("test_region_limit", "create_many", count=REGIONS)
        self.assertNotEqual(rec["uid"], 0)
        self.assertTrue(self.daemon.alive(), f"memd died ({self.daemon.exit_code()}): {rec}")
        self.assertEqual(rec["codes"], {"OK": REGIONS}, rec)
        self.assertEqual(rec["listed"], REGIONS, rec)
        self.assert_daemon_serves()
