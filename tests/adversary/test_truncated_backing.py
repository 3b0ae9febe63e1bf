"""Issue 14.1: a client truncates the backing of a region it owns.

The creator of a region owns its shm object or file (the daemon chowns it,
so the kernel agrees with the daemon about who may map it), and so may
truncate it under the daemon. Every page past the new end then raises
SIGBUS in whoever touches it, the daemon included. What the daemon must do:
stay up, mark the region damaged (RegionInfo.damage), refuse leases in it,
report it in Check, List and /metrics, and let its owner remove it. Cut
while the daemon is down, a region must not keep the daemon from coming back.
"""
import os
import urllib.request

import hostile
from harness import DaemonTest
from memd.v1 import memd_pb2 as pb

TRUNCATED_SIZE = 4096


def truncate_and_poke(socket, ns, discipline):
    """As the region's owner (nobody): create, lease, truncate, then ask."""
    disc = {"shm": pb.DISCIPLINE_SHM, "file": pb.DISCIPLINE_FILE}[discipline]
    name = "truncated-" + discipline
    rec = {"name": name}
    with hostile.Session(socket, "truncator") as s:
        opened = s.open_region(name, discipline=disc, mode=0o666, max_bytes=16 << 20)
        rec["open"] = opened.to_json()
        if not opened.ok:
            return rec
        r = opened.response
        rec["lease_before"] = s.lease(r.handle, r.stash_owner, count=4).to_json()
        path = f"/dev/shm/memd.{r.object_path}" if disc == pb.DISCIPLINE_SHM else r.object_path
        try:
            os.truncate(path, TRUNCATED_SIZE)
            rec["truncated"] = os.stat(path).st_size == TRUNCATED_SIZE
        except OSError as e:
            rec["truncated"] = f"{path}: {e}"
            return rec

        stat = s.stat(name)
        rec["stat"] = stat.to_json()
        rec["stat_damage"] = stat.response.damage if stat.ok else None

        check = s.check(name)
        rec["check"] = check.to_json()
        rec["check_results"] = ([{"region": c.region, "ok": c.ok, "message": c.message}
                                 for c in check.response.results] if check.ok else [])

        rec["compact"] = s.compact(name).to_json()
        rec["lease_after"] = s.lease(r.handle, r.stash_owner, count=1).to_json()

        stats = s.stats()
        try:
            address = stats.response.metrics_address if stats.ok else "unknown"
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as m:
                rec["metrics"] = {"status": m.status, "mentions_region": name in m.read().decode()}
        except OSError as e:
            rec["metrics"] = {"status": str(e)}

        listed = s.list_regions()
        rec["list"] = listed.to_json()
        rec["listed_damage"] = [i.damage for i in listed.response.regions if i.name == name] if listed.ok else []

        rec["close"] = s.close_region(r.handle).to_json()
        rec["remove"] = s.remove(name).to_json()
    return rec


def create_and_lease(socket, ns):
    """As nobody: a shm and a file region with leased blocks; their paths."""
    paths = {}
    with hostile.Session(socket, "creator") as s:
        for discipline, disc in (("shm", pb.DISCIPLINE_SHM), ("file", pb.DISCIPLINE_FILE)):
            o = s.open_region("cut-" + discipline, discipline=disc, mode=0o666, max_bytes=16 << 20)
            if not o.ok or not s.lease(o.response.handle, o.response.stash_owner, count=4).ok:
                return {"error": f"{discipline}: {o}"}
            r = o.response
            paths["cut-" + discipline] = f"/dev/shm/memd.{r.object_path}" if disc == pb.DISCIPLINE_SHM \
                else r.object_path
    return {"paths": paths}


def truncate(socket, ns, paths):
    """As nobody, while the daemon is down: cut what it owns."""
    done = {}
    for name, path in paths.items():
        try:
            os.truncate(path, TRUNCATED_SIZE)
            done[name] = True
        except OSError as e:
            done[name] = str(e)
    return {"truncated": done}


class TruncatedBacking(DaemonTest):
    def test_truncated_while_the_daemon_is_down(self):
        made = self.attacker.run("test_truncated_backing", "create_and_lease")
        self.assertIn("paths", made, made)
        self.stop_daemon()
        cut = self.attacker.run("test_truncated_backing", "truncate", paths=made["paths"])
        self.assertEqual(cut["truncated"], {name: True for name in made["paths"]}, cut)
        # It comes back on the same data, and serves; the cut regions are
        # either left out (NOT_FOUND) or served as damaged.
        self.stopped = False
        self.daemon.start()
        self.assertTrue(self.daemon.alive(), self.tail_of_log())
        with hostile.Connection(self.daemon.socket) as c:
            for name in made["paths"]:
                st = c.stat(name)
                self.assertIn(st.code, ("OK", "NOT_FOUND"), (name, st))
                if st.ok:
                    self.assertNotEqual(st.response.damage, "", (name, st.response))
            check = c.check()
            self.assertTrue(check.ok, check)
            self.assertTrue(all(r.ok or r.region in made["paths"] for r in check.response.results), check.response)
        self.assert_daemon_serves()

    def attack(self, discipline):
        rec = self.attacker.run("test_truncated_backing", "truncate_and_poke", discipline=discipline)
        # The attack's premise: nobody made the region and cut its backing.
        self.assertNotEqual(rec["uid"], 0)
        self.assertEqual(rec["open"]["code"], "OK", rec)
        self.assertEqual(rec["lease_before"]["code"], "OK", rec)
        self.assertIs(rec["truncated"], True, rec)

        self.assertTrue(self.daemon.alive(),
                        f"memd died ({self.daemon.exit_code()}) after its region's backing was truncated: {rec}\n"
                        f"{self.tail_of_log()}")
        self.assertEqual(rec["stat"]["code"], "OK", rec)
        self.assertIn("truncated", rec["stat_damage"], rec)
        self.assertEqual(rec["lease_after"]["code"], "FAILED_PRECONDITION", rec)
        self.assertIn("damaged", rec["lease_after"]["message"], rec)
        self.assertEqual(rec["check"]["code"], "OK", rec)
        results = [c for c in rec["check_results"] if c["region"] == rec["name"]]
        self.assertEqual(len(results), 1, rec)
        self.assertFalse(results[0]["ok"], rec)
        # Compaction of a damaged region may be refused; it must answer.
        self.assertIn(rec["compact"]["code"], ("OK", "FAILED_PRECONDITION"), rec)
        self.assertEqual(rec["metrics"]["status"], 200, rec)
        self.assertEqual(rec["list"]["code"], "OK", rec)
        self.assertEqual(len(rec["listed_damage"]), 1, rec)
        self.assertNotEqual(rec["listed_damage"][0], "", rec)
        self.assertEqual(rec["close"]["code"], "OK", rec)
        self.assertEqual(rec["remove"]["code"], "OK", rec)
        self.assert_daemon_serves()

    def test_truncated_shm_object(self):
        self.attack("shm")

    def test_truncated_file(self):
        self.attack("file")
