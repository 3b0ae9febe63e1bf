"""Issues 14.2 and 14.3: giving back blocks that are not the caller's.

An honest client fills blocks in a shared region (mode 0666) and is killed:
its blocks become abandoned, waiting for the next client to adopt them.
Another user (nobody), allowed to allocate in the region, then "releases"
every page of it one by one, and a block that a third session holds. The
daemon must refuse every one: an abandoned block released again is listed
twice (two clients adopt it, or compaction walks a cycle), and the
releaser's block count goes below zero (a wrapped 64-bit count).
"""
import hostile
from harness import DaemonTest, wait_for
from memd.v1 import memd_pb2 as pb

REGION = "shared"
COUNT, SIZE = 3000, 48  # the killed client's objects: several blocks
REFUSALS = ("PERMISSION_DENIED", "INVALID_ARGUMENT", "FAILED_PRECONDITION")


def release_everything(socket, ns, region, foreign_page):
    """As nobody: release the foreign block, then every page, one at a time."""
    rec = {}
    with hostile.Session(socket, "releaser") as s:
        opened = s.open_region(region, discipline=pb.DISCIPLINE_UNSPECIFIED, create=False)
        rec["open"] = opened.to_json()
        if not opened.ok:
            return rec
        handle = opened.response.handle
        info = s.stat(region).response
        # Pages past the committed ones are refused by a bounds check alone;
        # a few of them are enough.
        last = min(info.pages_total, info.pages_in_use + info.pages_free + 64)
        rec["pages_tried"] = last
        rec["foreign"] = s.release(handle, [foreign_page]).to_json()
        accepted, codes, max_leased = [], {}, 0
        for page in range(last):
            o = s.release(handle, [page])
            codes[o.code] = codes.get(o.code, 0) + 1
            if o.ok:
                accepted.append(page)
                # What an accepted release did to the count of leased blocks.
                st = s.stat(region)
                if st.ok:
                    max_leased = max(max_leased, st.response.blocks_leased)
        rec["accepted"] = accepted
        rec["codes"] = codes
        st = s.stat(region)
        rec["stat_after"] = st.to_json()
        if st.ok:
            max_leased = max(max_leased, st.response.blocks_leased)
            rec["abandoned_after"] = st.response.blocks_abandoned
        rec["max_blocks_leased"] = max_leased
        # A cycle in the abandoned list shows as a call that never ends.
        rec["compact"] = s.compact(region, deadline=60).to_json()
        check = s.check(region, deadline=60)
        rec["check"] = check.to_json()
        rec["check_results"] = ([{"region": c.region, "ok": c.ok, "message": c.message}
                                 for c in check.response.results] if check.ok else [])
    return rec


def release_half_bad_batches(socket, ns):
    """As nobody, in a region of its own: batches with one good block and one
    bad page; the design says a batch is applied whole or not at all."""
    rec = {}
    with hostile.Session(socket, "batch releaser") as s:
        opened = s.open_region("batches", mode=0o600, max_bytes=16 << 20)
        rec["open"] = opened.to_json()
        if not opened.ok:
            return rec
        h = opened.response.handle
        leased = s.lease(h, opened.response.stash_owner, count=2)
        rec["lease"] = leased.to_json()
        if not leased.ok:
            return rec
        good, other = [b.page for b in leased.response.blocks]
        info = s.stat("batches").response
        beyond = info.pages_total + 7
        rec["good_then_out_of_range"] = s.release(h, [good, beyond]).to_json()
        rec["good_then_not_a_block"] = s.release(h, [good, other + 1]).to_json()
        rec["good_twice"] = s.release(h, [good, good]).to_json()
        rec["leased_after_refusals"] = s.stat("batches").response.blocks_leased
        rec["release_good"] = s.release(h, [good]).to_json()
        rec["release_other"] = s.release(h, [other]).to_json()
        rec["leased_at_end"] = s.stat("batches").response.blocks_leased
    return rec


class ForeignAndAbandonedBlocks(DaemonTest):
    def test_a_batch_is_refused_whole(self):
        rec = self.attacker.run("test_foreign_blocks", "release_half_bad_batches")
        self.assertEqual(rec["open"]["code"], "OK", rec)
        self.assertEqual(rec["lease"]["code"], "OK", rec)
        self.assertTrue(self.daemon.alive(), f"memd died ({self.daemon.exit_code()}): {rec}")
        for batch in ("good_then_out_of_range", "good_then_not_a_block", "good_twice"):
            self.assertIn(rec[batch]["code"], REFUSALS, (batch, rec))
        # Nothing of a refused batch was applied: both blocks are still held.
        self.assertEqual(rec["leased_after_refusals"], 2, rec)
        self.assertEqual(rec["release_good"]["code"], "OK", rec)
        self.assertEqual(rec["release_other"]["code"], "OK", rec)
        self.assertEqual(rec["leased_at_end"], 0, rec)
        self.assert_daemon_serves()

    def test_releases_of_blocks_not_held_are_refused(self):
        # An honest client (root) fills blocks of a shared region and dies.
        holder = self.client.start(REGION, "hold", 1, COUNT, SIZE, options=("--mode", "666"))
        self.assertEqual(holder.stdout.readline().strip(), b"ready")
        holder.kill()
        holder.wait()
        holder.stdout.close()
        with hostile.Connection(self.daemon.socket) as c:
            def reclaimed():
                st = c.stat(REGION)
                return st.ok and st.response.clients == 0 and st.response.blocks_leased == 0 \
                    and st.response.blocks_abandoned > 0
            self.assertTrue(wait_for(reclaimed, 60), f"{c.stat(REGION)}\n{self.tail_of_log()}")

        # Another session (root) holds a block of the region meanwhile.
        with hostile.Session(self.daemon.socket, "holder of a block") as other:
            opened = other.open_region(REGION, discipline=pb.DISCIPLINE_UNSPECIFIED, create=False)
            self.assertTrue(opened.ok, opened)
            leased = other.lease(opened.response.handle, opened.response.stash_owner, count=1)
            self.assertTrue(leased.ok, leased)
            foreign = leased.response.blocks[0].page

            rec = self.attacker.run("test_foreign_blocks", "release_everything", region=REGION,
                                    foreign_page=foreign)
            self.assertNotEqual(rec["uid"], 0)
            self.assertEqual(rec["open"]["code"], "OK", rec)
            self.assertTrue(self.daemon.alive(), f"memd died ({self.daemon.exit_code()}): {rec}")
            self.assertIn(rec["foreign"]["code"], REFUSALS, rec)
            self.assertEqual(rec["accepted"], [], rec)
            self.assertEqual(set(rec["codes"]) - set(REFUSALS), set(), rec)
            self.assertLess(rec["max_blocks_leased"], 2**32, rec)
            self.assertEqual(rec["compact"]["code"], "OK", rec)
            self.assertEqual(rec["check"]["code"], "OK", rec)
            self.assertEqual([c["ok"] for c in rec["check_results"]], [True], rec)

            # The block is still the other session's: it gives it back itself.
            mine = other.release(opened.response.handle, [foreign])
            self.assertTrue(mine.ok, mine)

        # The dead client's objects are intact, and a new client that adopts
        # its blocks does not write over them.
        for job, board in (("verify", 1), ("fill", 2), ("verify", 1), ("verify", 2)):
            code, out = self.client.run(REGION, job, board, COUNT, SIZE, options=("--mode", "666"))
            self.assertEqual(code, 0, f"{job} board {board}: {out}")
        with hostile.Connection(self.daemon.socket) as c:
            check = c.check(REGION, deadline=60)
            self.assertTrue(check.ok, check)
            self.assertTrue(all(r.ok for r in check.response.results), check.response)
        self.assert_daemon_serves()
