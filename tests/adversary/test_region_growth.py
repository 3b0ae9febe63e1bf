"""Issue 21: regions grow online, within what their owner may take.

A region's backing object starts as long as its tables and grows as its
page heap hands out pages, while clients have it mapped. One local user
must not take the whole of /dev/shm or a file system by growing regions:
the daemon counts the objects' lengths per owner (max-bytes-per-uid) and
refuses growth past it with RESOURCE_EXHAUSTED naming the limit, not with a
crash or a SIGBUS. Giving runs back and compacting shrinks the object and
gives the bytes back to the owner, who may then grow again. All as nobody,
through the generated stubs, against the real daemon.
"""
import hostile
from harness import DaemonTest
from memd.v1 import memd_pb2 as pb

LIMIT = 48 << 20
RUN_PAGES = 1024  # 4 MiB a run


def grow_until_refused(socket, ns):
    rec = {"runs": [], "refusal": None}
    with hostile.Session(socket, "grower") as s:
        o = s.open_region("growing", discipline=pb.DISCIPLINE_SHM, max_bytes=512 << 20)
        rec["open"] = o.to_json()
        if not o.ok:
            return rec
        handle = o.response.handle
        first = s.stat("growing")
        rec["length_at_start"] = first.response.object_length if first.ok else None
        for _ in range(40):
            r = s.lease_run(handle, RUN_PAGES)
            if not r.ok:
                rec["refusal"] = r.to_json()
                break
            rec["runs"].append(r.response.run.page)
        grown = s.stat("growing")
        rec["length_at_refusal"] = grown.response.object_length if grown.ok else None

        # A second region of the same user cannot grow either: the limit is
        # the user's, not the region's.
        o2 = s.open_region("second", discipline=pb.DISCIPLINE_SHM, max_bytes=512 << 20)
        rec["second_open"] = o2.to_json()
        if o2.ok:
            rec["second_run"] = s.lease_run(o2.response.handle, RUN_PAGES).to_json()
            s.close_region(o2.response.handle)
            rec["second_remove"] = s.remove("second").to_json()

        # Give the last half back (the runs at the top), compact: the object
        # shrinks, and the bytes return to the user.
        half = rec["runs"][len(rec["runs"]) // 2:]
        rec["released"] = []
        for page in half:
            # As a free does: claim the run, then give it back.
            hostile.claim_run(o.response.object_path, page, o.response.stash_owner)
            rec["released"].append(s.release_run(handle, page).to_json())
        rec["compact"] = s.compact("growing").to_json()
        shrunk = s.stat("growing")
        rec["length_after_compact"] = shrunk.response.object_length if shrunk.ok else None
        again = s.lease_run(handle, RUN_PAGES)
        rec["again"] = again.to_json()
        results = s.check("growing")
        rec["check_ok"] = all(c.ok for c in results.response.results) if results.ok else False
    return rec


class RegionGrowth(DaemonTest):
    daemon_args = ("--max-bytes-per-uid", str(LIMIT))

    def test_growth_stops_at_the_users_limit_and_resumes_after_a_shrink(self):
        rec = self.attacker.run("test_region_growth", "grow_until_refused")
        self.assertNotEqual(rec["uid"], 0)
        self.assertTrue(self.daemon.alive(), f"memd died ({self.daemon.exit_code()}): {rec}")
        self.assertEqual(rec["open"]["code"], "OK", rec)
        # The object starts at its tables, far below its 512 MiB reservation.
        self.assertLess(rec["length_at_start"], 32 << 20, rec)
        # It grew run by run, and stopped at the user's limit, with a reason.
        self.assertGreaterEqual(len(rec["runs"]), 4, rec)
        self.assertLess(len(rec["runs"]), 12, rec)
        self.assertIsNotNone(rec["refusal"], rec)
        self.assertEqual(rec["refusal"]["code"], "RESOURCE_EXHAUSTED", rec)
        self.assertIn("max-bytes-per-uid", rec["refusal"]["message"], rec)
        self.assertLessEqual(rec["length_at_refusal"], LIMIT, rec)
        self.assertGreater(rec["length_at_refusal"], rec["length_at_start"] + 4 * RUN_PAGES * 4096, rec)
        # The second region is refused at its creation or at its first growth.
        if rec["second_open"]["code"] == "OK":
            self.assertEqual(rec["second_run"]["code"], "RESOURCE_EXHAUSTED", rec)
            self.assertIn("max-bytes-per-uid", rec["second_run"]["message"], rec)
        else:
            self.assertEqual(rec["second_open"]["code"], "RESOURCE_EXHAUSTED", rec)
            self.assertIn("max-bytes-per-uid", rec["second_open"]["message"], rec)
        # Released and compacted: shorter, and room to grow again.
        self.assertTrue(all(r["code"] == "OK" for r in rec["released"]), rec)
        self.assertEqual(rec["compact"]["code"], "OK", rec)
        self.assertLess(rec["length_after_compact"], rec["length_at_refusal"] - 2 * RUN_PAGES * 4096, rec)
        self.assertEqual(rec["again"]["code"], "OK", rec)
        self.assertTrue(rec["check_ok"], rec)
        self.assert_daemon_serves()
        # The length is a metric too.
        self.assertIn('memd_region_object_length_bytes{region="growing"}', self.daemon.metrics_text())
