"""A real memd for Python tests, checks and benchmarks: the daemon binary as
a child process on a socket, data directory and shm namespace of its own,
started when its socket accepts a connection (gRPC makes the file at bind,
before it listens, so the file alone is not enough), stopped with SIGTERM,
its shm objects removed after.

    from memd_daemon import MemdDaemon
    with MemdDaemon(binary, scratch_dir) as d:      # d.socket, d.namespace, d.log()
        ...
"""
import os
import socket
import subprocess
import time


def socket_answers(path):
    """Whether something accepts connections on the Unix socket `path`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
            return True
        except OSError:
            return False


class MemdDaemon:
    def __init__(self, binary, root, *, socket_path=None, namespace=None, wrapper=(), args=()):
        """`root` holds the data directory, the log and (by default) the socket;
        `wrapper` runs the daemon (e.g. setpriv ...); `args` are added last."""
        self.binary, self.root = binary, root
        self.socket = socket_path or os.path.join(root, "memd.sock")
        self.namespace = namespace or f"t{os.getpid()}x{id(self) % 100000}"
        self.log_path = os.path.join(root, "memd.log")
        self.wrapper, self.args = list(wrapper), list(args)
        self.process = None

    def argv(self):
        return self.wrapper + [self.binary, "--socket", self.socket, "--data-dir",
                               os.path.join(self.root, "data"), "--shm-namespace", self.namespace,
                               "--metrics-address", "127.0.0.1:0", *self.args]

    def start(self, seconds=30):
        """Starts memd and waits until its socket answers; RuntimeError with
        the log's end if it exits or does not answer in time, or if something
        answers on the socket already (it would be taken for this memd)."""
        if self.running():
            raise RuntimeError(f"memd is running already (pid {self.process.pid})")
        if socket_answers(self.socket):
            raise RuntimeError(f"something serves {self.socket} already")
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.process.poll() is None:
            if socket_answers(self.socket):
                return self
            time.sleep(0.01)
        self.process.kill()
        self.process.wait()
        raise RuntimeError(f"memd did not start (exit {self.process.returncode}): {self.log()[-1000:]}")

    def running(self):
        return self.process is not None and self.process.poll() is None

    def stop(self, seconds=60):
        """SIGTERM, a clean shutdown; memd's exit status."""
        self.process.terminate()
        return self.process.wait(timeout=seconds)

    def remove_shm(self):
        for name in os.listdir("/dev/shm"):
            if name.startswith(f"memd.{self.namespace}."):
                try:
                    os.unlink(os.path.join("/dev/shm", name))
                except FileNotFoundError:
                    pass

    def log(self):
        try:
            with open(self.log_path) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def close(self):
        """Stopped if running, and its shm objects removed."""
        if self.running():
            self.stop()
        self.remove_shm()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
