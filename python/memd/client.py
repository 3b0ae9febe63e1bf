"""The daemon's client and its regions (memd_client.h, memd_region.h).

A Client is one connection to memd; a Region, one region opened through
it. Both close on exit from a `with` block or on close(). Not usable in a
child made by fork() (neither is the C library's): use the "spawn" or
"forkserver" start method of multiprocessing, and connect in the child.
A forked child may still read and write arrays it inherited: their pages
are shared, not copied."""
import ctypes
import os
import weakref

from memd._capi import DISCIPLINES, METHODS, OpenOptions, lib


class Error(OSError):
    """A failed call of the C API: errno, strerror and what was asked."""


def _raise(what):
    e = ctypes.get_errno()
    raise Error(e, os.strerror(e), what)


def version():
    """The C library's version ("0.1.0")."""
    return lib.memd_version().decode()


def connect(socket=None):
    """A connection to memd on `socket` (None: $MEMD_SOCKET, else the default)."""
    return Client(socket)


class Client:
    def __init__(self, socket=None):
        self._handle = lib.memd_connect(os.fsencode(socket) if socket is not None else None)
        if not self._handle:
            _raise(f"connect to memd{' on ' + socket if socket else ''}")
        self._regions = weakref.WeakSet()

    def open(self, name, discipline=None, *, method=None, create=True, exclusive=False, read_only=False,
             mode=0, max_bytes=0):
        """The region `name` (created unless create=False). discipline: "shm",
        "file" (persists across restarts) or "pmem"; None: whatever the
        region is (creating: "shm"). method: None (what it was made with;
        creating: "best"), "best", "pool", "last", "debug", "profile". mode:
        permission bits when creating (0: 0600)."""
        if discipline is not None and discipline not in DISCIPLINES:
            raise ValueError(f"discipline must be None or one of {sorted(DISCIPLINES)}, not {discipline!r}")
        if method not in METHODS:
            raise ValueError(f"method must be None or one of {sorted(m for m in METHODS if m)}, not {method!r}")
        options = dict(method=method, read_only=read_only, mode=mode, max_bytes=max_bytes)
        # No discipline: libmemd opens whatever is there, else creates shm.
        return self._open(name, discipline, create=create, exclusive=exclusive, **options)

    def _open(self, name, discipline, *, method, create, exclusive, read_only, mode, max_bytes):
        o = OpenOptions()
        lib.memd_open_options_init(ctypes.byref(o))
        o.discipline, o.any_discipline = DISCIPLINES[discipline or "shm"], discipline is None
        o.method = METHODS[method]
        o.create, o.exclusive, o.read_only = create, exclusive, read_only
        o.mode, o.max_bytes = mode, max_bytes
        handle = self._live().memd_open(self._handle, name.encode(), ctypes.byref(o))
        if not handle:
            _raise(f"open region {name!r}")
        region = Region(self, handle, name, read_only)
        self._regions.add(region)
        return region

    def close(self):
        """Closes its regions, then the connection."""
        if self._handle:
            for region in list(self._regions):
                region.close()
            lib.memd_disconnect(self._handle)
            self._handle = None

    def _live(self):
        if not self._handle:
            raise ValueError("the client is closed")
        return lib

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        # Leaving on an exception with a region still under arrays: the
        # exception is what the caller needs to see; the connection closes
        # when its regions have (see Region.__del__).
        if exc_type is not None and any(r._views for r in self._regions):
            return
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None):
            self.close()


class Region:
    """A region opened through a Client: allocate and free, named roots,
    offsets (the same in every process) and addresses (this process's)."""

    def __init__(self, client, handle, name, read_only=False):
        self._client, self._handle, self.name, self.read_only = client, handle, name, bool(read_only)
        self._views = weakref.WeakSet()  # arrays over its memory (memd.ndarray)

    @property
    def method(self):
        number = lib.memd_region_method(self._live())
        return next((m for m, n in METHODS.items() if n == number and m), None)

    def alloc(self, size):
        """The address of a new object of `size` bytes; Error (ENOMEM) when the region is full."""
        p = lib.memd_region_alloc(self._live(), size)
        if not p:
            _raise(f"alloc {size} bytes in {self.name!r}")
        return p

    def calloc(self, size):
        """As alloc, zeroed (fresh pages of the region are not written again)."""
        p = lib.memd_region_calloc(self._live(), 1, size)
        if not p:
            _raise(f"calloc {size} bytes in {self.name!r}")
        return p

    def free(self, address):
        lib.memd_region_free(self._live(), address)

    def size(self, address):
        """The usable size of the live object at `address` (0: none)."""
        return lib.memd_region_size(self._live(), address)

    def root(self, name, size):
        """(address, created): the root object `name`, made (zeroed) if missing."""
        created = ctypes.c_int(0)
        p = lib.memd_region_root(self._live(), name.encode(), size, ctypes.byref(created))
        if not p:
            _raise(f"root {name!r} of {size} bytes in {self.name!r}")
        return p, bool(created.value)

    def find(self, name):
        """The address of root `name`, or None."""
        return lib.memd_region_find(self._live(), name.encode()) or None

    def offset(self, address):
        return lib.memd_region_offset(self._live(), address)

    def at(self, offset):
        return lib.memd_region_at(self._live(), offset)

    def persist(self, address, size):
        """File and pmem regions: makes [address, address + size) durable."""
        if lib.memd_region_persist(self._live(), address, size) != 0:
            _raise(f"persist in {self.name!r}")

    def check(self):
        """Raises Error (EIO) with the heap's message if an invariant does not hold."""
        message = ctypes.create_string_buffer(512)
        if lib.memd_region_check(self._live(), message, len(message)) != 0:
            raise Error(ctypes.get_errno(), message.value.decode(errors="replace"), self.name)

    def close(self):
        """Unmaps the region from this process (its objects stay). Refused
        while arrays over its memory are alive: using one after would touch
        unmapped memory."""
        if not self._handle:
            return
        alive = len(self._views)
        if alive:
            raise BufferError(f"region {self.name!r}: {alive} array(s) still use its memory; delete them first")
        lib.memd_region_close(self._handle)
        self._handle = None

    def _live(self):
        if not self._handle:
            raise ValueError(f"region {self.name!r} is closed")
        return self._handle

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is not None and self._views:
            return  # closed when its last array goes (__del__): the exception is the news
        self.close()

    def __del__(self):
        # Arrays hold their region, so this runs only once none is left.
        if getattr(self, "_handle", None) and self._client._handle:
            self.close()
