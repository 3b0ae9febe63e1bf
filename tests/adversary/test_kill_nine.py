"""kill -9 of clients at random instants, while they allocate and free.

Four honest clients churn in one region (allocate, write, verify, free); one
of them, chosen at random, is killed with SIGKILL at a random instant after
it has made progress, and a new one takes its place, for a fixed number of
kills. The RNG is seeded and the seed printed: MEMD_ADVERSARY_SEED replays a
run. Afterwards the region must check clean, every block must come back to
the daemon once no client is left, objects published before the kills must
be intact, and a new client must work in the region.
"""
import os
import random
import signal
import subprocess
import threading

import hostile
from harness import DaemonTest, env_path, wait_for

REGION = "churn"
CLIENTS = 4
KILLS = 20
MAX_DELAY = 1.0  # seconds after a victim's first progress line
PUBLISHED = 1000  # the board of objects published before the kills


class Churner:
    """One `test_client churn` process and the lines it printed."""

    def __init__(self, client, ident):
        self.ident = ident
        self.proc = client.start(REGION, "churn", ident, 3600)
        self.lines = []
        self.progressed = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            text = line.decode(errors="replace").strip()
            self.lines.append(text)
            if text.startswith("progress allocations"):
                self.progressed.set()
        self.progressed.set()  # it ended: the waiter looks at why

    def allocations(self):
        counts = [int(l.split()[2]) for l in self.lines if l.startswith("progress allocations")]
        return max(counts, default=0)

    def kill(self):
        """SIGKILL; its exit code, or None if it had already ended by itself."""
        ended = self.proc.poll()
        if ended is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.reader.join()
        self.proc.stdout.close()
        return None if ended is not None else self.proc.returncode


class KillNine(DaemonTest):
    def test_clients_killed_at_random_instants(self):
        seed = int(os.environ.get("MEMD_ADVERSARY_SEED", random.SystemRandom().randrange(2**32)))
        print(f"\nkill -9 seed {seed} (MEMD_ADVERSARY_SEED={seed} replays it)", flush=True)
        rng = random.Random(seed)
        # Published data from a client that exited: none of it may be lost.
        code, out = self.client.run(REGION, "fill", PUBLISHED, 2000, 72)
        self.assertEqual(code, 0, out)

        next_id = 1
        churners = []
        for _ in range(CLIENTS):
            churners.append(Churner(self.client, next_id))
            next_id += 1
        kills = []
        try:
            for _ in range(KILLS):
                slot = rng.randrange(CLIENTS)
                victim = churners[slot]
                victim.progressed.wait(120)
                self.assertTrue(victim.progressed.is_set(), f"churn {victim.ident} printed nothing in 120 s")
                threading.Event().wait(rng.uniform(0, MAX_DELAY))
                rc = victim.kill()
                # It was killed while working, not dead already (a failed
                # allocation, corrupt data), and it had allocated.
                if rc != -signal.SIGKILL:
                    with hostile.Connection(self.daemon.socket) as c:
                        region = c.stat(REGION).response
                    self.fail(f"churn {victim.ident} ended by itself: {victim.proc.returncode}, {victim.lines}\n"
                              f"region: {region}\n{self.tail_of_log()}")
                self.assertGreater(victim.allocations(), 0, victim.lines)
                kills.append((victim.ident, victim.allocations()))
                churners[slot] = Churner(self.client, next_id)
                next_id += 1
        finally:
            for c in churners:
                c.kill()
        self.assertEqual(len(kills), KILLS)
        print("killed (churn id, allocations seen):", kills, flush=True)
        self.assertTrue(self.daemon.alive(), f"memd died ({self.daemon.exit_code()})\n{self.tail_of_log()}")

        with hostile.Connection(self.daemon.socket) as c:
            def all_back():
                st = c.stat(REGION)
                return st.ok and st.response.clients == 0 and st.response.blocks_leased == 0
            self.assertTrue(wait_for(all_back, 120), f"{c.stat(REGION)}\n{self.tail_of_log()}")
            check = c.check(REGION, deadline=60)
            self.assertTrue(check.ok, check)
            self.assertEqual([(r.ok, r.blocks_skipped) for r in check.response.results], [(True, 0)],
                             check.response)
        # memdctl agrees (it exits 1 if a check fails).
        p = subprocess.run([env_path("MEMDCTL_BINARY"), "--socket", self.daemon.socket, "--timeout", "60",
                            "check", REGION], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout.decode(errors="replace"))

        code, out = self.client.run(REGION, "verify", PUBLISHED, 2000, 72)
        self.assertEqual(code, 0, out)
        # The region still serves: a client churns to its end, adopting what
        # the dead ones left.
        code, out = self.client.run(REGION, "churn", next_id, 2)
        self.assertEqual(code, 0, out)
        self.assert_daemon_serves()
