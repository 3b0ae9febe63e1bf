#!/usr/bin/env python3
"""Checks the files of deploy/ with the tools that will read them.

  check_deploy.py --source DIR --build DIR --memd PATH [--promtool PATH]
                  [--systemd-analyze PATH] [--cmake PATH] CHECK

CHECK is one of:
  prometheus-config  promtool check config (rule files resolved beside it), the
                     memd job, its scrape interval and the instance relabeling
  prometheus-rules   promtool check rules; every alert has `for`, a severity
                     and annotations naming labels, and tests that fire it and
                     that see it silent
  prometheus-tests   promtool test rules memd-alerts.test.yml
  systemd            systemd-analyze verify of memd.service and memd.socket,
                     ExecStart pointed at the built memd; the units' settings,
                     directories and socket agree with the example config
  package            deploy/debian/build-deb.sh builds the .deb: its control
                     fields, Depends, contents, conffile and scripts; with
                     MEMD_TEST_INSTALL_PACKAGE=1 as root, dpkg -i it, serve as
                     user memd to group memd only, then dpkg -r and -P
  config             memd accepts the example config and it sets every key
  kubernetes         the DaemonSet and ConfigMap: host paths, mounts, probes,
                     metrics port and annotations, the ConfigMap's memd.conf
                     accepted by memd, the example client pod
  install            cmake --install into a scratch prefix installs each file
  use-from-project   out of the source tree, examples/use-from-project builds
                     against the installed tree alone, with CMake
                     (find_package(memd)) and with pkg-config, and its C and
                     C++ programs run against the installed memd; libmemd.so
                     has its soname and exports the C API alone

A missing tool is a failure that says which package brings it.
"""
import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../support"))
from memd_daemon import MemdDaemon  # noqa: E402

try:
    import yaml
except ImportError:
    sys.exit("FAIL: python3 has no yaml module: install the Debian package python3-yaml (tools/setup.sh does)")

REQUIRED_ALERTS = [
    "MemdDown", "MemdRegionFragmented", "MemdRegionNearCapacity", "MemdDeadClientLeases",
    "MemdOrphanedSessions", "MemdRpcErrors", "MemdTelemetryDropped", "MemdLeaseLatencyHigh",
]
SEVERITIES = {"critical", "warning", "info"}
# promtool warns about the fleet's file_sd directory, which exists only on a
# Prometheus server; any other warning fails.
EXPECTED_WARNING = re.compile(r'WARNING: file "/etc/prometheus/memd-targets/\*\.yml" for file_sd')


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def tool(path, name, package):
    """The path of a tool CMake found, or a failure naming its package."""
    if not path or path.endswith("-NOTFOUND") or not os.access(path, os.X_OK):
        found = shutil.which(name)
        check(found is not None, f"{name} not found: install the Debian package {package} (tools/setup.sh does)")
        return found
    return path


def run(argv, cwd=None, env=None):
    """Runs argv; returns (exit status, stdout, stderr) and prints both."""
    print("$", " ".join(argv), flush=True)
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    sys.stdout.write(proc.stdout)
    sys.stdout.write(proc.stderr)
    return proc.returncode, proc.stdout, proc.stderr


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def parse_conf(text):
    """memd's `key = value` lines, '#' comments, as memd reads them."""
    conf = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        check("=" in line, f"line {n}: expected key = value: {line!r}")
        key, value = (part.strip() for part in line.split("=", 1))
        check(key not in conf, f"line {n}: {key} set twice")
        conf[key] = value
    return conf


def memd_print_config(args, conf_path):
    status, out, _ = run([args.memd, "--config", conf_path, "--print-config"])
    check(status == 0, f"memd refused {conf_path} (exit {status})")
    return parse_conf(out)


# --- Prometheus ---------------------------------------------------------

def prometheus_dir(args):
    return os.path.join(args.source, "deploy", "prometheus")


def check_prometheus_config(args):
    promtool = tool(args.promtool, "promtool", "prometheus")
    config = os.path.join(prometheus_dir(args), "prometheus.yml")
    status, out, err = run([promtool, "check", "config", config])
    check(status == 0, f"promtool check config failed (exit {status})")
    for line in (out + err).splitlines():
        check("WARNING" not in line or EXPECTED_WARNING.search(line), f"promtool warns: {line.strip()}")
    check("memd-alerts.yml" in out, "promtool did not load memd-alerts.yml through rule_files")

    c = load_yaml(config)
    check(c["global"]["scrape_interval"] == "15s", "global scrape_interval is not 15s")
    jobs = {j["job_name"]: j for j in c["scrape_configs"]}
    check("memd" in jobs, "no scrape job named memd")
    job = jobs["memd"]
    check(job.get("static_configs") and job.get("file_sd_configs"), "job memd needs static_configs and file_sd_configs")
    check_instance_relabel(job.get("relabel_configs", []))


def check_instance_relabel(rules):
    """The relabeling turns host:port into host, as Prometheus applies it."""
    for r in rules:
        if r.get("target_label") == "instance" and r.get("source_labels") == ["__address__"]:
            regex = re.compile(r["regex"].replace("$", ""))   # RE2 anchors the whole value
            for address, host in [("memd-01.example.net:9464", "memd-01.example.net"), ("10.0.0.7:9464", "10.0.0.7")]:
                m = regex.fullmatch(address)
                check(m is not None, f"instance relabeling does not match {address}")
                got = m.expand(r.get("replacement", "$1").replace("$", "\\"))
                check(got == host, f"instance relabeling makes {address} into {got}, not {host}")
            return
    raise Failure("no relabeling of __address__ into instance in job memd")


def alerts_and_groups(rules_path):
    doc = load_yaml(rules_path)
    groups = {g["name"]: g["rules"] for g in doc["groups"]}
    alerts = {r["alert"]: r for rules in groups.values() for r in rules if "alert" in r}
    return groups, alerts


def check_alert(name, rule):
    check("for" in rule, f"{name}: no `for`")
    severity = rule.get("labels", {}).get("severity")
    check(severity in SEVERITIES, f"{name}: severity {severity!r} is not one of {sorted(SEVERITIES)}")
    annotations = rule.get("annotations", {})
    for key in ("summary", "description"):
        check("$labels." in annotations.get(key, ""), f"{name}: annotation {key} missing or names no label")


def check_prometheus_rules(args):
    promtool = tool(args.promtool, "promtool", "prometheus")
    rules_path = os.path.join(prometheus_dir(args), "memd-alerts.yml")
    status, _, _ = run([promtool, "check", "rules", rules_path])
    check(status == 0, f"promtool check rules failed (exit {status})")

    groups, alerts = alerts_and_groups(rules_path)
    check("memd.rules" in groups, "no group memd.rules (recording rules)")
    for name in REQUIRED_ALERTS:
        check(name in alerts, f"alert {name} is missing")
    for name, rule in alerts.items():
        check_alert(name, rule)
    check_every_alert_tested(alerts, load_yaml(os.path.join(prometheus_dir(args), "memd-alerts.test.yml")))
    print(f"{len(alerts)} alerts: for, severity, annotations and tests present")


def check_every_alert_tested(alerts, tests):
    firing, silent = set(), set()
    for t in tests["tests"]:
        for a in t.get("alert_rule_test", []):
            (firing if a.get("exp_alerts") else silent).add(a["alertname"])
    for name in alerts:
        check(name in firing, f"{name}: no test in which it fires")
        check(name in silent, f"{name}: no test in which it must stay silent")


def check_prometheus_tests(args):
    promtool = tool(args.promtool, "promtool", "prometheus")
    status, _, _ = run([promtool, "test", "rules", "memd-alerts.test.yml"], cwd=prometheus_dir(args))
    check(status == 0, f"promtool test rules failed (exit {status})")


# --- systemd and the example config -------------------------------------

def unit_settings(path):
    """[Section] Key=Value lines of a unit, as {key: [values]}."""
    settings = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;[":
                continue
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def check_systemd(args):
    analyze = tool(args.systemd_analyze, "systemd-analyze", "systemd")
    unit_dir = os.path.join(args.source, "deploy", "systemd")
    unit = os.path.join(unit_dir, "memd.service")
    s = unit_settings(unit)
    expected = {"Type": "notify", "NotifyAccess": "main",
                "ExecStart": "/usr/local/bin/memd --config /etc/memd/memd.conf",
                "KillSignal": "SIGTERM", "Restart": "on-failure", "RuntimeDirectory": "memd",
                "RuntimeDirectoryPreserve": "yes", "StateDirectory": "memd", "ProtectSystem": "strict",
                "NoNewPrivileges": "yes", "User": "memd", "Group": "memd",
                "AmbientCapabilities": "CAP_CHOWN CAP_FOWNER CAP_DAC_OVERRIDE", "Also": "memd.socket"}
    for key, value in expected.items():
        check(s.get(key) == [value], f"memd.service: {key}={s.get(key)}, expected {value}")
    check("/dev/shm" in " ".join(s.get("ReadWritePaths", [])), "memd.service: /dev/shm is not in ReadWritePaths")
    sock = unit_settings(os.path.join(unit_dir, "memd.socket"))
    for key, value in {"SocketMode": "0660", "SocketGroup": "memd", "RemoveOnStop": "no",
                       "Service": "memd.service"}.items():
        check(sock.get(key) == [value], f"memd.socket: {key}={sock.get(key)}, expected {value}")

    conf = parse_conf(open(os.path.join(unit_dir, "memd.conf")).read())
    check(os.path.dirname(conf["socket"]) == "/run/memd", "memd.conf: socket is not in the unit's RuntimeDirectory")
    check(sock.get("ListenStream") == [conf["socket"]],
          f"memd.socket: ListenStream={sock.get('ListenStream')} is not memd.conf's socket {conf['socket']}")
    check(conf["socket-mode"] == sock["SocketMode"][0], "memd.conf's socket-mode differs from memd.socket's SocketMode")
    check(conf["data-dir"] == "/var/lib/memd", "memd.conf: data-dir is not the unit's StateDirectory")

    with tempfile.TemporaryDirectory(prefix="memd-unit-") as tmp:
        copies = []
        for name in ("memd.service", "memd.socket"):
            copy = os.path.join(tmp, name)
            text = open(os.path.join(unit_dir, name)).read()
            text = text.replace("ExecStart=/usr/local/bin/memd ", f"ExecStart={os.path.abspath(args.memd)} ")
            with open(copy, "w") as f:
                f.write(text)
            copies.append(copy)
        # --man=no: the man pages are installed with memd, not on this host.
        status, out, err = run([analyze, "verify", "--man=no"] + copies)
        # A container's systemd may complain about units of its own; only
        # lines about ours count. The memd user need not exist here.
        ours = [l for l in (out + err).splitlines()
                if any(c in l for c in copies) or "memd.service" in l or "memd.socket" in l]
        check(not ours, "systemd-analyze verify: " + "; ".join(ours))
        check(status == 0, f"systemd-analyze verify failed (exit {status})")


def check_config(args):
    path = os.path.join(args.source, "deploy", "systemd", "memd.conf")
    printed = memd_print_config(args, path)
    written = parse_conf(open(path).read())
    check(set(written) == set(printed),
          f"memd.conf keys differ from memd's: missing {sorted(set(printed) - set(written))}, "
          f"unknown {sorted(set(written) - set(printed))}")
    # Sizes print in bytes (1G: 1073741824); every other value as written.
    for key, value in written.items():
        if not key.endswith("-bytes"):
            check(printed[key] == value, f"memd.conf: {key} = {value}, memd reads {printed[key]}")
    print(f"memd.conf sets all {len(printed)} keys")


# --- Kubernetes ---------------------------------------------------------

def by_name(items):
    return {i["name"]: i for i in items or []}


def host_paths(pod_spec, container):
    """{mountPath: hostPath} of a container's hostPath volumes."""
    volumes = by_name(pod_spec.get("volumes"))
    paths = {}
    for m in container.get("volumeMounts", []):
        v = volumes.get(m["name"])
        check(v is not None, f"mount {m['name']} names no volume")
        if "hostPath" in v:
            paths[m["mountPath"]] = v["hostPath"]["path"]
    return paths


def example_client(path):
    """The example client pod, a commented YAML document in the file."""
    lines, inside = [], False
    for line in open(path):
        if line.startswith("# --- example client pod"):
            inside = True
        elif line.startswith("# --- end"):
            inside = False
        elif inside:
            lines.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
    check(lines, "no example client pod (between '# --- example client pod' and '# --- end')")
    return yaml.safe_load("".join(lines))


def check_daemonset(ds, conf):
    check("namespace" not in ds["metadata"], "the DaemonSet names a namespace")
    template = ds["spec"]["template"]
    annotations = template["metadata"].get("annotations", {})
    port = conf["metrics-address"].rsplit(":", 1)[1]
    want = {"prometheus.io/scrape": "true", "prometheus.io/port": port, "prometheus.io/path": "/metrics"}
    for key, value in want.items():
        check(annotations.get(key) == value, f"pod annotation {key} = {annotations.get(key)!r}, expected {value!r}")
    spec = template["spec"]
    check(spec.get("hostPID") is True, "the memd pod needs hostPID (clients are named by host pids)")
    (container,) = spec["containers"]
    check(conf["metrics-address"].startswith("0.0.0.0:"), "metrics-address must listen on 0.0.0.0 in a pod")
    ports = by_name(container.get("ports"))
    check("metrics" in ports and str(ports["metrics"]["containerPort"]) == port,
          f"no containerPort {port} named metrics")
    check(container.get("resources", {}).get("requests"), "no resource requests")
    mounts = host_paths(spec, container)
    wanted = {"/dev/shm": "/dev/shm", os.path.dirname(conf["socket"]): "/run/memd", conf["data-dir"]: "/var/lib/memd"}
    for mount, host in wanted.items():
        check(mounts.get(mount) == host, f"memd's {mount} is not the host's {host} (mounts: {mounts})")
    for probe in ("livenessProbe", "readinessProbe"):
        command = container.get(probe, {}).get("exec", {}).get("command", [])
        check(command[-1:] == ["health"] and "memdctl" in command[0], f"{probe} does not run memdctl health")
        check(conf["socket"] in command, f"{probe} does not name the socket {conf['socket']}")
    return mounts


def check_client(client, daemon_mounts, conf):
    spec = client["spec"]
    check(spec.get("hostPID") is True, "the example client needs hostPID")
    (container,) = spec["containers"]
    mounts = host_paths(spec, container)
    for mount, host in daemon_mounts.items():
        check(mounts.get(mount) == host, f"the example client does not mount the host's {host} at {mount}")
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    check(env.get("MEMD_SOCKET") == conf["socket"], f"the example client's MEMD_SOCKET is not {conf['socket']}")


def check_kubernetes(args):
    path = os.path.join(args.source, "deploy", "kubernetes", "memd-daemonset.yaml")
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    kinds = {d["kind"]: d for d in docs}
    check(set(kinds) == {"ConfigMap", "DaemonSet"}, f"documents {sorted(kinds)}, expected a ConfigMap and a DaemonSet")
    cm, ds = kinds["ConfigMap"], kinds["DaemonSet"]
    check("namespace" not in cm["metadata"], "the ConfigMap names a namespace")
    config_volume = [v for v in ds["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    check(config_volume and config_volume[0]["configMap"]["name"] == cm["metadata"]["name"],
          "the DaemonSet does not mount the ConfigMap")
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
        f.write(cm["data"]["memd.conf"])
        f.flush()
        conf = memd_print_config(args, f.name)
    mounts = check_daemonset(ds, conf)
    check_client(example_client(path), mounts, conf)


# --- cmake --install ----------------------------------------------------

INSTALLED = {
    "bin/memd": True, "bin/memdctl": True, "bin/memd-replay": True,
    "lib/libmemd-malloc.so": False, "lib/libmemd-daemon-link.so": False,
    "include/memd/memd.h": False, "include/memd/memd_region.h": False, "include/memd/memd_client.h": False,
    "include/memd/memd.hpp": False, "include/memd/vmalloc.h": False,
    "lib/libmemd.so.0": False, "lib/cmake/memd/memdConfig.cmake": False,
    "lib/cmake/memd/memdConfigVersion.cmake": False, "lib/cmake/memd/memdTargets.cmake": False,
    "lib/pkgconfig/memd.pc": False, "lib/pkgconfig/memd-vmalloc.pc": False,
    "lib/systemd/system/memd.service": False, "lib/systemd/system/memd.socket": False,
    "share/man/man8/memd.8": False, "share/man/man1/memdctl.1": False,
    "share/bash-completion/completions/memdctl": False, "etc/memd/memd.conf.example": False,
}


def check_install(args):
    cmake = tool(args.cmake, "cmake", "cmake")
    with tempfile.TemporaryDirectory(prefix="memd-install-") as prefix:
        status, _, _ = run([cmake, "--install", args.build, "--prefix", prefix])
        check(status == 0, f"cmake --install failed (exit {status})")
        for rel, executable in INSTALLED.items():
            path = os.path.join(prefix, rel)
            check(os.path.isfile(path), f"{rel} was not installed")
            check(not executable or os.access(path, os.X_OK), f"{rel} is not executable")
        unit = unit_settings(os.path.join(prefix, "lib/systemd/system/memd.service"))
        check(unit["ExecStart"] == [f"{prefix}/bin/memd --config /etc/memd/memd.conf"],
              f"installed unit: ExecStart={unit['ExecStart']}, expected the installed memd")
        # The installed units as installed: their Documentation= pages exist
        # (man finds them through MANPATH), and systemd-analyze says nothing.
        if args.systemd_analyze:
            units = [os.path.join(prefix, "lib/systemd/system", u) for u in ("memd.service", "memd.socket")]
            status, out, err = run([args.systemd_analyze, "verify"] + units,
                                   env=dict(os.environ, MANPATH=os.path.join(prefix, "share/man")))
            ours = [l for l in (out + err).splitlines() if "memd" in l]
            check(status == 0 and not ours, f"systemd-analyze verify of the installed units: {'; '.join(ours)}")
        example = open(os.path.join(prefix, "etc/memd/memd.conf.example")).read()
        check(example == open(os.path.join(args.source, "deploy/systemd/memd.conf")).read(),
              "etc/memd/memd.conf.example differs from deploy/systemd/memd.conf")
        status, out, _ = run([os.path.join(prefix, "bin/memd"), "--version"])
        check(status == 0 and out.startswith("memd "), "the installed memd does not run")
        # The installed memdctl replays with the installed memd-replay and shim
        # (not in a sanitizer build: its memd-replay cannot preload a malloc).
        if args.sanitizer:
            return
        trace = os.path.join(prefix, "t.trace")
        with open(trace, "w") as f:
            f.write("0x0:0xa0:4:(process):best:t.c,4:1:0:\n0xa0:0x0:4:(process):best:t.c,5:1:1:\n")
        status, out, err = run([os.path.join(prefix, "bin/memdctl"), "replay", trace, "--allocators", "glibc",
                                "--method", "best", "--rounds", "1"])
        check(status == 0 and re.search(r"^memd-best\s+2\s", out, re.M) is not None,
              f"the installed memdctl replay failed (exit {status}): {out} {err}")


# --- the Debian package -------------------------------------------------

PACKAGED = [
    "etc/memd/memd.conf", "usr/bin/memd", "usr/bin/memdctl", "usr/bin/memd-replay",
    "usr/lib/libmemd.so.0", "usr/lib/libmemd.so", "usr/lib/libmemd-malloc.so", "usr/lib/libmemd-daemon-link.so",
    "usr/include/memd/memd.h", "usr/include/memd/memd_region.h", "usr/include/memd/memd_client.h",
    "usr/include/memd/memd.hpp", "usr/include/memd/vmalloc.h",
    "usr/lib/cmake/memd/memdConfig.cmake", "usr/lib/pkgconfig/memd.pc", "usr/lib/pkgconfig/memd-vmalloc.pc",
    "usr/lib/systemd/system/memd.service", "usr/lib/systemd/system/memd.socket",
    "usr/share/man/man8/memd.8.gz", "usr/share/man/man1/memdctl.1.gz",
    "usr/share/bash-completion/completions/memdctl",
]
CAPS = "chown,fowner,dac_override"


def check_package(args):
    if args.sanitizer:
        print("skipped: a sanitizer build is not packaged")
        return
    dpkg_deb = tool(None, "dpkg-deb", "dpkg")
    with tempfile.TemporaryDirectory(prefix="memd-deb-") as scratch:
        out = run_ok([os.path.join(args.source, "deploy/debian/build-deb.sh"), args.build, scratch], "build-deb.sh")
        deb = out.strip().splitlines()[-1]
        check(os.path.basename(deb) == f"memd_{args.version}_{run_ok(['dpkg', '--print-architecture'], 'dpkg').strip()}.deb",
              f"the package is named {os.path.basename(deb)}")
        control = {}
        for line in run_ok([dpkg_deb, "--field", deb], "dpkg-deb --field").splitlines():
            if line and not line.startswith(" "):
                key, _, value = line.partition(": ")
                control[key] = value
        check(control.get("Package") == "memd" and control.get("Version") == args.version,
              f"control: Package {control.get('Package')}, Version {control.get('Version')}")
        depends = control.get("Depends", "")
        for needed in ("libgrpc++", "libprotobuf", "libpmem1", "adduser", "init-system-helpers"):
            check(needed in depends, f"control: Depends does not name {needed}: {depends}")
        # "mode owner size date time ./path[ -> target]"
        contents = {line.split(None, 5)[5].split(" -> ")[0].lstrip("./") for line in
                    run_ok([dpkg_deb, "--contents", deb], "dpkg-deb --contents").splitlines()}
        for path in PACKAGED:
            check(path in contents, f"the package has no {path}")
        check(not any(p.startswith("usr/etc") or "/build/" in p for p in contents), "the package has stray paths")
        control_dir = os.path.join(scratch, "control")
        run_ok([dpkg_deb, "--control", deb, control_dir], "dpkg-deb --control")
        check(open(os.path.join(control_dir, "conffiles")).read().split() == ["/etc/memd/memd.conf"],
              "conffiles is not /etc/memd/memd.conf")
        for script in ("postinst", "prerm", "postrm"):
            run_ok(["sh", "-n", os.path.join(control_dir, script)], f"sh -n {script}")
        print(f"package: {len(contents)} paths, Depends {depends}")
        # Installing it changes the machine (a user, files in /usr): only
        # where asked to (CI's throwaway machines), and as root.
        if os.environ.get("MEMD_TEST_INSTALL_PACKAGE") != "1" or os.geteuid() != 0:
            print("not installed: set MEMD_TEST_INSTALL_PACKAGE=1 (as root, on a machine to spare) to install it")
            return
        check_package_installed(args, deb, scratch)


def check_package_installed(args, deb, scratch):
    check(subprocess.run(["dpkg-query", "-W", "memd"], capture_output=True).returncode != 0,
          "a memd package is installed already; this check installs and purges its own")
    user_existed = subprocess.run(["getent", "passwd", "memd"], capture_output=True).returncode == 0
    run_ok(["dpkg", "-i", deb], "dpkg -i")
    try:
        entry = run_ok(["getent", "passwd", "memd"], "getent passwd memd").strip().split(":")
        check(entry[5] == "/var/lib/memd" and entry[6] == "/usr/sbin/nologin" and int(entry[2]) < 1000,
              f"the memd user is not a system user without a login: {entry}")
        group = run_ok(["getent", "group", "memd"], "getent group memd").strip().split(":")
        check(entry[3] == group[2], "the memd user's group is not memd")
        check(os.path.isfile("/etc/memd/memd.conf"), "/etc/memd/memd.conf was not installed")
        check(run_ok(["/usr/bin/memd", "--version"], "the installed memd").startswith(f"memd {args.version} "),
              "the installed memd reports another version")
        check(run_ok(["pkg-config", "--modversion", "memd"], "pkg-config").strip() == args.version,
              "pkg-config does not find the installed memd.pc")
        check(run_ok(["man", "-w", "memd"], "man -w memd").strip().endswith("man8/memd.8.gz"), "man cannot find memd(8)")
        run_ok(["systemd-analyze", "verify", "/usr/lib/systemd/system/memd.service",
                "/usr/lib/systemd/system/memd.socket"], "systemd-analyze verify of the installed units")

        # The service as its unit runs it: user memd with the unit's three
        # capabilities, the package's config, the socket's mode and group
        # (directories of its own, as RuntimeDirectory= and StateDirectory= make).
        run_dir = os.path.join(scratch, "run")
        os.mkdir(run_dir)
        os.chown(run_dir, int(entry[2]), int(entry[3]))
        os.chmod(run_dir, 0o755)
        os.chmod(scratch, 0o755)
        setpriv = ["setpriv", "--reuid=memd", "--regid=memd", "--init-groups",
                   f"--inh-caps=-all,+{CAPS.replace(',', ',+')}", f"--ambient-caps=+{CAPS.replace(',', ',+')}"]
        memd = MemdDaemon("/usr/bin/memd", run_dir, namespace=f"pkg{os.getpid()}", wrapper=setpriv,
                          args=["--config", "/etc/memd/memd.conf"])
        with started(memd, "the packaged memd"):
            sock = memd.socket
            st = os.stat(sock)
            check(st.st_mode & 0o777 == 0o660 and st.st_gid == int(group[2]),
                  f"the socket is mode {oct(st.st_mode & 0o777)}, gid {st.st_gid}: not 0660 group memd")
            nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
            p = subprocess.run(nobody + ["/usr/bin/memdctl", "--socket", sock, "health"], capture_output=True, text=True)
            check(p.returncode == 3 and "permission denied" in p.stderr,
                  f"a user outside group memd reached memd (exit {p.returncode}): {p.stderr}")
            member = ["setpriv", "--reuid=nobody", "--regid=nogroup", f"--groups={group[2]}"]
            p = subprocess.run(member + ["/usr/bin/memdctl", "--socket", sock, "health"], capture_output=True, text=True)
            check(p.returncode == 0 and "SERVING" in p.stdout,
                  f"a member of group memd could not reach memd (exit {p.returncode}): {p.stdout} {p.stderr}")

        run_ok(["dpkg", "-r", "memd"], "dpkg -r")
        check(not os.path.exists("/usr/bin/memd") and os.path.isfile("/etc/memd/memd.conf"),
              "dpkg -r did not remove the programs, or removed the config")
        run_ok(["dpkg", "-P", "memd"], "dpkg -P")
        check(not os.path.exists("/etc/memd/memd.conf"), "dpkg -P left /etc/memd/memd.conf")
        check(subprocess.run(["getent", "passwd", "memd"], capture_output=True).returncode == 0,
              "purge removed the memd user (region files may still belong to it)")
    finally:
        subprocess.run(["dpkg", "-P", "memd"], capture_output=True)
        if not user_existed:  # leave the machine as it was found
            subprocess.run(["deluser", "--quiet", "--system", "memd"], capture_output=True)
            subprocess.run(["delgroup", "--quiet", "--system", "memd"], capture_output=True)
    print("package: installed, served as user memd to group memd only, removed and purged")


def run_ok(argv, what, env=None):
    """Runs argv (with env added to the environment); fails naming `what` unless it exits 0. Its stdout."""
    print("$", " ".join(argv), flush=True)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})
    sys.stdout.write(proc.stdout)
    sys.stdout.write(proc.stderr)
    check(proc.returncode == 0, f"{what} failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return proc.stdout


@contextlib.contextmanager
def started(daemon, what):
    """The daemon started (a failed start fails the check, with its log), and
    stopped and its shm objects removed after."""
    try:
        daemon.start()
    except RuntimeError as e:
        raise Failure(f"{what} did not start: {e}")
    try:
        yield daemon
    finally:
        daemon.close()


def check_python_example(args, scratch, prefix, sock):
    """README's Python example, as a user runs it: the package pip-installed
    from a copy of python/ into a virtual environment (Debian's numpy; nothing
    from the network), libmemd.so.0 from the installed prefix only."""
    venv = os.path.join(scratch, "venv")
    run_ok([sys.executable, "-m", "venv", "--system-site-packages", venv], "python3 -m venv")
    source = os.path.join(scratch, "python")
    shutil.copytree(os.path.join(args.source, "python"), source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    python = os.path.join(venv, "bin/python")
    run_ok([python, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--no-index", source],
           "pip install")
    readme = open(os.path.join(args.source, "README.md")).read()
    code = re.search(r"```python\n(.*?)```", readme[readme.index("\n## Python"):], re.S)
    check(code is not None, "README's Python section has no example")
    example = os.path.join(scratch, "example.py")
    with open(example, "w") as f:
        f.write(code.group(1))
    env = {k: v for k, v in os.environ.items() if k not in ("MEMD_LIBRARY", "PYTHONPATH")}
    env.update(MEMD_SOCKET=sock, LD_LIBRARY_PATH=os.path.join(prefix, "lib"))
    print("$", python, example, flush=True)
    proc = subprocess.run([python, example], capture_output=True, text=True, timeout=300, env=env, cwd=scratch)
    check(proc.returncode == 0 and proc.stdout.strip() == "[1000000.0, 1000000.0, 1000000.0, 1000000.0]",
          f"README's Python example (exit {proc.returncode}): {proc.stdout} {proc.stderr[-800:]}")


def check_use_from_project(args):
    if args.sanitizer:
        # A sanitizer build's libmemd.so needs its runtime loaded first,
        # which a program of the user's does not do.
        print("skipped: a sanitizer build's library is not for other programs")
        return
    cmake = tool(args.cmake, "cmake", "cmake")
    pkg_config = tool(None, "pkg-config", "pkg-config")
    with tempfile.TemporaryDirectory(prefix="memd-use-") as scratch:
        prefix = os.path.join(scratch, "prefix")
        run_ok([cmake, "--install", args.build, "--prefix", prefix], "cmake --install")
        lib = os.path.join(prefix, "lib/libmemd.so")
        dynamic = run_ok(["readelf", "-d", lib], "readelf")
        check("Library soname: [libmemd.so.0]" in dynamic, "libmemd.so has no soname libmemd.so.0")
        # "name@@MEMD_0": the C API, in the version node of the first release;
        # "name@@MEMD_0.1": the Vmalloc API (vmalloc.h), in the next one.
        symbols = [line.split()[-1] for line in run_ok(["nm", "-D", "--defined-only", lib], "nm").splitlines()]
        nodes = {"MEMD_0", "MEMD_0.1"}
        versioned = [s.split("@@") for s in symbols if s not in nodes]
        check(all(len(v) == 2 and v[1] in nodes for v in versioned), f"unversioned symbols: {symbols[:10]}")
        exported = {name: node for name, node in versioned}
        check(all(n in exported for n in ("memd_connect", "memd_region_alloc", "memd_alloc")),
              "libmemd.so does not export the C API")
        header = open(os.path.join(args.source, "client/vmalloc.h")).read()
        vm_api = set(re.findall(r"^[A-Za-z_][\w\s*]*?\b(vm\w+)\(", header, re.M)) | \
            set(re.findall(r"^extern \w+\* (Vm\w+);", header, re.M))
        check(len(vm_api) > 30 and vm_api <= set(exported), f"libmemd.so lacks {sorted(vm_api - set(exported))}")
        others = [name for name, node in exported.items()
                  if not (name.startswith("memd_") and node == "MEMD_0") and not (name in vm_api and node == "MEMD_0.1")]
        check(not others, f"libmemd.so exports more than the C and Vmalloc APIs: {others[:10]}")
        # Loaded with dlopen (Python's ctypes), its initial-exec TLS comes from
        # glibc's static surplus, of which 512 bytes are promised: it must fit
        # there, and load with the surplus cut down to that promise.
        tls = re.search(r"^\s*TLS\s+(\S+\s+){4}(0x[0-9a-f]+)", run_ok(["readelf", "-lW", lib], "readelf -l"), re.M)
        check(tls is None or int(tls.group(2), 16) <= 512, f"libmemd.so has {int(tls.group(2), 16)} bytes of TLS")
        run_ok([sys.executable, "-c", f"import ctypes; ctypes.CDLL({lib!r}).memd_version"], "dlopen of libmemd.so",
               env={"GLIBC_TUNABLES": "glibc.rtld.nns=1:glibc.rtld.optional_static_tls=512"})

        # The user's project, out of the source tree.
        project = os.path.join(scratch, "project")
        shutil.copytree(os.path.join(args.source, "examples/use-from-project"), project)
        with_cmake = os.path.join(scratch, "with-cmake")
        run_ok([cmake, "-S", project, "-B", with_cmake, f"-DCMAKE_PREFIX_PATH={prefix}"], "cmake configure")
        run_ok([cmake, "--build", with_cmake], "cmake --build")
        pc = {"PKG_CONFIG_PATH": os.path.join(prefix, "lib/pkgconfig")}
        flags = run_ok([pkg_config, "--cflags", "--libs", "memd"], "pkg-config", env=pc).split()
        check(run_ok([pkg_config, "--modversion", "memd"], "pkg-config", env=pc).strip() == args.version,
              "memd.pc has another version")
        with_pc = os.path.join(scratch, "with-pkg-config")
        os.mkdir(with_pc)
        run_ok(["cc", "-std=c11", "-Wall", "-Werror", os.path.join(project, "hello.c"), "-o",
                os.path.join(with_pc, "hello_c"), *flags], "cc with pkg-config")
        run_ok(["c++", "-std=c++17", "-Wall", "-Werror", os.path.join(project, "hello.cc"), "-o",
                os.path.join(with_pc, "hello_cxx"), *flags], "c++ with pkg-config")
        vm_flags = run_ok([pkg_config, "--cflags", "--libs", "memd-vmalloc"], "pkg-config memd-vmalloc", env=pc).split()
        run_ok(["cc", "-std=c11", "-Wall", "-Werror", os.path.join(project, "hello_vmalloc.c"), "-o",
                os.path.join(with_pc, "hello_vmalloc"), *vm_flags], "cc with pkg-config memd-vmalloc")
        # The Vmalloc program needs no daemon; its bad free is reported on stderr.
        for build in (with_cmake, with_pc):
            out = run_ok([os.path.join(build, "hello_vmalloc")], f"{build}/hello_vmalloc",
                         env={"LD_LIBRARY_PATH": os.path.join(prefix, "lib")})
            check(out.strip() == "rounds=100 pool=1000 badaddr=1 ok", f"{build}/hello_vmalloc: {out!r}")

        with started(MemdDaemon(os.path.join(prefix, "bin/memd"), scratch, namespace=f"use{os.getpid()}"),
                     "the installed memd") as daemon:
            sock = daemon.socket
            env = {"MEMD_SOCKET": sock, "LD_LIBRARY_PATH": os.path.join(prefix, "lib")}
            for n, build in enumerate([with_cmake, with_pc], start=1):
                out = run_ok([os.path.join(build, "hello_c"), "hello"], f"{build}/hello_c", env=env)
                check(re.search(rf"^count={n} notes={n} version={re.escape(args.version)}$", out, re.M),
                      f"hello_c run {n}: {out!r}, expected count={n} notes={n}")
                out = run_ok([os.path.join(build, "hello_cxx"), "scratch"], f"{build}/hello_cxx", env=env)
                check(f"allocated=1000 freed=1000 runs={n} check=ok" in out, f"hello_cxx run {n}: {out!r}")
            check_python_example(args, scratch, prefix, sock)
            # A program of the user's without a daemon gets an error, not a crash.
            missing = subprocess.run([os.path.join(with_cmake, "hello_c"), "hello"], capture_output=True, text=True,
                                     timeout=120, env={**os.environ, **env,
                                                       "MEMD_SOCKET": os.path.join(scratch, "none.sock")})
            check(missing.returncode == 1 and "memd_connect" in missing.stderr,
                  f"without a daemon: exit {missing.returncode}, {missing.stderr!r}")


CHECKS = {
    "prometheus-config": check_prometheus_config,
    "prometheus-rules": check_prometheus_rules,
    "prometheus-tests": check_prometheus_tests,
    "systemd": check_systemd,
    "package": check_package,
    "config": check_config,
    "kubernetes": check_kubernetes,
    "install": check_install,
    "use-from-project": check_use_from_project,
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", required=True)
    p.add_argument("--build", required=True)
    p.add_argument("--memd", required=True)
    p.add_argument("--promtool")
    p.add_argument("--systemd-analyze")
    p.add_argument("--cmake")
    p.add_argument("--version", default="", help="the project's version (what memd.pc must say)")
    p.add_argument("--sanitizer", action="store_true", help="a sanitizer build (no preloaded malloc)")
    p.add_argument("check", choices=sorted(CHECKS))
    args = p.parse_args()
    try:
        CHECKS[args.check](args)
    except Failure as e:
        print(f"FAIL: {args.check}: {e}", file=sys.stderr)
        return 1
    print(f"ok: {args.check}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
