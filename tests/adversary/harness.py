"""The test driver's side: a real memd per test, honest clients, attackers.

The driver runs as root. It starts the daemon (its own socket, data directory
and shm namespace, as tests/daemon/daemon_process.h does), runs the honest
`daemon_test_client`, and runs each attack as `nobody` in a separate Python
process (attacker.py), which prints what the daemon answered as JSON. The
tests assert on that record and on the daemon's survival.

Paths come from the environment (set by CMake's ctest entries):
MEMD_BINARY, MEMD_TEST_CLIENT, MEMDCTL_BINARY, MEMD_PY_STUBS.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import hostile

HERE = os.path.dirname(os.path.abspath(__file__))

# Bounds on waiting, generous: they catch hangs, they measure nothing.
START_BOUND = 30.0
STOP_BOUND = 60.0
ATTACK_BOUND = 600.0


def env_path(name):
    value = os.environ.get(name, "")
    if not value:
        raise unittest.SkipTest(f"{name} is not set (run through ctest)")
    return value


def wait_for(predicate, bound, step=0.05):
    """Polls until predicate() is true or `bound` seconds pass; its last value."""
    end = time.monotonic() + bound
    while True:
        value = predicate()
        if value or time.monotonic() > end:
            return value
        time.sleep(step)


def socket_answers(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


class Daemon:
    counter = 0

    def __init__(self, *extra_args):
        self.binary = env_path("MEMD_BINARY")
        self.dir = tempfile.mkdtemp(prefix="memd-adversary-")
        # Other users reach the socket; the daemon judges their requests.
        os.chmod(self.dir, 0o755)
        Daemon.counter += 1
        self.ns = f"py{os.getpid()}-{Daemon.counter}"
        self.socket = os.path.join(self.dir, "memd.sock")
        self.log_path = os.path.join(self.dir, "memd.log")
        self.argv = [self.binary, "--socket", self.socket, "--data-dir", os.path.join(self.dir, "data"),
                     "--shm-namespace", self.ns, "--log-level", "info", "--metrics-address", "127.0.0.1:0",
                     *extra_args]
        self.start()

    def start(self):
        """Starts it (again, on the same data after a stop)."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT)
        if not wait_for(lambda: socket_answers(self.socket) or self.proc.poll() is not None, START_BOUND):
            raise RuntimeError("memd did not answer on its socket:\n" + self.log())
        if self.proc.poll() is not None:
            raise RuntimeError(f"memd exited ({self.proc.returncode}) at start:\n" + self.log())

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def exit_code(self):
        """None while it runs; else its exit code, or 128 + the signal that ended it."""
        rc = self.proc.poll()
        if rc is None:
            return None
        return 128 - rc if rc < 0 else rc

    def stop(self):
        """SIGTERM, and its exit code (128 + signal if a signal ended it).

        A daemon that does not stop within the bound is killed: "hung".
        """
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_BOUND)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return "hung"
        return self.exit_code()

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def cleanup(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait()
        prefix = f"memd.{self.ns}."
        for name in os.listdir("/dev/shm"):
            if name.startswith(prefix):
                try:
                    os.unlink(os.path.join("/dev/shm", name))
                except OSError:
                    pass
        if not os.environ.get("MEMD_KEEP_TEST_DIRS"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def shm_path(self, name):
        return f"/dev/shm/memd.{self.ns}.{name}"

    def metrics_text(self):
        """One scrape of /metrics; the bound address is in Admin.Stats."""
        with hostile.Connection(self.socket) as s:
            stats = s.stats()
        if not stats.ok:
            raise RuntimeError(f"Admin.Stats: {stats}")
        with urllib.request.urlopen(f"http://{stats.response.metrics_address}/metrics", timeout=30) as r:
            return r.read().decode()


class Client:
    """The honest client, daemon_test_client, as a child process."""

    def __init__(self, daemon):
        self.binary = env_path("MEMD_TEST_CLIENT")
        self.daemon = daemon
        self.started = []

    def argv(self, region, job, *args, options=()):
        return [self.binary, *options, self.daemon.socket, region, job, *[str(a) for a in args]]

    def run(self, region, job, *args, options=(), bound=120):
        """Runs one job to its end: (exit code or "timeout", output)."""
        try:
            p = subprocess.run(self.argv(region, job, *args, options=options), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=bound)
        except subprocess.TimeoutExpired as e:
            return "timeout", (e.output or b"").decode(errors="replace")
        return p.returncode if p.returncode >= 0 else 128 - p.returncode, p.stdout.decode(errors="replace")

    def start(self, region, job, *args, options=()):
        """Starts a job (output in .stdout); killed at the end of the test at the latest."""
        p = subprocess.Popen(self.argv(region, job, *args, options=options), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        self.started.append(p)
        return p

    def kill_all(self):
        for p in self.started:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()


class Attacker:
    """Runs functions of the test modules as `nobody`, each in a fresh process.

    The Python files and the stubs are copied into the daemon's directory
    (0755) so that nobody can read them wherever the tree lives.
    """

    def __init__(self, daemon):
        self.daemon = daemon
        self.python = sys.executable
        self.dir = os.path.join(daemon.dir, "py")
        stubs = env_path("MEMD_PY_STUBS")
        shutil.copytree(stubs, self.dir)
        for name in os.listdir(HERE):
            if name.endswith(".py"):
                shutil.copy(os.path.join(HERE, name), self.dir)
        for root, dirs, files in os.walk(self.dir):
            os.chmod(root, 0o755)
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)

    def run(self, module, function, **kwargs):
        """module.function(socket=..., **kwargs) as nobody: the dict it returned."""
        argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", self.python,
                os.path.join(self.dir, "attacker.py"), module, function, json.dumps(kwargs)]
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": self.dir, "PYTHONDONTWRITEBYTECODE": "1",
               "MEMD_SOCKET": self.daemon.socket, "MEMD_SHM_NAMESPACE": self.daemon.ns}
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=ATTACK_BOUND,
                           cwd=self.dir, env=env)
        out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
        if p.returncode != 0 or not out.strip():
            raise AssertionError(f"attacker {module}.{function} exited {p.returncode}:\n{err}\n{out}")
        return json.loads(out.strip().splitlines()[-1])


class DaemonTest(unittest.TestCase):
    """A test with a daemon of its own, stopped (and judged) at the end."""

    daemon_args = ()

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("the attacks run as nobody: the driver must be root to switch users")
        if shutil.which("setpriv") is None:
            self.skipTest("setpriv (util-linux) is not installed")
        self.daemon = Daemon(*self.daemon_args)
        self.addCleanup(self.daemon.cleanup)
        self.client = Client(self.daemon)
        self.addCleanup(self.client.kill_all)
        self.attacker = Attacker(self.daemon)
        self.stopped = False

    def tearDown(self):
        if not self.stopped:
            self.stop_daemon()

    def stop_daemon(self):
        """SIGTERM: the daemon must exit 0 (not die of a signal, not hang)."""
        self.stopped = True
        code = self.daemon.stop()
        self.assertEqual(code, 0, f"memd stopped with {code}; log:\n{self.tail_of_log()}")

    def tail_of_log(self, lines=40):
        return "\n".join(self.daemon.log().splitlines()[-lines:])

    def assert_daemon_serves(self, region="honest-after"):
        """The daemon survived: its process runs and an honest client can fill
        and verify a region of its own."""
        self.assertTrue(self.daemon.alive(),
                        f"memd died with {self.daemon.exit_code()}; log:\n{self.tail_of_log()}")
        code, out = self.client.run(region, "fill", 99, 200, 48)
        self.assertEqual(code, 0, f"honest fill after the attack: {out}")
        code, out = self.client.run(region, "verify", 99, 200, 48)
        self.assertEqual(code, 0, f"honest verify after the attack: {out}")
