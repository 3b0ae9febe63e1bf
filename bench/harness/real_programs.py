"""Real programs from Debian, run under each allocator like the wl_*
workloads: the same command, the allocator put in with LD_PRELOAD, in the
same interleaved rounds. Each is optional: if its Debian package is missing
the harness skips it with a message (tools/setup.sh installs them).

glibc runs with libc itself preloaded (allocators.libc_preload), because a
program may link an allocator of its own; a preloaded library is searched
before the program's, so every allocator, glibc included, really serves it.

A program's checksum is what it computed (its own output, or a hash of the
file it wrote), so an allocator that corrupts its data is caught; its peak
live bytes are unknown, so the report leaves that column empty.
"""
import hashlib
import os
import shutil
import sys
import tempfile

from . import launch
from .allocators import libc_preload

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if BENCH_DIR not in sys.path:
    sys.path.insert(0, BENCH_DIR)

from real import c_source  # noqa: E402


def preload_for(allocator):
    return allocator.preload or libc_preload()


class RealProgram:
    """One command per measurement. Subclasses give the command and, if the
    program does not print `checksum=`, how to compute it from its output
    directory."""
    name = ""
    summary = ""
    executables = ()  # looked up on PATH
    packages = ()     # Debian packages, for the report header and the skip message
    env = {}          # for the measured program only, on top of the allocator's
    multi_threaded = False
    required = ("checksum",)

    def unavailable(self, bin_dir):
        missing = [e for e in self.executables if shutil.which(e) is None]
        if missing:
            return f"{', '.join(missing)} not found (Debian: {' '.join(self.packages)}; `make setup` installs it)"
        return None

    def input_dir(self, ctx):
        path = os.path.join(ctx.workdir, self.name)
        os.makedirs(path, exist_ok=True)
        return path

    def prepare(self, ctx):
        pass

    def argv(self, ctx, out_dir):
        raise NotImplementedError

    def checksum(self, out_dir):
        return None

    def measure(self, ctx, allocator):
        out_dir = tempfile.mkdtemp(prefix="run-", dir=self.input_dir(ctx))
        try:
            r = launch.run(ctx.launcher, self.argv(ctx, out_dir), preload_for(allocator), ctx.timeout,
                           {**self.env, **allocator.env}, cwd=out_dir)
            if r.ok and "checksum" not in r.values:
                sum_ = self.checksum(out_dir)
                if sum_ is not None:
                    r.values["checksum"] = sum_
            return r
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)


class PythonObjects(RealProgram):
    name = "real_python"
    summary = "python3 (PYTHONMALLOC=malloc) builds, indexes, serialises and ranks 25k dict records"
    executables = ("python3",)
    packages = ("python3",)
    # Every object to malloc (see the script); a fixed hash seed so that set
    # and dict layouts, and so the allocation sequence, repeat exactly.
    env = {"PYTHONMALLOC": "malloc", "PYTHONHASHSEED": "0"}

    def argv(self, ctx, out_dir):
        # -S -s: no site module or user site-packages, so nothing from the
        # machine's Python setup runs (-I would also drop PYTHONMALLOC).
        script = os.path.join(BENCH_DIR, "real", "python_objects.py")
        return [shutil.which("python3"), "-S", "-s", script, f"{ctx.scale:g}"]


class GccCompile(RealProgram):
    name = "real_gcc"
    summary = "gcc -O2 -c of a generated 60-function C file (driver, cc1 and as all preloaded)"
    executables = ("gcc",)
    packages = ("gcc",)

    def prepare(self, ctx):
        with open(os.path.join(self.input_dir(ctx), "generated.c"), "w") as f:
            f.write(c_source.generate(ctx.scale))

    def argv(self, ctx, out_dir):
        # Relative (the run's directory is inside the input's): the object
        # file names its source, and must not vary with the scratch path.
        return [shutil.which("gcc"), "-O2", "-c", "../generated.c", "-o", "generated.o"]

    def checksum(self, out_dir):
        path = os.path.join(out_dir, "generated.o")
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
