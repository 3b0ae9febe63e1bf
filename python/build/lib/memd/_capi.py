"""libmemd.so's C API (memd_client.h, memd_region.h) through ctypes: where
the library is found, and the prototypes of the calls the package makes."""
import ctypes
import ctypes.util
import os
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_uint, c_uint32, c_uint64, c_void_p


class OpenOptions(ctypes.Structure):
    """memd_open_options, field for field."""
    _fields_ = [
        ("discipline", c_int), ("any_discipline", c_int), ("method", c_int), ("create", c_int),
        ("exclusive", c_int), ("read_only", c_int), ("mode", c_uint), ("max_bytes", c_size_t),
        ("max_clients", c_uint32), ("max_threads", c_uint32), ("reserved", c_uint64 * 4),
    ]


DISCIPLINES = {"shm": 1, "file": 2, "pmem": 3}
METHODS = {None: 0, "best": 1, "pool": 2, "last": 3, "debug": 4, "profile": 5}

# name: (result type, argument types)
_PROTOTYPES = {
    "memd_version": (c_char_p, []),
    "memd_open_options_init": (None, [POINTER(OpenOptions)]),
    "memd_connect": (c_void_p, [c_char_p]),
    "memd_disconnect": (None, [c_void_p]),
    "memd_open": (c_void_p, [c_void_p, c_char_p, POINTER(OpenOptions)]),
    "memd_region_close": (None, [c_void_p]),
    "memd_region_method": (c_int, [c_void_p]),
    "memd_region_alloc": (c_void_p, [c_void_p, c_size_t]),
    "memd_region_calloc": (c_void_p, [c_void_p, c_size_t, c_size_t]),
    "memd_region_free": (None, [c_void_p, c_void_p]),
    "memd_region_size": (c_size_t, [c_void_p, c_void_p]),
    "memd_region_offset": (c_uint64, [c_void_p, c_void_p]),
    "memd_region_at": (c_void_p, [c_void_p, c_uint64]),
    "memd_region_root": (c_void_p, [c_void_p, c_char_p, c_size_t, POINTER(c_int)]),
    "memd_region_find": (c_void_p, [c_void_p, c_char_p]),
    "memd_region_persist": (c_int, [c_void_p, c_void_p, c_size_t]),
    "memd_region_checkpoint": (c_int, [c_void_p]),
    "memd_region_check": (c_int, [c_void_p, c_char_p, c_size_t]),
}


def _load():
    """The library: $MEMD_LIBRARY, else libmemd.so.0 where the loader finds it."""
    names = [os.environ.get("MEMD_LIBRARY"), ctypes.util.find_library("memd"), "libmemd.so.0"]
    tried = []
    for name in filter(None, names):
        try:
            lib = ctypes.CDLL(name, use_errno=True)
        except OSError as e:
            tried.append(f"{name}: {e}")
            continue
        for fn, (restype, argtypes) in _PROTOTYPES.items():
            f = getattr(lib, fn)
            f.restype, f.argtypes = restype, argtypes
        return lib
    raise ImportError("memd: libmemd.so.0 not found (install memd, or set MEMD_LIBRARY): " + "; ".join(tried))


lib = _load()
