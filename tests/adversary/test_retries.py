"""Lease calls repeated after their answer was lost, and calls whose caller left.

A client that did not hear an answer (the connection broke, the daemon was
killed, the deadline passed) cannot know whether the call was applied, so it
repeats it with the same request id. The daemon must answer a repeat with
the first answer, not apply it twice: a release applied twice frees blocks
the same client has been leased again since (two owners of one block), and a
lease applied twice grants blocks nobody receives. Grants to a caller that
has gone are taken back, so that what a client holds is what it is charged.
"""
import random

import grpc

import hostile
from harness import DaemonTest
from memd.v1 import memd_pb2 as pb

REGION = "retries"
BATCH = 4


class RepeatedRequests(DaemonTest):
    def open(self, s):
        opened = s.open_region(REGION, max_bytes=64 << 20)
        self.assertTrue(opened.ok, opened)
        return opened.response

    def check_region(self):
        with hostile.Connection(self.daemon.socket) as c:
            check = c.check(REGION)
            self.assertTrue(check.ok, check)
            self.assertTrue(all(r.ok for r in check.response.results), check.response)

    def release_lease_repeat(self, restart):
        """Lease, release, lease again (the same blocks come back), then the
        release repeated: it must be answered, not applied."""
        with hostile.Session(self.daemon.socket, "repeater") as s:
            r = self.open(s)
            first = s.lease(r.handle, r.stash_owner, count=BATCH, request=1)
            self.assertTrue(first.ok, first)
            pages = [b.page for b in first.response.blocks]
            released = s.release(r.handle, pages, request=2)
            self.assertTrue(released.ok, released)
            session = s
            if restart:
                # The daemon dies after applying the release: its answer may
                # never have reached the client.
                self.daemon.proc.kill()
                self.daemon.proc.wait()
                self.daemon.start()
                session = hostile.Session(self.daemon.socket, "repeater", resume=[(REGION, r.lease_slot)])
                self.assertIsNotNone(session.welcome, session.refused)
                handle = session.welcome.resumed_handles[0]
                self.assertNotEqual(handle, 0, self.tail_of_log())
            else:
                handle = r.handle
            again = session.lease(handle, r.stash_owner, count=BATCH, request=3)
            self.assertTrue(again.ok, again)
            held = sorted(b.page for b in again.response.blocks)
            self.assertTrue(set(held) & set(pages), f"the blocks of the first lease ({pages}) came back: {held}")
            repeat = session.release(handle, pages, request=2)
            self.assertEqual(repeat.code, "OK", repeat)
            self.assertEqual(session.blocks_charged(REGION), BATCH,
                             "the repeated release gave back blocks leased after it")
            # The blocks are still this client's: it can give them back.
            gone = session.release(handle, held, request=4)
            self.assertTrue(gone.ok, gone)
            self.assertEqual(session.blocks_charged(REGION), 0)
            if session is not s:
                session.close()
        self.check_region()

    def test_a_repeated_release_frees_nothing_leased_since(self):
        self.release_lease_repeat(restart=False)

    def test_a_release_repeated_after_a_daemon_kill_frees_nothing_leased_since(self):
        self.release_lease_repeat(restart=True)

    def test_a_repeated_lease_is_given_the_same_blocks(self):
        with hostile.Session(self.daemon.socket, "repeater") as s:
            r = self.open(s)
            first = s.lease(r.handle, r.stash_owner, count=BATCH, request=7)
            self.assertTrue(first.ok, first)
            repeat = s.lease(r.handle, r.stash_owner, count=BATCH, request=7)
            self.assertTrue(repeat.ok, repeat)
            self.assertEqual([b.page for b in repeat.response.blocks], [b.page for b in first.response.blocks])
            self.assertEqual(s.blocks_charged(REGION), BATCH)
            run = s.lease_run(r.handle, 300, request=8)
            self.assertTrue(run.ok, run)
            with hostile.Connection(self.daemon.socket) as c:
                in_use = c.stat(REGION).response.pages_in_use
                run_again = s.lease_run(r.handle, 300, request=8)
                self.assertTrue(run_again.ok, run_again)
                self.assertEqual(run_again.response.run.page, run.response.run.page)
                self.assertEqual(c.stat(REGION).response.pages_in_use, in_use, "a second run was granted")
                # Given up on: the run goes back with the next call.
                nothing = s.release(r.handle, [], request=9, abandon=[8])
                self.assertTrue(nothing.ok, nothing)
                self.assertEqual(c.stat(REGION).response.pages_in_use, in_use - 300)
                # And an abandoned lease's blocks.
                s.release(r.handle, [], request=10, abandon=[7])
                self.assertEqual(s.blocks_charged(REGION), 0)
                # A request abandoned is not granted again when repeated.
                late = s.lease_run(r.handle, 300, request=8)
                self.assertNotEqual(late.code, "OK", late)
        self.check_region()

    def test_a_lease_abandoned_before_it_arrives_is_not_granted(self):
        """Calls travel on separate streams: the call naming a request in
        `abandon` can reach the daemon before the request itself (cancelled
        by its caller after it was sent). Arriving late, it must be refused:
        a grant then would go to nobody, charged to the client for ever."""
        with hostile.Session(self.daemon.socket, "abandoner") as s:
            r = self.open(s)
            first = s.release(r.handle, [], request=1, abandon=[5, 6])
            self.assertTrue(first.ok, first)
            late = s.lease(r.handle, r.stash_owner, count=BATCH, request=5)
            self.assertEqual(late.code, "ABORTED", late)
            self.assertIn("abandoned", late.message)
            late_run = s.lease_run(r.handle, 300, request=6)
            self.assertEqual(late_run.code, "ABORTED", late_run)
            self.assertEqual(s.blocks_charged(REGION), 0)
            with hostile.Connection(self.daemon.socket) as c:
                self.assertEqual(c.stat(REGION).response.pages_in_use, 0)
            # Ids it did not abandon are served as usual.
            fresh = s.lease(r.handle, r.stash_owner, count=BATCH, request=7)
            self.assertTrue(fresh.ok, fresh)
            self.assertEqual(s.blocks_charged(REGION), BATCH)
        self.check_region()


class CancelledLeases(DaemonTest):
    def test_what_a_client_holds_is_what_it_is_charged(self):
        """Leases cancelled or out of time at random points. The client
        follows the protocol: a call that failed is repeated with its id or
        abandoned on the next call. What it holds in the end must be what the
        daemon charges it, block for block."""
        rng = random.Random(15)
        held = set()
        pending_abandon = []
        failures = 0
        with hostile.Session(self.daemon.socket, "canceller") as s:
            opened = s.open_region(REGION, max_bytes=256 << 20)
            self.assertTrue(opened.ok, opened)
            r = opened.response
            request = 0
            for i in range(600):
                request += 1
                req = pb.LeaseRequest(session=s.id, region=r.handle, kind=pb.BLOCK_SEGREGATED, size_class=2,
                                      owner=r.stash_owner, count=4, request=request, abandon=pending_abandon)
                if i % 2 == 0:
                    future = s.leases.Lease.future(req, timeout=60)
                    if rng.random() < 0.8:
                        # At a random point: before it is sent, while the
                        # daemon works, after it answered.
                        spin = rng.randrange(0, 4000)
                        while spin:
                            spin -= 1
                        future.cancel()
                    try:
                        resp, code = future.result(), "OK"
                    except grpc.FutureCancelledError:
                        resp, code = None, "CANCELLED"
                    except grpc.RpcError as e:
                        resp, code = None, e.code().name
                else:
                    out = hostile.call(s.leases.Lease, req, deadline=rng.choice([0.0005, 0.001, 0.002, 0.005]))
                    resp, code = out.response, out.code
                if code == "OK":
                    pending_abandon = []
                    held.update(b.page for b in resp.blocks)
                    continue
                failures += 1
                self.assertIn(code, ("CANCELLED", "DEADLINE_EXCEEDED"), code)
                if rng.random() < 0.5 or len(pending_abandon) >= 32:
                    repeat = s.lease(r.handle, r.stash_owner, count=4, request=request, abandon=pending_abandon)
                    self.assertTrue(repeat.ok, repeat)
                    pending_abandon = []
                    held.update(b.page for b in repeat.response.blocks)
                else:
                    pending_abandon = pending_abandon + [request]
            request += 1
            last = s.release(r.handle, [], request=request, abandon=pending_abandon)
            self.assertTrue(last.ok, last)
            self.assertGreater(failures, 100, "too few calls failed for the test to mean anything")
            self.assertEqual(s.blocks_charged(REGION), len(held),
                             f"{failures} calls failed; the client holds {len(held)} blocks")
            # Every block it holds is its own: it can give them all back.
            pages = sorted(held)
            for at in range(0, len(pages), 1000):
                request += 1
                back = s.release(r.handle, pages[at:at + 1000], request=request)
                self.assertTrue(back.ok, back)
            self.assertEqual(s.blocks_charged(REGION), 0)
        with hostile.Connection(self.daemon.socket) as c:
            check = c.check(REGION)
            self.assertTrue(check.ok, check)
            self.assertTrue(all(x.ok for x in check.response.results), check.response)
        self.assert_daemon_serves()
