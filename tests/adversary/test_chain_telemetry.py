"""Call-chain pool telemetry, as a client that is not libmemd reports it.

A client's report of its call-chain pools (TelemetryReport.chain_pools)
ends up in /metrics: one series per pool, labelled with the chain's
function names. Nobody sends reports no libmemd would: thousands of
chains, pool numbers past the 32 a client has, the same pool twice,
stacks of hundreds of frames, outcomes no build knows, counters near 2^64,
and symbol names made to break the exposition format (quotes, braces,
newlines, megabytes). The daemon must keep serving, show at most 32 pools
for the client with every label bounded and escaped, count what it left
out, and keep the counters it refused at their last good value.
"""
import os
import re
import urllib.request

import hostile
from harness import DaemonTest, wait_for
from memd.v1 import memd_pb2 as pb

CLIENT = "chain flood"
MAX_POOLS = 32
MAX_CHAINS = 64
# Four frames of at most 160 bytes each (made safe by the daemon), each
# byte at most two in the exposition format's escaping, " < " between.
MAX_CHAIN_LABEL = 4 * 160 * 2 + 3 * 3


def metrics(socket):
    with hostile.Connection(socket) as c:
        stats = c.stats()
    with urllib.request.urlopen(f"http://{stats.response.metrics_address}/metrics", timeout=30) as r:
        return r.read().decode()


def series(text, name, client):
    return [l for l in text.splitlines() if l.startswith(name + "{") and f'client="{client}' in l]


def flood(socket, ns):
    rec = {}
    with hostile.Session(socket, CLIENT) as s:
        client = f"{CLIENT}:{os.getpid()}"
        rec["client"] = client
        # First a sane report: its counters are the values to keep.
        good = pb.TelemetryReport()
        good.chain_pools.chains_seen = 10
        good.chain_pools.pooled = 2
        good.chain_pools.unwinds = 100
        s.report(good)

        evil = pb.TelemetryReport()
        names = ['"} memd_client_info{client="root:1"} 1\n# TYPE x counter\nx', "\\", "a" * (2 << 20),
                 "\x00\x1b[31m\u202e", "{}=,\"'"]
        for i, name in enumerate(names):
            evil.symbols.add(address=0x1000 + i, name=name)
        cp = evil.chain_pools
        cp.chains_seen = (1 << 64) - 1   # past any real count
        cp.pooled = 3
        cp.unwinds = 200
        n = 0
        for i in range(4000):
            c = cp.chains.add()
            c.outcome = [pb.CHAIN_POOLED, pb.CHAIN_WRAPPER, 99, pb.CHAIN_PAST_POOLS][i % 4]
            c.pool = i % 1000
            c.object_bytes = [8, 40, 4096, 33][i % 4]
            c.counted = (1 << 63) + i
            c.stack.extend(0x1000 + (i + k) % len(names) for k in range(i % 6))
            n += 1
        one = cp.chains.add(outcome=pb.CHAIN_POOLED, pool=7, object_bytes=16)
        one.stack.extend(range(1, 300))  # 299 frames
        s.report(evil)
        # Then 32 pools with the worst names, the report a flood of them can
        # at most make count.
        worst = pb.TelemetryReport()
        worst.chain_pools.chains_seen = 50
        worst.chain_pools.pooled = 32
        worst.chain_pools.unwinds = 300
        for p in range(1, 40):
            c = worst.chain_pools.chains.add(outcome=pb.CHAIN_POOLED, pool=(p - 1) % MAX_POOLS + 1,
                                             object_bytes=32)
            c.stack.extend(0x1000 + (p + k) % len(names) for k in range(4))
        s.report(worst)

        def shown():
            text = metrics(socket)
            seen = series(text, "memd_client_chains_seen_total", client)
            return text if seen and seen[0].endswith(" 50") else None
        text = wait_for(shown, 30.0)
        rec["scraped"] = text is not None
        text = text or metrics(socket)
        rec["pool_series"] = series(text, "memd_client_chain_pool_info", client)
        rec["seen"] = series(text, "memd_client_chains_seen_total", client)
        rec["unwinds"] = series(text, "memd_client_chain_unwinds_total", client)
        rec["info_lines"] = [l for l in text.splitlines() if l.startswith("memd_client_info{")]
        rec["rejected"] = {m.group(1): float(m.group(2)) for m in
                           re.finditer(r'^memd_telemetry_rejected_total\{reason="([a-z_]+)"\} (\S+)$', text, re.M)}
        rec["lines_without_value"] = [l[:200] for l in text.splitlines()
                                      if l and not l.startswith("#") and not re.search(r"\} \S+$|^\w+ \S+$", l)]
    return rec


class ChainTelemetry(DaemonTest):
    def test_a_flood_of_chains_shows_32_bounded_pools_and_is_counted(self):
        rec = self.attacker.run("test_chain_telemetry", "flood")
        self.assertNotEqual(rec["uid"], 0)
        self.assertTrue(self.daemon.alive(), f"memd died ({self.daemon.exit_code()}): {rec.get('rejected')}")
        self.assertTrue(rec["scraped"], rec)
        pools = rec["pool_series"]
        self.assertEqual(len(pools), MAX_POOLS, pools[:3])
        numbers = sorted(int(re.search(r'pool="(\d+)"', l).group(1)) for l in pools)
        self.assertEqual(numbers, list(range(1, MAX_POOLS + 1)))
        for l in pools:
            chain = re.search(r'chain="((?:[^"\\]|\\.)*)"', l)
            self.assertIsNotNone(chain, l[:300])
            self.assertLessEqual(len(chain.group(1)), MAX_CHAIN_LABEL, l[:300])
            self.assertNotIn("\n", l)
        # Nothing the names carried became a line, or a series of another client.
        self.assertEqual(rec["lines_without_value"], [])
        self.assertTrue(all('client="root:1"' not in l for l in rec["info_lines"]), rec["info_lines"])
        # The refused counter stayed at its last good value; the flood's
        # chains were counted: 4,001 chains past the 64 looked at, and of
        # those 64 every one but pools 1..k named once with sane fields.
        self.assertTrue(rec["seen"][0].endswith(" 50"), rec["seen"])
        self.assertTrue(rec["unwinds"][0].endswith(" 300"), rec["unwinds"])
        self.assertGreaterEqual(rec["rejected"].get("counter_too_large", 0), 1, rec["rejected"])
        self.assertGreaterEqual(rec["rejected"].get("chain", 0), (4001 - MAX_CHAINS) + (39 - MAX_POOLS),
                                rec["rejected"])
        self.assert_daemon_serves()
