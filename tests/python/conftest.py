"""A real memd for the package's tests: the build's daemon on a socket,
data directory and shm namespace of its own (MEMD_BINARY names it), and
the build's libmemd.so (MEMD_LIBRARY, read by the package at import)."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../python"))


def answers(path):
    """Whether something accepts connections on the Unix socket `path`: the
    file alone is not enough (gRPC makes it at bind, before it listens)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
            return True
        except OSError:
            return False


class Daemon:
    def __init__(self, binary, root):
        self.binary, self.root = binary, root
        self.socket = os.path.join(root, "memd.sock")
        self.namespace = f"py{os.getpid()}"
        self.process = None

    def start(self):
        log = open(os.path.join(self.root, "memd.log"), "a")
        self.process = subprocess.Popen([self.binary, "--socket", self.socket, "--data-dir",
                                         os.path.join(self.root, "data"), "--shm-namespace", self.namespace,
                                         "--metrics-address", "127.0.0.1:0"], stdout=log, stderr=subprocess.STDOUT)
        for _ in range(1000):
            if self.process.poll() is not None:
                break
            if answers(self.socket):
                return
            time.sleep(0.01)
        raise RuntimeError("memd did not start: " + open(log.name).read()[-1000:])

    def stop(self):
        self.process.terminate()
        assert self.process.wait(timeout=60) == 0
        os.unlink(self.socket) if os.path.exists(self.socket) else None


@pytest.fixture
def daemon(monkeypatch):
    root = tempfile.mkdtemp(prefix="memd-py-")
    d = Daemon(os.environ["MEMD_BINARY"], root)
    d.start()
    monkeypatch.setenv("MEMD_SOCKET", d.socket)
    yield d
    if d.process.poll() is None:
        d.stop()
    for name in os.listdir("/dev/shm"):
        if name.startswith(f"memd.{d.namespace}."):
            os.unlink(os.path.join("/dev/shm", name))
    shutil.rmtree(root, ignore_errors=True)
