"""Huge runs (one object's pages) are released and resized only by who claimed them.

Session A (root) leases a run of 512 pages in a shared region (mode 0666).
Session B (nobody, allowed to allocate there) resizes and releases A's run:
the daemon must refuse, or B frees pages A is using and the next lease hands
them to someone else while A writes into them. Any process may free any
object, so what proves a caller's right is the claim a free makes first: the
run's owner word names one of the caller's owner slots.
"""
import hostile
from harness import DaemonTest
from memd.v1 import memd_pb2 as pb

REGION = "runs"
RUN_PAGES = 512
REFUSALS = ("FAILED_PRECONDITION", "PERMISSION_DENIED")


def take_foreign_run(socket, ns, region, page):
    """As nobody: resize and release the run at `page`, then lease one."""
    rec = {}
    with hostile.Session(socket, "run thief") as s:
        opened = s.open_region(region, discipline=pb.DISCIPLINE_UNSPECIFIED, create=False)
        rec["open"] = opened.to_json()
        if not opened.ok:
            return rec
        h = opened.response.handle
        grow = s.resize_run(h, page, RUN_PAGES * 2)
        rec["grow"] = dict(grow.to_json(), resized=grow.ok and grow.response.resized)
        shrink = s.resize_run(h, page, 1)
        rec["shrink"] = dict(shrink.to_json(), resized=shrink.ok and shrink.response.resized)
        rec["release"] = s.release_run(h, page).to_json()
        run = s.lease_run(h, RUN_PAGES)
        rec["lease"] = run.to_json()
        if run.ok:
            rec["leased_page"] = run.response.run.page
            # Its own run, B may give back once it has claimed it (as a free
            # does): the refusals above are about whose run.
            hostile.claim_run(opened.response.object_path, run.response.run.page, opened.response.stash_owner)
            rec["release_own"] = s.release_run(h, run.response.run.page).to_json()
    return rec


class HugeRuns(DaemonTest):
    def test_a_run_is_only_its_holders(self):
        with hostile.Session(self.daemon.socket, "run holder") as a:
            opened = a.open_region(REGION, mode=0o666, max_bytes=64 << 20)
            self.assertTrue(opened.ok, opened)
            h = opened.response.handle
            run = a.lease_run(h, RUN_PAGES)
            self.assertTrue(run.ok, run)
            page = run.response.run.page

            rec = self.attacker.run("test_huge_runs", "take_foreign_run", region=REGION, page=page)
            self.assertNotEqual(rec["uid"], 0)
            self.assertEqual(rec["open"]["code"], "OK", rec)
            self.assertTrue(self.daemon.alive(), f"memd died ({self.daemon.exit_code()}): {rec}")
            self.assertIn(rec["grow"]["code"], REFUSALS, rec)
            self.assertIn(rec["shrink"]["code"], REFUSALS, rec)
            self.assertIn(rec["release"]["code"], REFUSALS, rec)
            self.assertEqual(rec["lease"]["code"], "OK", rec)
            # No page of A's run went to B.
            b = rec["leased_page"]
            self.assertTrue(b + RUN_PAGES <= page or b >= page + RUN_PAGES,
                            f"B got pages {b}..{b + RUN_PAGES} while A holds {page}..{page + RUN_PAGES}: {rec}")
            self.assertEqual(rec["release_own"]["code"], "OK", rec)

            # A's run is still A's, whole (nobody claimed it): A claims it,
            # resizes and releases it.
            self.assertEqual(hostile.claim_run(opened.response.object_path, page, opened.response.stash_owner), 0)
            same = a.resize_run(h, page, RUN_PAGES)
            self.assertTrue(same.ok, same)
            released = a.release_run(h, page)
            self.assertTrue(released.ok, released)
        with hostile.Connection(self.daemon.socket) as c:
            check = c.check(REGION)
            self.assertTrue(check.ok, check)
            self.assertTrue(all(r.ok for r in check.response.results), check.response)
        self.assert_daemon_serves()
