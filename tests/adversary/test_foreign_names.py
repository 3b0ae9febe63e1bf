"""Requests that name what is not the caller's: processes, sessions, regions.

Root has a private region (mode 0600) with objects in it and a session that
holds a block there, and a region both may allocate in (0666). nobody then
claims root's pid in a hello, lies about its own start time, uses root's
session id, region handle and owner id, and reads, checks, compacts,
removes, drains and profiles what is root's. Identity comes from the socket
(SO_PEERCRED): every one of these must be refused with the status the
contract names, and root's region and session must be as they were.
"""
import os

import hostile
from harness import DaemonTest
from memd.v1 import memd_pb2 as pb

REGION = "private"
COMMON = "common"  # mode 0666
COUNT, SIZE = 500, 40


def impersonate(socket, ns, root_pid, root_session, root_handle, root_stash, root_common_stash):
    rec = {}
    liar = hostile.Session(socket, "liar", pid=root_pid)
    rec["hello_root_pid"] = liar.refused.to_json() if liar.refused else {"code": "OK", "message": ""}
    liar.close()
    liar = hostile.Session(socket, "liar", start_time=hostile.process_start_time() + 1)
    rec["hello_wrong_start_time"] = liar.refused.to_json() if liar.refused else {"code": "OK", "message": ""}
    liar.close()

    with hostile.Session(socket, "impersonator") as s:
        rec["open"] = s.open_region(REGION, discipline=pb.DISCIPLINE_UNSPECIFIED, create=False).to_json()
        rec["open_read_only"] = s.open_region(REGION, discipline=pb.DISCIPLINE_UNSPECIFIED, create=False,
                                              read_only=True).to_json()
        rec["stat"] = s.stat(REGION).to_json()
        rec["check"] = s.check(REGION).to_json()
        rec["compact"] = s.compact(REGION).to_json()
        listed = s.list_regions()
        rec["listed"] = [r.name for r in listed.response.regions] if listed.ok else None
        rec["remove"] = s.remove(REGION).to_json()
        rec["remove_without_session"] = s.remove(REGION, session=False).to_json()
        # Root's session id on nobody's connection.
        rec["open_as_root_session"] = hostile.call(s.regions.Open, pb.OpenRegionRequest(
            session=root_session, name=REGION, create=False)).to_json()
        rec["lease_as_root_session"] = hostile.call(s.leases.Lease, pb.LeaseRequest(
            session=root_session, region=root_handle, kind=pb.BLOCK_SEGREGATED, size_class=2,
            owner=root_stash, count=1)).to_json()
        # Root's handle with nobody's own session: not attached.
        rec["lease_root_handle"] = s.lease(root_handle, root_stash).to_json()
        rec["close_root_handle"] = s.close_region(root_handle).to_json()
        rec["drain_root"] = s.drain(root_pid).to_json()
        rec["profile_root"] = s.profile(REGION, root_pid).to_json()
        # In a region both may allocate in, an owner id that is root's.
        common = s.open_region(COMMON, discipline=pb.DISCIPLINE_UNSPECIFIED, create=False)
        rec["open_common"] = common.to_json()
        if common.ok:
            rec["lease_root_owner"] = s.lease(common.response.handle, root_common_stash).to_json()
            rec["lease_own_owner"] = s.lease(common.response.handle, common.response.stash_owner).to_json()
    return rec


class ForeignNames(DaemonTest):
    def test_what_is_roots_stays_roots(self):
        code, out = self.client.run(REGION, "fill", 1, COUNT, SIZE)
        self.assertEqual(code, 0, out)
        with hostile.Session(self.daemon.socket, "root") as root:
            opened = root.open_region(REGION, discipline=pb.DISCIPLINE_UNSPECIFIED, create=False)
            self.assertTrue(opened.ok, opened)
            h, stash = opened.response.handle, opened.response.stash_owner
            leased = root.lease(h, stash, count=1)
            self.assertTrue(leased.ok, leased)
            common = root.open_region(COMMON, mode=0o666, max_bytes=16 << 20)
            self.assertTrue(common.ok, common)

            rec = self.attacker.run("test_foreign_names", "impersonate", root_pid=os.getpid(), root_session=root.id,
                                    root_handle=h, root_stash=stash,
                                    root_common_stash=common.response.stash_owner)
            self.assertNotEqual(rec["uid"], 0)
            self.assertTrue(self.daemon.alive(), f"memd died ({self.daemon.exit_code()}): {rec}")
            expected = {
                "hello_root_pid": "PERMISSION_DENIED",
                "hello_wrong_start_time": "PERMISSION_DENIED",
                "open": "PERMISSION_DENIED",
                "open_read_only": "PERMISSION_DENIED",
                "stat": "PERMISSION_DENIED",
                "check": "PERMISSION_DENIED",
                "compact": "PERMISSION_DENIED",
                "remove": "PERMISSION_DENIED",
                "remove_without_session": "PERMISSION_DENIED",
                "open_as_root_session": "UNAUTHENTICATED",
                "lease_as_root_session": "UNAUTHENTICATED",
                "lease_root_handle": "NOT_FOUND",
                "close_root_handle": "NOT_FOUND",
                "drain_root": "PERMISSION_DENIED",
                "profile_root": "PERMISSION_DENIED",
                "open_common": "OK",
                "lease_root_owner": "PERMISSION_DENIED",
                "lease_own_owner": "OK",
            }
            self.assertEqual({k: rec[k]["code"] for k in expected}, expected, rec)
            self.assertNotIn(REGION, rec["listed"], rec)

            # Root's session and its block are as they were.
            mine = root.release(h, [leased.response.blocks[0].page])
            self.assertTrue(mine.ok, mine)
        code, out = self.client.run(REGION, "verify", 1, COUNT, SIZE)
        self.assertEqual(code, 0, out)
        self.assert_daemon_serves()
