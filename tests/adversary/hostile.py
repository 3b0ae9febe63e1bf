"""A memd client that is not libmemd: the generated stubs and nothing else.

It speaks the contract of proto/memd/v1/memd.proto as any program could, so it
can send what libmemd never would (other sessions' blocks, other processes'
runs, requests on damaged regions). It runs as whatever user the process is;
the daemon learns that user from the socket, not from anything said here.

Calls return an Outcome (status code name, message, response) instead of
raising, so that an attack can record every answer and the test can assert
on all of them; a call on a dead daemon is an Outcome too (UNAVAILABLE).
"""
import mmap
import os
import queue
import random
import struct
import threading

import grpc

from memd.v1 import memd_pb2 as pb
from memd.v1 import memd_pb2_grpc as rpc

# Every call has a deadline: a daemon that hangs on a request must show up as
# DEADLINE_EXCEEDED in the test, not as a test that never ends.
DEFAULT_DEADLINE = 20.0


def process_start_time(pid="self"):
    """Field 22 of /proc/PID/stat: pid and start time name a process.

    The command name (field 2) may hold spaces and parentheses, so the fields
    are counted after the last ')'.
    """
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read().decode("ascii", "replace")
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[22 - 3])  # fields[0] is field 3 (the state)


class Outcome:
    """One answer of the daemon: `code` is a grpc.StatusCode name ("OK", ...)."""

    def __init__(self, code, message="", response=None):
        self.code = code
        self.message = message
        self.response = response

    @property
    def ok(self):
        return self.code == "OK"

    def to_json(self):
        return {"code": self.code, "message": self.message}

    def __repr__(self):
        return f"Outcome({self.code}, {self.message!r})"


def call(method, request, deadline=DEFAULT_DEADLINE):
    try:
        return Outcome("OK", "", method(request, timeout=deadline))
    except grpc.RpcError as e:
        return Outcome(e.code().name, e.details() or "")


class Connection:
    """A connection of its own to the daemon, without a session: enough for
    the calls that name no session (Stat, List, Check, Compact, Stats)."""

    def __init__(self, socket_path):
        # Without a local subchannel pool, two channels of one process share a
        # connection, and the daemon would see one peer for both sessions.
        self.channel = grpc.insecure_channel(
            "unix:" + socket_path, options=[("grpc.use_local_subchannel_pool", 1)])
        self.sessions = rpc.SessionsStub(self.channel)
        self.regions = rpc.RegionsStub(self.channel)
        self.leases = rpc.LeasesStub(self.channel)
        self.admin = rpc.AdminStub(self.channel)
        self.id = 0

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stat(self, name, deadline=DEFAULT_DEADLINE):
        return call(self.regions.Stat, pb.StatRegionRequest(name=name), deadline)

    def list_regions(self):
        return call(self.regions.List, pb.ListRegionsRequest())

    def check(self, region="", deadline=DEFAULT_DEADLINE):
        return call(self.admin.Check, pb.CheckRequest(region=region), deadline)

    def compact(self, region="", deadline=DEFAULT_DEADLINE):
        return call(self.admin.Compact, pb.CompactRequest(region=region), deadline)

    def list_clients(self):
        return call(self.admin.ListClients, pb.ListClientsRequest())

    def stats(self):
        return call(self.admin.Stats, pb.StatsRequest())

    def drain(self, pid, region=""):
        return call(self.admin.Drain, pb.DrainRequest(pid=pid, region=region))

    def profile(self, region, pid=0):
        return call(self.admin.Profile, pb.ProfileRequest(region=region, pid=pid))


class Session(Connection):
    """A session (Sessions.Open, its stream kept open by a thread) on a
    connection of its own: identity is per connection."""

    # Fixed for this program image, as libmemd's is: a session that resumes
    # leases after a daemon restart comes from the same image.
    IMAGE_ID = random.getrandbits(64)

    def __init__(self, socket_path, program="hostile", pid=None, start_time=None, resume=()):
        """`pid` and `start_time` default to this process's; an attack may lie.
        `resume`: (region name, lease slot) pairs held under a previous daemon."""
        super().__init__(socket_path)
        self.refused = None  # Outcome of a refused hello
        self.welcome = None
        self._requests = queue.Queue()
        hello = pb.Hello(pid=os.getpid() if pid is None else pid,
                         start_time=process_start_time() if start_time is None else start_time,
                         program=program, client_version=1, image_id=Session.IMAGE_ID,
                         resume=[pb.ResumeLease(region=r, lease_slot=s) for r, s in resume])
        self._requests.put(pb.SessionRequest(hello=hello))
        self._stream = self.sessions.Open(iter(self._requests.get, None))
        try:
            event = next(self._stream)
        except grpc.RpcError as e:
            self.refused = Outcome(e.code().name, e.details() or "")
            return
        except StopIteration:
            self.refused = Outcome("CANCELLED", "the stream ended before a welcome")
            return
        self.id = event.welcome.session
        self.welcome = event.welcome
        # The stream stays open for the session's life (its end tells the
        # daemon this process is gone); commands on it are read and ignored.
        self._reader = threading.Thread(target=self._drain_events, daemon=True)
        self._reader.start()

    def _drain_events(self):
        try:
            for _ in self._stream:
                pass
        except grpc.RpcError:
            pass

    def close(self):
        self._requests.put(None)
        if self.id:
            self._stream.cancel()
        super().close()

    def report(self, telemetry):
        """Sends a TelemetryReport on the session stream (no answer comes)."""
        self._requests.put(pb.SessionRequest(telemetry=telemetry))

    # --------------------------------------------------------------- regions

    def open_region(self, name, discipline=pb.DISCIPLINE_SHM, create=True, mode=0o600,
                    max_bytes=64 << 20, **more):
        req = pb.OpenRegionRequest(session=self.id, name=name, discipline=discipline, create=create,
                                   mode=mode, max_bytes=max_bytes, **more)
        return call(self.regions.Open, req)

    def close_region(self, handle):
        return call(self.regions.Close, pb.CloseRegionRequest(session=self.id, handle=handle))

    def remove(self, name, session=True):
        return call(self.regions.Remove, pb.RemoveRegionRequest(session=self.id if session else 0, name=name))

    # ---------------------------------------------------------------- leases

    # `more`: the retry fields of every lease call (request=, abandon=) and a
    # deadline= for the call.

    def lease(self, handle, owner, count=1, size_class=2, kind=pb.BLOCK_SEGREGATED, deadline=DEFAULT_DEADLINE,
              **more):
        req = pb.LeaseRequest(session=self.id, region=handle, kind=kind, size_class=size_class,
                              owner=owner, count=count, **more)
        return call(self.leases.Lease, req, deadline)

    def release(self, handle, pages, deadline=DEFAULT_DEADLINE, **more):
        req = pb.ReleaseRequest(session=self.id, region=handle, pages=list(pages), **more)
        return call(self.leases.Release, req, deadline)

    def lease_run(self, handle, pages, align_pages=0, deadline=DEFAULT_DEADLINE, **more):
        req = pb.LeaseRunRequest(session=self.id, region=handle, pages=pages, align_pages=align_pages, **more)
        return call(self.leases.LeaseRun, req, deadline)

    def release_run(self, handle, page, deadline=DEFAULT_DEADLINE, **more):
        req = pb.ReleaseRunRequest(session=self.id, region=handle, page=page, **more)
        return call(self.leases.ReleaseRun, req, deadline)

    def resize_run(self, handle, page, pages, deadline=DEFAULT_DEADLINE, **more):
        req = pb.ResizeRunRequest(session=self.id, region=handle, page=page, pages=pages, **more)
        return call(self.leases.ResizeRun, req, deadline)

    def blocks_charged(self, region):
        """What the daemon says this session's process holds in `region`."""
        clients = self.list_clients()
        assert clients.ok, clients
        return sum(lease.blocks for c in clients.response.clients if c.session == self.id
                   for lease in c.leases if lease.region == region)


# docs/region-format.md: the header's table offsets, and where a block
# descriptor (64 bytes a page) keeps its owner word.
_BLOCK_DESC_OFFSET_AT = struct.calcsize("<Q10I") + 4 * 8
_OWNER_WORD_IN_DESC = 52


def claim_run(object_path, page, owner):
    """What a free or a resize does first: writes `owner` << 1 into the owner
    word of the huge run at `page` (with a compare-and-swap from 0 in
    libmemd; a plain write here, for a run this session may claim). Returns
    the word it found there."""
    fd = os.open(f"/dev/shm/memd.{object_path}", os.O_RDWR)
    try:
        m = mmap.mmap(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    try:
        (block_descs,) = struct.unpack_from("<Q", m, _BLOCK_DESC_OFFSET_AT)
        at = block_descs + page * 64 + _OWNER_WORD_IN_DESC
        (before,) = struct.unpack_from("<I", m, at)
        struct.pack_into("<I", m, at, owner << 1)
        return before
    finally:
        m.close()
