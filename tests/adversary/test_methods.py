"""A region's method, as a client that is not libmemd asks for it.

Root makes a region of the pool method (mode 0666). Nobody then asks for it
with another method, with a method number no build knows, and with none:
the daemon must refuse the first two with a status that says why (naming
both methods for the first) and give the third the region's own method,
never crash, and never let a region change its method.
"""
import hostile
from harness import DaemonTest
from memd.v1 import memd_pb2 as pb

REGION = "pooled"


def ask_for_methods(socket, ns, region):
    rec = {}
    with hostile.Session(socket, "method prober") as s:
        rec["other"] = s.open_region(region, discipline=pb.DISCIPLINE_UNSPECIFIED, create=False,
                                     method=pb.METHOD_LAST).to_json()
        rec["unknown"] = s.open_region(region, discipline=pb.DISCIPLINE_UNSPECIFIED, create=False,
                                       method=99).to_json()
        rec["unknown_new"] = s.open_region("never-made", discipline=pb.DISCIPLINE_SHM, method=1234).to_json()
        any_method = s.open_region(region, discipline=pb.DISCIPLINE_UNSPECIFIED, create=False)
        rec["any"] = any_method.to_json()
        if any_method.ok:
            rec["any_method"] = any_method.response.method
    return rec


class Methods(DaemonTest):
    def test_a_region_keeps_its_method_whatever_a_client_asks(self):
        with hostile.Session(self.daemon.socket, "pool maker") as a:
            made = a.open_region(REGION, mode=0o666, max_bytes=64 << 20, method=pb.METHOD_POOL)
            self.assertTrue(made.ok, made)
            self.assertEqual(made.response.method, pb.METHOD_POOL)

            rec = self.attacker.run("test_methods", "ask_for_methods", region=REGION)
            self.assertNotEqual(rec["uid"], 0)
            self.assertTrue(self.daemon.alive(), f"memd died ({self.daemon.exit_code()}): {rec}")
            self.assertEqual(rec["other"]["code"], "FAILED_PRECONDITION", rec)
            self.assertIn("managed by method pool, not last", rec["other"]["message"], rec)
            self.assertEqual(rec["unknown"]["code"], "INVALID_ARGUMENT", rec)
            self.assertIn("unknown method 99", rec["unknown"]["message"], rec)
            self.assertEqual(rec["unknown_new"]["code"], "INVALID_ARGUMENT", rec)
            self.assertEqual(rec["any"]["code"], "OK", rec)
            self.assertEqual(rec["any_method"], pb.METHOD_POOL, rec)

        with hostile.Session(self.daemon.socket, "pool reader") as b:
            again = b.open_region(REGION, discipline=pb.DISCIPLINE_UNSPECIFIED, create=False)
            self.assertTrue(again.ok, again)
            self.assertEqual(again.response.method, pb.METHOD_POOL)
        self.assert_daemon_serves()
