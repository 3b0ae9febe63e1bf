"""A real memd for the package's tests: the build's daemon on a socket,
data directory and shm namespace of its own (MEMD_BINARY names it), and
the build's libmemd.so (MEMD_LIBRARY, read by the package at import)."""
import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../python"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../support"))
from memd_daemon import MemdDaemon  # noqa: E402


class Daemon(MemdDaemon):
    def stop(self):  # the tests restart it: each stop must be clean
        assert super().stop() == 0


@pytest.fixture
def daemon(monkeypatch):
    root = tempfile.mkdtemp(prefix="memd-py-")
    d = Daemon(os.environ["MEMD_BINARY"], root, namespace=f"py{os.getpid()}")
    d.start()
    monkeypatch.setenv("MEMD_SOCKET", d.socket)
    yield d
    if d.running():
        d.stop()
    d.remove_shm()
    shutil.rmtree(root, ignore_errors=True)
