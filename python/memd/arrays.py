"""numpy arrays whose data lives in a region.

An array is one object of the region: a header (what the array is), then
its elements, 64-byte aligned. A named array is a root of the region, so
that any process that opens the region finds it by name, and a file
region's arrays survive restarts; an unnamed one is freed when the last
numpy view of it goes.

    a = memd.ndarray(region, (1000, 1000), np.float64, name="weights")   # made zeroed, or found
    b = memd.ndarray(region, name="weights")                             # found: shape and dtype from the header
    c = memd.ndarray(region, (4096,), np.uint8)                          # unnamed: freed with its last view
    o = memd.offset_of(c)       # the same in every process: send it to a worker, which opens
    d = memd.ndarray(region, offset=o)                                   # the same memory, no copy
An unnamed array another process views must stay alive in its maker (a
view of a freed array reads whatever the region puts there next).
"""
import ctypes
import math
import struct
import weakref

import numpy as np

MAGIC = b"memdarr1"
_HEAD = struct.Struct("<8s16sII")  # magic, dtype.str, ndim, header bytes; then ndim uint64 extents
ALIGN = 64


def _header_bytes(ndim):
    return -(-(_HEAD.size + 8 * ndim) // ALIGN) * ALIGN


def _read_header(address, what, size):
    """(dtype, shape, header bytes) from the header at `address`, which
    starts an object of `size` bytes; ValueError unless it is an array's."""
    magic, dtype, ndim, header = _HEAD.unpack(ctypes.string_at(address, _HEAD.size))
    if magic != MAGIC or ndim > 64 or header != _header_bytes(ndim) or header > size:
        raise ValueError(f"{what} is not an array made by memd.ndarray (or is being made)")
    shape = struct.unpack(f"<{ndim}Q", ctypes.string_at(address + _HEAD.size, 8 * ndim))
    try:
        dtype = np.dtype(dtype.rstrip(b"\0").decode())
    except (TypeError, ValueError, UnicodeDecodeError):
        raise ValueError(f"{what} has no dtype numpy knows") from None
    return dtype, tuple(shape), header


def _write_header(address, dtype, shape):
    header = _header_bytes(len(shape))
    packed = _HEAD.pack(MAGIC, dtype.str.encode(), len(shape), header) + struct.pack(f"<{len(shape)}Q", *shape)
    ctypes.memmove(address, packed, len(packed))
    return header


def _view(region, address, dtype, shape, owned, object_address):
    """The numpy array over the elements at `address`. Its memory object is
    tracked by the region (which will not close under it) and, when `owned`,
    frees the object once no view is left."""
    count = math.prod(shape)
    # A class of its own: ctypes objects take no weak references or hashes.
    memory_type = type("RegionMemory", (ctypes.c_ubyte * max(count * dtype.itemsize, 1),), {"__hash__": object.__hash__})
    memory = memory_type.from_address(address)
    memory.region, memory.object_address = region, object_address
    region._views.add(memory)
    if owned is not None:
        weakref.finalize(memory, _free_if_open, weakref.ref(region), owned)
    a = np.frombuffer(memory, dtype=dtype, count=count).reshape(shape)
    if region.read_only:
        a.flags.writeable = False
    return a


def _free_if_open(region_ref, address):
    region = region_ref()
    if region is not None and region._handle:
        region.free(address)


def offset_of(array):
    """The offset in its region of an array made by memd.ndarray (or of a
    view of one): the same in every process that maps the region."""
    base = array
    while base is not None and not hasattr(base, "object_address"):
        base = getattr(base, "base", None) if isinstance(base, np.ndarray) else getattr(base, "obj", None)
    if base is None:
        raise ValueError("not an array of a memd region")
    return base.region.offset(base.object_address)


def _checked(region, address, what):
    """(dtype, shape, header bytes) of the array whose object starts at
    `address`, checked: a live object of the region, with an array's header,
    as long as its elements (another process may have written anything)."""
    size = region.size(address) if address else 0
    if size < _HEAD.size:
        raise ValueError(f"{what} is not an object of region {region.name!r}")
    dtype, shape, header = _read_header(address, what, size)
    if header + math.prod(shape) * dtype.itemsize > size:
        raise ValueError(f"the array {what} is longer than its object")
    return dtype, shape, header


def _at_offset(region, offset):
    address = region.at(offset) if 0 <= offset < 1 << 62 else None
    dtype, shape, header = _checked(region, address, f"at offset {offset}")
    return _view(region, address + header, dtype, shape, owned=None, object_address=address)


def ndarray(region, shape=None, dtype=None, name=None, offset=None):
    """A C-ordered numpy array in `region`. With `name`: the region's root of
    that name, made zeroed if it does not exist (shape and dtype required),
    else found (shape and dtype, if given, must be its own). With `offset`
    (from memd.offset_of, in any process): the array there. Otherwise: a new
    array (zeroed), freed when its last view is gone."""
    if offset is not None:
        if name is not None or shape is not None or dtype is not None:
            raise ValueError("an array at an offset takes its shape and dtype from the region")
        return _at_offset(region, int(offset))
    if shape is not None:
        shape = (shape,) if isinstance(shape, int) else tuple(int(n) for n in shape)
        if any(n < 0 for n in shape):
            raise ValueError(f"negative extent in shape {shape}")
    dtype = np.dtype(dtype) if dtype is not None else None
    if dtype is not None and (dtype.hasobject or len(dtype.str) > 16):
        raise TypeError(f"dtype {dtype} cannot live in shared memory (it holds Python objects or is too long)")
    if name is not None:
        found = region.find(name)
        if found is None:
            if shape is None or dtype is None:
                raise ValueError(f"no array {name!r} in region {region.name!r}: give shape and dtype to make it")
            header = _header_bytes(len(shape))
            found, created = region.root(name, header + math.prod(shape) * dtype.itemsize)
            if created:
                _write_header(found, dtype, shape)
        have_dtype, have_shape, header = _checked(region, found, repr(name))
        if (shape is not None and shape != have_shape) or (dtype is not None and dtype != have_dtype):
            raise ValueError(f"array {name!r} is {have_shape} {have_dtype}, not {shape} {dtype}")
        return _view(region, found + header, have_dtype, have_shape, owned=None, object_address=found)
    if shape is None or dtype is None:
        raise ValueError("an unnamed array needs shape and dtype")
    header = _header_bytes(len(shape))
    nbytes = math.prod(shape) * dtype.itemsize
    address = region.calloc(header + nbytes)
    _write_header(address, dtype, shape)
    return _view(region, address + header, dtype, shape, owned=address, object_address=address)
