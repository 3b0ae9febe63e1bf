"""The Python package (python/memd) against a real daemon: regions and
roots, numpy arrays shared with other processes without a copy, arrays of a
file region across a daemon restart, and every misuse an exception."""
import errno
import gc
import multiprocessing
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import memd


def test_objects_roots_and_offsets(daemon):
    with memd.connect() as client, client.open("objects", max_bytes=16 << 20) as region:
        assert region.method == "best"
        p = region.alloc(100)
        assert region.size(p) >= 100
        assert region.at(region.offset(p)) == p
        region.free(p)
        root, created = region.root("config", 64)
        assert created and region.find("config") == root
        assert region.root("config", 64) == (root, False)
        assert region.find("missing") is None
        region.check()


def test_misuse_is_an_exception(daemon):
    with memd.connect() as client:
        with pytest.raises(memd.Error) as e:
            client.open("absent", create=False)
        assert e.value.errno == errno.ENOENT
        with pytest.raises(ValueError):
            client.open("x", discipline="tape")
        with pytest.raises(ValueError):
            client.open("x", method="fastest")
        region = client.open("pooled", method="pool", max_bytes=16 << 20)
        region.close()
        with pytest.raises(memd.Error) as e:
            client.open("pooled", method="last")
        assert e.value.errno == errno.EPROTO
        with pytest.raises(ValueError):
            region.alloc(8)  # closed
    with pytest.raises(memd.Error) as e:
        memd.connect(daemon.socket + ".none")
    assert e.value.errno == errno.ECONNREFUSED


def test_a_region_opens_as_whatever_it_is_unless_told(daemon):
    with memd.connect() as client:
        client.open("on-file", discipline="file", max_bytes=16 << 20).close()
        client.open("on-file", create=False).close()  # no discipline: any
        with pytest.raises(memd.Error) as e:
            client.open("on-file", discipline="shm", create=False)
        assert e.value.errno == errno.EPROTO


def test_an_exception_under_live_arrays_is_the_one_raised(daemon):
    with pytest.raises(KeyError):
        with memd.connect() as client, client.open("raising", max_bytes=16 << 20) as region:
            a = memd.ndarray(region, (10,), np.int8, name="x")
            raise KeyError("the caller's own")
    del a
    gc.collect()  # the region and the connection close once the array is gone


def test_arrays_are_made_found_and_checked(daemon):
    with memd.connect() as client, client.open("arrays", max_bytes=64 << 20) as region:
        a = memd.ndarray(region, (300, 200), np.float32, name="grid")
        assert a.shape == (300, 200) and a.dtype == np.float32 and not a.any()
        a[7] = 3.5
        b = memd.ndarray(region, name="grid")  # shape and dtype from the region
        assert b.shape == (300, 200) and b[7, 199] == 3.5
        assert b.__array_interface__["data"][0] == a.__array_interface__["data"][0]
        assert a.__array_interface__["data"][0] % 64 == 0
        with pytest.raises(ValueError):
            memd.ndarray(region, (300, 201), np.float32, name="grid")
        with pytest.raises(ValueError):
            memd.ndarray(region, (300, 200), np.float64, name="grid")
        with pytest.raises(ValueError):
            memd.ndarray(region, name="nothing")
        with pytest.raises(TypeError):
            memd.ndarray(region, (4,), object)
        region.root("bytes", 128)
        with pytest.raises(ValueError):
            memd.ndarray(region, name="bytes")  # a root, not an array
        with pytest.raises(BufferError):
            region.close()  # arrays still over its memory
        del a, b
        gc.collect()


def test_a_forged_array_header_is_refused_not_followed(daemon):
    """Any process of the region may write an array's header: a shape past
    its object, a dtype numpy does not know, or an extent count past the
    object's end are errors, never a view of memory that is not the array's."""
    import ctypes
    import struct
    with memd.connect() as client, client.open("forged", max_bytes=16 << 20) as region:
        a = memd.ndarray(region, (16,), np.int64, name="a")
        start = a.__array_interface__["data"][0] - 64
        offset = memd.offset_of(a)
        del a
        gc.collect()
        head = struct.Struct("<8s16sII")
        forgeries = [
            head.pack(b"memdarr1", b"<i8", 1, 64) + struct.pack("<Q", 1 << 40),  # a shape past the object
            head.pack(b"memdarr1", b"<zz9", 1, 64) + struct.pack("<Q", 1),        # no such dtype
            head.pack(b"memdarr1", b"<i8", 64, 576),                              # extents past the object
        ]
        for forged in forgeries:
            ctypes.memmove(start, forged, len(forged))
            with pytest.raises(ValueError):
                memd.ndarray(region, name="a")
            with pytest.raises(ValueError):
                memd.ndarray(region, offset=offset)


def test_an_unnamed_array_is_freed_with_its_last_view(daemon):
    with memd.connect() as client, client.open("unnamed", max_bytes=16 << 20) as region:
        a = memd.ndarray(region, (1000,), np.int64)
        a[:] = np.arange(1000)
        object_start = a.__array_interface__["data"][0] - 64
        assert region.size(object_start) > 0
        tail = a[900:]
        del a
        gc.collect()
        assert region.size(object_start) > 0 and tail[0] == 900  # a view keeps it
        del tail
        gc.collect()
        assert region.size(object_start) == 0
        region.check()


def _worker_fills_its_row(socket, row):
    os.environ["MEMD_SOCKET"] = socket
    with memd.connect() as client, client.open("shared", create=False) as region:
        a = memd.ndarray(region, name="table")
        a[row] = row + 1
        total = float(a.sum())
        del a
        return total


def test_spawned_workers_write_the_parents_array_without_a_copy(daemon):
    with memd.connect() as client, client.open("shared", max_bytes=64 << 20) as region:
        a = memd.ndarray(region, (4, 100_000), np.float64, name="table")
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            pool.starmap(_worker_fills_its_row, [(daemon.socket, r) for r in range(4)])
        assert [float(a[r].min()) for r in range(4)] == [1.0, 2.0, 3.0, 4.0]
        del a


def _worker_sums_at(socket, offset):
    os.environ["MEMD_SOCKET"] = socket
    with memd.connect() as client, client.open("handed", create=False) as region:
        a = memd.ndarray(region, offset=offset)
        total = int(a[1:].sum())
        a[0] = -1  # seen by the maker (the workers run at once: they sum the rest)
        del a
        return total


def test_an_unnamed_array_is_handed_over_by_offset(daemon):
    with memd.connect() as client, client.open("handed", max_bytes=64 << 20) as region:
        a = memd.ndarray(region, (1 << 20,), np.int64)
        a[:] = 3
        offset = memd.offset_of(a[10:20])  # a view names the same array
        assert offset == memd.offset_of(a)
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            assert pool.starmap(_worker_sums_at, [(daemon.socket, offset)] * 2) == [(3 << 20) - 3] * 2
        assert a[0] == -1
        root, _ = region.root("not-an-array", 256)
        for bad in [-1, offset + 8, offset + 64, 1 << 40, (1 << 64) - 1, region.offset(root)]:
            with pytest.raises(ValueError):
                memd.ndarray(region, offset=bad)
        with pytest.raises(ValueError):
            memd.offset_of(np.zeros(3))
        del a


def test_a_forked_child_shares_an_inherited_array(daemon):
    with memd.connect() as client, client.open("forked", max_bytes=16 << 20) as region:
        a = memd.ndarray(region, (1000,), np.int32, name="counts")
        pid = os.fork()
        if pid == 0:  # no call into memd: the pages are shared, not copied
            a[:] = 5
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        assert int(a.sum()) == 5000
        del a


def test_a_file_regions_array_survives_a_daemon_restart(daemon):
    with memd.connect() as client, client.open("kept", discipline="file", max_bytes=32 << 20) as region:
        a = memd.ndarray(region, (500, 500), np.int16, name="image")
        a[:] = np.arange(500, dtype=np.int16)
        region.persist(a.__array_interface__["data"][0], a.nbytes)
        del a
    daemon.stop()
    daemon.start()
    with memd.connect() as client, client.open("kept", discipline="file", create=False) as region:
        a = memd.ndarray(region, name="image")
        assert a.dtype == np.int16 and a.shape == (500, 500)
        assert (a[123] == np.arange(500)).all()
        del a


def test_arrays_of_a_read_only_region_are_read_only(daemon):
    with memd.connect() as client:
        with client.open("readable", max_bytes=16 << 20) as region:
            memd.ndarray(region, (10,), np.uint8, name="flags")[:] = 1
            gc.collect()
        with client.open("readable", create=False, read_only=True) as seen:
            b = memd.ndarray(seen, name="flags")
            assert not b.flags.writeable and int(b.sum()) == 10
            with pytest.raises(ValueError):
                b[0] = 2
            del b


def test_pip_installs_the_package(daemon, tmp_path):
    """pip install of python/ into a virtual environment (system numpy and
    setuptools; nothing from the network), then the installed package."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = str(venv / "bin/python")
    # From a copy: setuptools builds in the source directory.
    source = str(tmp_path / "python")
    shutil.copytree(os.path.join(os.path.dirname(__file__), "../../python"), source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--no-index",
                    source], check=True)
    out = subprocess.run([python, "-c", "import memd, numpy as np\n"
                          "print(memd.__file__)\n"
                          "with memd.connect() as c, c.open('via-pip') as r:\n"
                          "    a = memd.ndarray(r, (3,), np.int8, name='x'); a[:] = 4; print(int(a.sum())); del a\n"],
                         check=True, capture_output=True, text=True, cwd=str(tmp_path)).stdout.split()
    assert out[0].startswith(str(venv)) and out[1] == "12"
