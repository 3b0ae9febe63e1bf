"""memd from Python: regions of shared and persistent memory leased from the
memd daemon, and numpy arrays whose data lives in them.

    import memd, numpy as np
    with memd.connect() as client, client.open("jobs", discipline="file") as region:
        a = memd.ndarray(region, (1000, 1000), np.float64, name="weights")

The library is libmemd.so.0 (MEMD_LIBRARY names another); errors are
memd.Error, an OSError with the C API's errno.
"""
from memd.arrays import ndarray, offset_of
from memd.client import Client, Error, Region, connect, version

__all__ = ["Client", "Error", "Region", "connect", "ndarray", "offset_of", "version"]
