"""real_redis: Debian's redis-server under each allocator, driven by Debian's
own clients for a fixed amount of work.

One measurement: start redis-server under bench_launch (LD_PRELOAD on the
server only; the clients run on glibc and are not measured) on a Unix
socket, with persistence off; load a fixed data set with `redis-cli --pipe`
(real/redis_commands.py); run redis-benchmark for a fixed number of SET,
GET, LPUSH and LPOP requests at three value sizes, in database 1; empty
database 1 and take DEBUG DIGEST of what is left (the loaded data set, the
same under every allocator) as the checksum; SHUTDOWN NOSAVE.

- time: wall time of the load and the benchmark together (the server's time
  to serve a fixed number of requests; start-up and shutdown excluded);
- peak RSS and minor faults: the server's own, from wait4() when it exits.

redis-server links libjemalloc; glibc's malloc is put in by preloading libc
(see real_programs.py). jemalloc's background thread is turned off for every
allocator (it would run only beside jemalloc's own malloc). Debian's
redis-tools holds the server binary as redis-check-rdb (redis-server is a
link to it, from the redis-server package, which also installs a system
service); the binary acts as the server when started under that name, so
without redis-server on PATH the harness links it under that name itself.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

from . import launch
from .launch import RunResult
from .real_programs import BENCH_DIR, RealProgram, preload_for

if BENCH_DIR not in sys.path:
    sys.path.insert(0, BENCH_DIR)

from real import redis_commands  # noqa: E402

# redis-benchmark: requests per test at scale 1, keyspace, value sizes.
REQUESTS = 15_000
KEYSPACE = 10_000
VALUE_SIZES = (16, 256, 4096)
CLIENTS = 8
PIPELINE = 16
START_TIMEOUT_S = 20


class ClientError(Exception):
    pass


class RedisServer(RealProgram):
    name = "real_redis"
    summary = "redis-server: 40k-key data set loaded, then SET/GET/LPUSH/LPOP at 16 B, 256 B, 4 KiB"
    executables = ("redis-cli", "redis-benchmark")
    packages = ("redis-tools",)

    def unavailable(self, bin_dir):
        missing = super().unavailable(bin_dir)
        if missing:
            return missing
        if not (shutil.which("redis-server") or shutil.which("redis-check-rdb")):
            return "redis-server not found (Debian: redis-tools; `make setup` installs it)"
        return None

    def prepare(self, ctx):
        redis_commands.write(os.path.join(self.input_dir(ctx), "load.resp"), ctx.scale)

    def _server_binary(self, ctx):
        found = shutil.which("redis-server")
        if found:
            return found
        link = os.path.join(self.input_dir(ctx), "redis-server")
        if not os.path.exists(link):
            os.symlink(shutil.which("redis-check-rdb"), link)
        return link

    def measure(self, ctx, allocator):
        run_dir = tempfile.mkdtemp(prefix="run-", dir=self.input_dir(ctx))
        sock = os.path.join(run_dir, "redis.sock")
        argv = [self._server_binary(ctx), "--port", "0", "--unixsocket", sock, "--dir", run_dir,
                "--save", "", "--appendonly", "no", "--databases", "2", "--jemalloc-bg-thread", "no",
                "--enable-debug-command", "yes", "--loglevel", "warning"]
        server = launch.start(ctx.launcher, argv, preload_for(allocator), allocator.env, cwd=run_dir)
        values, error, phase_s = {}, None, None
        try:
            _wait_ready(sock, server, ctx.timeout)
            began = time.monotonic()
            load_s = _load(sock, os.path.join(self.input_dir(ctx), "load.resp"), ctx.timeout)
            bench_s = _benchmark(sock, ctx.scale, ctx.timeout)
            phase_s = time.monotonic() - began
            _cli(sock, ["-n", "1", "FLUSHDB"], ctx.timeout)
            digest = _cli(sock, ["DEBUG", "DIGEST"], ctx.timeout).strip()
            if len(digest) != 40 or digest == "0" * 40:
                raise ClientError(f"DEBUG DIGEST gave {digest[:60]!r}, not the digest of the data set")
            values = {"checksum": digest, "load_s": f"{load_s:.3f}", "benchmark_s": f"{bench_s:.3f}"}
        except ClientError as e:
            error = str(e)
        finally:
            _shutdown(sock)
            result = launch.finish(server, ctx.timeout)
            shutil.rmtree(run_dir, ignore_errors=True)
        if error and result.ok:
            result.ok, result.error = False, error
        result.values = values  # not the server's log, which may hold key=value text
        result.wall_s = phase_s
        return result


def _cli(sock, args, timeout, stdin=None):
    try:
        p = subprocess.run(["redis-cli", "-s", sock] + args, stdin=stdin, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ClientError(f"redis-cli {' '.join(args)} timed out") from None
    if p.returncode != 0 or p.stdout.startswith("ERR") or "Could not connect" in p.stdout + p.stderr:
        raise ClientError(f"redis-cli {' '.join(args)}: {(p.stdout + p.stderr).strip()[:200]}")
    return p.stdout


def _wait_ready(sock, server, timeout):
    deadline = time.monotonic() + min(timeout, START_TIMEOUT_S)
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise ClientError("redis-server exited during start-up")
        if os.path.exists(sock):
            try:
                if _cli(sock, ["PING"], 5).strip() == "PONG":
                    return
            except ClientError:
                pass
        time.sleep(0.01)
    raise ClientError("redis-server did not answer PING")


def _load(sock, commands, timeout):
    began = time.monotonic()
    with open(commands, "rb") as f:
        try:
            p = subprocess.run(["redis-cli", "-s", sock, "--pipe"], stdin=f, capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ClientError("redis-cli --pipe timed out") from None
    if p.returncode != 0 or "errors: 0," not in p.stdout:
        raise ClientError(f"loading the data set failed: {(p.stdout + p.stderr).strip()[-200:]}")
    return time.monotonic() - began


def _benchmark(sock, scale, timeout):
    requests = max(100, int(REQUESTS * scale))
    began = time.monotonic()
    for size in VALUE_SIZES:
        argv = ["redis-benchmark", "-s", sock, "--dbnum", "1", "-n", str(requests), "-r", str(KEYSPACE),
                "-c", str(CLIENTS), "-P", str(PIPELINE), "-d", str(size), "-t", "set,get,lpush,lpop", "-q"]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ClientError("redis-benchmark timed out") from None
        if p.returncode != 0 or "LPOP" not in p.stdout:
            raise ClientError(f"redis-benchmark -d {size} failed: {(p.stdout + p.stderr).strip()[-200:]}")
    return time.monotonic() - began


def _shutdown(sock):
    # The server closes the connection as it exits, so redis-cli's own exit
    # status means nothing here; finish() sees whether the server ended well.
    try:
        subprocess.run(["redis-cli", "-s", sock, "SHUTDOWN", "NOSAVE"], capture_output=True, timeout=10)
    except subprocess.TimeoutExpired:
        pass
