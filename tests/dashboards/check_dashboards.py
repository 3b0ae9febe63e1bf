#!/usr/bin/env python3
"""Checks the Grafana dashboards in dashboards/ against memd's metric contract.

  check_dashboards.py static --dashboards DIR --metrics-doc docs/metrics.md --readme DIR/README.md
                             [--promtool BIN]
      Every dashboard parses and follows the schema we rely on (schemaVersion,
      the datasource and query variables, unique panel ids, a laid-out grid,
      a unit and an expr everywhere); every metric an expression or variable
      names is documented in docs/metrics.md and every label it filters,
      groups or labels a legend by is one that metric carries; every Grafana
      variable is defined and used with the matcher its selection mode needs
      (`=` single, `=~` multi); the README carries the generated panel table
      (every panel title, the metrics behind it). With --promtool, every
      expression also goes through Prometheus's own parser.

  check_dashboards.py live --dashboards DIR --memd BIN --memdctl BIN --test-client BIN
                           --shim LIB --prometheus BIN [--python BIN]
      Starts a real memd with its metrics endpoint, real clients (test_client
      holding and churning in regions, a Python program under the malloc
      shim reporting its process heap and its call-chain pools, another in
      the shim's daemon mode), and a real Prometheus scraping memd every
      second; then evaluates every panel expression (range or instant, as
      the panel asks) and every
      variable query through Prometheus's HTTP API, and fails on any error or
      empty result, naming the dashboard, panel and expression.

  check_dashboards.py table --dashboards DIR
      Prints the README's panel tables (which metric feeds which panel).
"""
import argparse
import ctypes
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

PANEL_TYPES = {"row", "timeseries", "stat", "table", "bargauge", "gauge"}
MIN_SCHEMA_VERSION = 39
DATASOURCE = "${datasource}"
# Variables every dashboard defines; and those of each dashboard.
COMMON_VARIABLES = ["datasource", "instance"]
DASHBOARD_VARIABLES = {
    "memd-fleet-overview": ["datasource", "instance"],
    "memd-region-detail": ["datasource", "instance", "region"],
    "memd-client-detail": ["datasource", "instance", "client", "region"],
    "memd-allocation-sites": ["datasource", "instance", "region"],
}
FIXED_VARIABLE_QUERIES = {
    "instance": "label_values(memd_build_info, instance)",
    "client": 'label_values(memd_client_info{instance=~"$instance"}, client)',
}
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"instance", "job"}
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s", "__range_ms"}

# ------------------------------------------------------------------ PromQL

AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
                "quantile"}
FUNCTIONS = AGGREGATIONS | {
    "abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "day_of_month",
    "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp", "floor", "histogram_quantile",
    "holt_winters", "hour", "idelta", "increase", "irate", "label_join", "label_replace", "ln", "log2", "log10",
    "minute", "month", "predict_linear", "rate", "resets", "round", "scalar", "sgn", "sort", "sort_desc", "sqrt",
    "time", "timestamp", "vector", "year", "avg_over_time", "min_over_time", "max_over_time", "sum_over_time",
    "count_over_time", "quantile_over_time", "stddev_over_time", "stdvar_over_time", "last_over_time",
    "present_over_time"}
GROUPING_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
OTHER_KEYWORDS = {"bool", "and", "or", "unless", "offset", "atan2"}
TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<var>\$\{[^}]*\}|\$\w+|\[\[\w+\]\])
  | (?P<number>\d[\w.]*)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^<>=(),{}])
""", re.VERBOSE)


class PromQLError(Exception):
    pass


def tokenize(expr):
    tokens, pos = [], 0
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m:
            raise PromQLError("cannot read %r at %d" % (expr[pos:pos + 20], pos))
        pos = m.end()
        if m.lastgroup != "space":
            tokens.append((m.lastgroup, m.group()))
    return tokens


def parse_matchers(tokens, i):
    """tokens[i] is '{'; returns ([(label, op, value)], index after '}')."""
    matchers = []
    i += 1
    while i < len(tokens) and tokens[i][1] != "}":
        if (i + 2 >= len(tokens) or tokens[i][0] != "ident" or tokens[i + 1][1] not in ("=", "!=", "=~", "!~")
                or tokens[i + 2][0] != "string"):
            raise PromQLError("bad label matcher near %r" % " ".join(t[1] for t in tokens[i:i + 3]))
        matchers.append((tokens[i][1], tokens[i + 1][1], tokens[i + 2][1][1:-1]))
        i += 3
        if i < len(tokens) and tokens[i][1] == ",":
            i += 1
    if i >= len(tokens):
        raise PromQLError("unclosed '{'")
    return matchers, i + 1


def parse_promql(expr):
    """The parts of an expression the checks need: selectors [(metric, matchers)],
    grouping labels, functions called. Raises PromQLError on what it cannot read."""
    tokens = tokenize(expr)
    selectors, grouping, functions = [], set(), set()
    depth, i = 0, 0
    while i < len(tokens):
        kind, text = tokens[i]
        nxt = tokens[i + 1][1] if i + 1 < len(tokens) else None
        if kind == "ident" and text in GROUPING_KEYWORDS:
            i += 1
            if nxt == "(":
                i += 1
                while i < len(tokens) and tokens[i][1] != ")":
                    if tokens[i][0] == "ident":
                        grouping.add(tokens[i][1])
                    elif tokens[i][1] != ",":
                        raise PromQLError("bad label list after %s" % text)
                    i += 1
                i += 1
            continue
        if kind == "ident" and text in OTHER_KEYWORDS:
            i += 1
            continue
        if kind == "ident" and text in AGGREGATIONS and nxt in ("by", "without"):
            functions.add(text)  # sum by (label) (...)
            i += 1
            continue
        if kind == "ident" and nxt == "(":
            if text not in FUNCTIONS:
                raise PromQLError("unknown function %s()" % text)
            functions.add(text)
            i += 1
            continue
        if kind == "ident":
            matchers = []
            i += 1
            if nxt == "{":
                matchers, i = parse_matchers(tokens, i)
            selectors.append((text, matchers))
            continue
        if text == "{":
            raise PromQLError("a selector without a metric name")
        if text == "(":
            depth += 1
        elif text == ")":
            depth -= 1
            if depth < 0:
                raise PromQLError("unbalanced ')'")
        i += 1
    if depth != 0:
        raise PromQLError("unbalanced '('")
    return selectors, grouping, functions


LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<selector>.*\S)\s*,\s*)?(?P<label>\w+)\s*\)\s*$", re.S)
QUERY_RESULT = re.compile(r"^\s*query_result\((?P<expr>.*)\)\s*$", re.S)


def legend_labels(legend):
    return set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend or ""))


def variables_in(text):
    names = set()
    for m in re.finditer(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]", text):
        names.add(m.group(1) or m.group(2) or m.group(3))
    return names


# ------------------------------------------------------------- dashboards

def load_dashboards(directory):
    """[(file name, parsed JSON or the error)], sorted by file name."""
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        try:
            with open(path) as f:
                out.append((os.path.basename(path), json.load(f)))
        except (OSError, ValueError) as e:
            out.append((os.path.basename(path), e))
    return out


def all_panels(dashboard):
    """Every panel, with rows' nested panels (collapsed rows keep theirs inside)."""
    for p in dashboard.get("panels", []):
        yield p
        for q in p.get("panels", []) or []:
            yield q


def query_panels(dashboard):
    return [p for p in all_panels(dashboard) if p.get("type") != "row"]


def variable_query(v):
    q = v.get("query")
    if isinstance(q, dict):
        return q.get("query", "")
    return q or ""


def is_multi(v):
    return bool(v.get("multi")) or bool(v.get("includeAll"))


# ------------------------------------------------------------ metrics doc

def parse_metrics_doc(path):
    """{metric: set of its labels} from the tables of docs/metrics.md, and the
    label names it documents (its Labels table and the metrics' own labels).
    A histogram brings its _bucket (with le), _sum and _count series."""
    metrics, label_names = {}, set()
    section, section_labels = "", set()
    with open(path) as f:
        for line in f:
            if line.startswith("## "):
                section = line[3:].strip()
                heading = re.sub(r"(and )?`\w+` where stated", "", section)
                section_labels = set(re.findall(r"`(\w+)`", heading))
                continue
            if not re.match(r"\|\s*`", line):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if section == "Labels":
                label_names |= set(re.findall(r"`(\w+)`", cells[0]))
                continue
            m = re.match(r"`(\w+)(?:\{([^}]*)\})?`$", cells[0])
            if not m or len(cells) < 2:
                continue
            labels = set(section_labels)
            if m.group(2):
                labels |= {l.strip() for l in m.group(2).split(",")}
            name = m.group(1)
            if cells[1] == "histogram":
                metrics[name + "_bucket"] = labels | {"le"}
                metrics[name + "_sum"] = labels
                metrics[name + "_count"] = labels
            else:
                metrics[name] = labels
    for labels in metrics.values():
        label_names |= labels
    return metrics, label_names


# ------------------------------------------------------------------ static

class Report:
    def __init__(self):
        self.errors = []

    def fail(self, where, message):
        self.errors.append("%s: %s" % (where, message))


def check_expr(report, where, expr, legend, metrics, variables, label_names):
    """One PromQL expression (a panel target or a variable's selector)."""
    try:
        selectors, grouping, _ = parse_promql(expr)
    except PromQLError as e:
        report.fail(where, "%s in %s" % (e, expr))
        return
    if not selectors:
        report.fail(where, "no metric in %s" % expr)
    carried = set(TARGET_LABELS)
    for name, matchers in selectors:
        if name not in metrics:
            report.fail(where, "metric %s is not documented in docs/metrics.md" % name)
            continue
        carried |= metrics[name]
        for label, op, value in matchers:
            if label not in metrics[name] | TARGET_LABELS:
                report.fail(where, "%s has no label %s" % (name, label))
            for var in variables_in(value):
                v = variables.get(var)
                if v is None:
                    continue  # reported below
                if is_multi(v) and op in ("=", "!="):
                    report.fail(where, "multi-value $%s needs =~ or !~, not %s" % (var, op))
                if not is_multi(v) and op in ("=~", "!~"):
                    report.fail(where, "single-value $%s needs = (Grafana does not regex-escape it), not %s" %
                                (var, op))
    for label in sorted((grouping | legend_labels(legend)) - carried):
        report.fail(where, "label %s is carried by no metric of %s" % (label, expr))
    for label in sorted((grouping | legend_labels(legend)) - label_names - TARGET_LABELS - {"le"}):
        report.fail(where, "label %s is not documented in docs/metrics.md" % label)
    for var in sorted(variables_in(expr) - set(variables) - GRAFANA_BUILTINS):
        report.fail(where, "undefined variable $%s" % var)


def check_variables(report, name, dashboard, metrics, label_names):
    templating = dashboard.get("templating", {}).get("list", [])
    names = [v.get("name") for v in templating]
    expected = DASHBOARD_VARIABLES.get(name[:-5], COMMON_VARIABLES)
    if names != expected:
        report.fail(name, "variables %s, expected %s" % (names, expected))
    defined = {}
    for v in templating:
        where = "%s: variable $%s" % (name, v.get("name"))
        if v.get("name") == "datasource":
            if v.get("type") != "datasource" or v.get("query") != "prometheus":
                report.fail(where, "must be of type datasource with query prometheus")
        else:
            query = variable_query(v)
            if v.get("type") != "query":
                report.fail(where, "must be a query variable")
            if v.get("datasource", {}).get("uid") != DATASOURCE:
                report.fail(where, "datasource must be %s" % DATASOURCE)
            fixed = FIXED_VARIABLE_QUERIES.get(v.get("name"))
            if fixed is not None and query != fixed:
                report.fail(where, "query %r, expected %r" % (query, fixed))
            if v.get("definition") != query:
                report.fail(where, "definition differs from the query")
            m = LABEL_VALUES.match(query)
            if not m or not m.group("selector"):
                report.fail(where, "query must be label_values(selector, label): %r" % query)
            else:
                check_expr(report, where, m.group("selector"), "{{%s}}" % m.group("label"), metrics, defined,
                           label_names)
        defined[v.get("name")] = v
    return defined


def overlaps(a, b):
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"]
            and b["y"] < a["y"] + a["h"])


def check_panels(report, name, dashboard, metrics, variables, label_names):
    ids, titles, placed = set(), set(), []
    for p in all_panels(dashboard):
        title = p.get("title", "")
        where = "%s: panel %r" % (name, title)
        if not title:
            report.fail(where, "no title")
        if title in titles:
            report.fail(where, "title used twice")
        titles.add(title)
        if not isinstance(p.get("id"), int) or p["id"] in ids:
            report.fail(where, "id %r missing or not unique" % p.get("id"))
        ids.add(p.get("id"))
        if p.get("type") not in PANEL_TYPES:
            report.fail(where, "type %r" % p.get("type"))
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in "xywh") or g["x"] < 0 or g["w"] < 1 or g["x"] + g["w"] > 24:
            report.fail(where, "gridPos %r" % g)
        else:
            for other_title, other in placed:
                if overlaps(g, other):
                    report.fail(where, "overlaps %r" % other_title)
            placed.append((title, g))
        if p.get("type") == "row":
            continue
        if p.get("datasource", {}).get("uid") != DATASOURCE:
            report.fail(where, "datasource must be %s" % DATASOURCE)
        if not p.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            report.fail(where, "no unit")
        targets = p.get("targets") or []
        if not targets:
            report.fail(where, "no targets")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs):
            report.fail(where, "refIds not unique: %s" % refs)
        for t in targets:
            tw = "%s target %s" % (where, t.get("refId"))
            if not t.get("expr"):
                report.fail(tw, "no expr")
                continue
            if t.get("datasource", {}).get("uid") != DATASOURCE:
                report.fail(tw, "datasource must be %s" % DATASOURCE)
            if "rate(" in t["expr"] and "$__rate_interval" not in t["expr"]:
                report.fail(tw, "rate() without $__rate_interval")
            check_expr(report, tw, t["expr"], t.get("legendFormat"), metrics, variables, label_names)


def panel_metrics(panel):
    names = []
    for t in panel.get("targets") or []:
        try:
            for metric, _ in parse_promql(t.get("expr", ""))[0]:
                if metric not in names:
                    names.append(metric)
        except PromQLError:
            pass
    return names


def readme_tables(dashboards):
    """The README's tables, one per dashboard: row, panel, type, metrics."""
    out = []
    for name, d in dashboards:
        out.append("### %s\n" % d["title"])
        out.append("`%s`, uid `%s`\n" % (name, d["uid"]))
        out.append("| row | panel | type | metrics |")
        out.append("|---|---|---|---|")
        row = ""
        for p in all_panels(d):
            if p.get("type") == "row":
                row = p["title"]
                continue
            metrics = ", ".join("`%s`" % m for m in panel_metrics(p))
            out.append("| %s | %s | %s | %s |" % (row, p["title"].replace("|", "\\|"), p["type"], metrics))
        out.append("")
    return "\n".join(out)


def check_with_promtool(report, promtool, dashboards, work):
    """Prometheus's own parser over every expression (as recording rules),
    the variables set to a value of the right kind."""
    values = dict(BUILTIN_VALUES)
    rules = []
    for name, d in dashboards:
        for v in d.get("templating", {}).get("list", []):
            values[v.get("name")] = ".*" if is_multi(v) else "x"
        for p in query_panels(d):
            for t in p.get("targets") or []:
                if t.get("expr"):
                    rules.append((name, p.get("title"), t.get("refId"), substitute(t["expr"], values)))
    path = os.path.join(work, "rules.yml")
    with open(path, "w") as f:
        f.write("groups:\n  - name: dashboards\n    rules:\n")
        for i, (_, _, _, expr) in enumerate(rules):
            f.write("      - record: dashboard_expr_%d\n        expr: %s\n" % (i, json.dumps(expr)))
    out = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
    if out.returncode != 0:
        for line in (out.stdout + out.stderr).splitlines():
            m = re.search(r"dashboard_expr_(\d+)", line)
            if m:
                name, title, ref, expr = rules[int(m.group(1))]
                report.fail("%s: panel %r target %s" % (name, title, ref), "promtool: %s" % line.strip())
        if not any("promtool" in e for e in report.errors):
            report.fail("promtool", (out.stdout + out.stderr).strip())
    return len(rules)


def run_static(args):
    report = Report()
    metrics, label_names = parse_metrics_doc(args.metrics_doc)
    if not metrics:
        report.fail(args.metrics_doc, "no metric tables found")
    dashboards = load_dashboards(args.dashboards)
    expected_files = sorted(n + ".json" for n in DASHBOARD_VARIABLES)
    if [n for n, _ in dashboards] != expected_files:
        report.fail(args.dashboards, "dashboards %s, expected %s" % ([n for n, _ in dashboards], expected_files))
    uids = set()
    good = []
    for name, d in dashboards:
        if isinstance(d, Exception):
            report.fail(name, "does not parse: %s" % d)
            continue
        if not isinstance(d.get("schemaVersion"), int) or d["schemaVersion"] < MIN_SCHEMA_VERSION:
            report.fail(name, "schemaVersion %r, need %d or later" % (d.get("schemaVersion"), MIN_SCHEMA_VERSION))
        if d.get("uid") != name[:-5]:
            report.fail(name, "uid %r, expected the file's name" % d.get("uid"))
        if d.get("uid") in uids:
            report.fail(name, "uid used twice")
        uids.add(d.get("uid"))
        if not d.get("title"):
            report.fail(name, "no title")
        variables = check_variables(report, name, d, metrics, label_names)
        check_panels(report, name, d, metrics, variables, label_names)
        good.append((name, d))
    if args.promtool:
        if shutil.which(args.promtool) is None:
            report.fail("promtool", "%s not found: install the prometheus package (tools/setup.sh)" % args.promtool)
        else:
            work = tempfile.mkdtemp(prefix="memd-dashboards-")
            try:
                check_with_promtool(report, args.promtool, good, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    with open(args.readme) as f:
        readme = f.read()
    for name, d in good:
        for p in all_panels(d):
            if p.get("title") and p["title"] not in readme:
                report.fail("README", "does not mention panel %r of %s" % (p["title"], name))
    if good and readme_tables(good) not in readme:
        report.fail("README", "the panel tables are out of date: paste the output of "
                              "`tests/dashboards/check_dashboards.py table --dashboards dashboards`")
    panels = sum(len(query_panels(d)) for _, d in good)
    exprs = sum(len(p.get("targets") or []) for _, d in good for p in query_panels(d))
    for e in report.errors:
        print("FAIL", e)
    print("%d dashboards, %d panels, %d expressions, %d documented metrics: %s" %
          (len(dashboards), panels, exprs, len(metrics), "FAIL" if report.errors else "ok"))
    return 1 if report.errors else 0


def run_table(args):
    dashboards = [(n, d) for n, d in load_dashboards(args.dashboards) if not isinstance(d, Exception)]
    print(readme_tables(dashboards), end="")
    return 0


# -------------------------------------------------------------------- live

RATE_INTERVAL = "30s"
BUILTIN_VALUES = {"__rate_interval": RATE_INTERVAL, "__interval": "2s", "__interval_ms": "2000",
                  "__range": "5m", "__range_s": "300", "__range_ms": "300000"}
SCRAPES_BEFORE_CHECKING = 15   # seconds of 1 s scrapes, so that rate() windows hold many samples
RETRY_SECONDS = 90             # telemetry and samples may take a while to show

# A Python program that allocates and frees for the test's duration (and
# ends if the test dies: its parent changes).
WORKLOAD = r"""
import os, random, sys, time
parent = os.getppid()
rng = random.Random(int(sys.argv[1]))
keep = []
end = time.time() + float(sys.argv[2])
print("ready", flush=True)
while time.time() < end and os.getppid() == parent:
    for _ in range(500):
        item = ([bytes(rng.randrange(8, 3000)) for _ in range(3)], {i: str(i) * 3 for i in range(rng.randrange(1, 30))})
        if len(keep) < 3000:
            keep.append(item)
        else:
            keep[rng.randrange(len(keep))] = item
    time.sleep(0.01)
"""


def die_with_parent():
    """In a child before exec: SIGKILL when the test dies, whatever kills it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Processes:
    """The processes the test started, each in its own process group; all of
    them stopped at the end, whatever happens."""

    def __init__(self, work):
        self.work = work
        self.started = []

    def start(self, name, cmd, env=None):
        log = os.path.join(self.work, name + ".log")
        with open(log, "w") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=dict(os.environ, **(env or {})), start_new_session=True,
                                 preexec_fn=die_with_parent)
        self.started.append((name, p, log))
        return p

    def log(self, name):
        for n, _, log in self.started:
            if n == name:
                with open(log, errors="replace") as f:
                    return f.read()
        return ""

    def check_running(self):
        for name, p, _ in self.started:
            if p.poll() is not None:
                raise RuntimeError("%s exited early (status %s):\n%s" % (name, p.returncode, self.log(name)[-3000:]))

    def stop_all(self):
        for name, p, _ in reversed(self.started):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 15
        for name, p, _ in reversed(self.started):
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()


def wait_for(what, predicate, seconds, processes):
    deadline = time.time() + seconds
    while time.time() < deadline:
        processes.check_running()
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise RuntimeError("timed out waiting for %s" % what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, address):
        self.base = "http://%s" % address

    def get(self, path, params):
        url = "%s%s?%s" % (self.base, path, urllib.parse.urlencode(params, doseq=True))
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            try:
                body = json.load(e)
            except ValueError:
                return None, "HTTP %d" % e.code
        except (urllib.error.URLError, OSError, ValueError) as e:
            return None, str(e)
        if body.get("status") != "success":
            return None, "%s: %s" % (body.get("errorType"), body.get("error"))
        return body["data"], None

    def ready(self):
        try:
            with urllib.request.urlopen(self.base + "/-/ready", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def instant(self, expr):
        data, err = self.get("/api/v1/query", {"query": expr, "time": "%.3f" % time.time()})
        return (data or {}).get("result", []), err

    def range(self, expr, seconds=60, step=2):
        now = time.time()
        data, err = self.get("/api/v1/query_range", {"query": expr, "start": "%.3f" % (now - seconds),
                                                     "end": "%.3f" % now, "step": str(step)})
        return (data or {}).get("result", []), err

    def label_values(self, selector, label):
        now = time.time()
        if selector:
            data, err = self.get("/api/v1/series", {"match[]": selector, "start": "%.3f" % (now - 300),
                                                    "end": "%.3f" % now})
            values = sorted({s[label] for s in data or [] if label in s})
        else:
            data, err = self.get("/api/v1/label/%s/values" % label, {})
            values = sorted(data or [])
        return values, err


def promql_string(value):
    return value.replace("\\", "\\\\").replace('"', '\\"')


def substitute(text, values):
    """Grafana's interpolation, for the variables the dashboards use."""
    def one(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in BUILTIN_VALUES:
            return BUILTIN_VALUES[name]
        if name not in values:
            raise KeyError(name)
        return values[name]
    return re.sub(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]", one, text)


def assignments(prom, dashboard, failures, title):
    """Every choice of the single-value variables (the multi-value ones set to
    All, '.*'), each variable's query evaluated under the choices before it.
    A variable query that yields no value under any choice is a failure."""
    result = [{}]
    for v in dashboard.get("templating", {}).get("list", []):
        name = v.get("name")
        if v.get("type") == "datasource":
            continue
        m = LABEL_VALUES.match(variable_query(v))
        extended, seen_any, errors = [], False, []
        for a in result:
            selector = substitute(m.group("selector") or "", a) if m else ""
            values, err = prom.label_values(selector, m.group("label")) if m else ([], "not label_values()")
            if err:
                errors.append("%s: %s" % (selector, err))
            seen_any |= bool(values)
            if is_multi(v):
                extended.append(dict(a, **{name: v.get("allValue") or ".*"}))
            else:
                extended += [dict(a, **{name: promql_string(x)}) for x in values]
        if errors or not seen_any:
            failures.append("%s: variable $%s: %s -> %s" % (title, name, variable_query(v),
                                                             "; ".join(errors) or "no values"))
        result = extended[:64]
    return result


def evaluate_target(prom, target, choices):
    """(ok, message): ok when the expression evaluates without error and, for
    at least one choice of the variables, returns a series carrying every
    label its legend names."""
    instant = bool(target.get("instant")) and not target.get("range")
    legend = legend_labels(target.get("legendFormat"))
    last = "no choice of the variables (a variable has no values)"
    for a in choices:
        expr = substitute(target["expr"], a)
        result, err = prom.instant(expr) if instant else prom.range(expr)
        if err:
            return False, "error: %s\n    expr: %s" % (err, expr)
        if not result:
            last = "empty result\n    expr: %s" % expr
            continue
        present = set().union(*(r["metric"].keys() for r in result))
        missing = legend - present
        if missing:
            last = "legend labels %s in no series\n    expr: %s" % (sorted(missing), expr)
            continue
        return True, "%d series\n    expr: %s" % (len(result), expr)
    return False, last


def missing_metrics(prom, expr):
    """Metrics of expr that Prometheus has no series of (to say why it is empty)."""
    try:
        names = sorted({m for m, _ in parse_promql(expr)[0]})
    except PromQLError:
        return []
    return [n for n in names if not prom.label_values(n, "__name__")[0]]


def check_live_dashboards(prom, dashboards):
    failures, passed = [], 0
    for name, d in dashboards:
        choices = assignments(prom, d, failures, name)
        for p in query_panels(d):
            for t in p.get("targets") or []:
                ok, message = evaluate_target(prom, t, choices)
                if ok:
                    passed += 1
                    continue
                absent = missing_metrics(prom, t["expr"])
                if absent:
                    message += "\n    no series at all of: %s" % ", ".join(absent)
                failures.append("%s: panel %r target %s: %s" % (name, p["title"], t.get("refId"), message))
    return passed, failures


def start_memd(procs, args, work, sock, ns):
    procs.start("memd", [args.memd, "--socket", sock, "--data-dir", os.path.join(work, "data"),
                         "--shm-namespace", ns, "--metrics-address", "127.0.0.1:0"])
    wait_for("memd's socket", lambda: os.path.exists(sock), 30, procs)

    def metrics_address():
        out = subprocess.run([args.memdctl, "--socket", sock, "--json", "stats"], capture_output=True, text=True)
        if out.returncode == 0:
            try:
                address = json.loads(out.stdout).get("metrics_address")
                if address:
                    return address
            except ValueError:
                pass
        m = re.search(r"metrics on (\S+:\d+)", procs.log("memd"))
        return m.group(1) if m else None
    return wait_for("memd's metrics address (memdctl stats metrics_address, or 'metrics on' in its log)",
                    metrics_address, 30, procs)


def start_clients(procs, args, sock, seconds):
    env = {"MEMD_SOCKET": sock, "MEMD_SAMPLE_BYTES": "65536"}
    tc = args.test_client
    procs.start("hold", [tc, sock, "dash-hold", "hold", "1", "4000", "200"], env)
    procs.start("churn", [tc, "--file", sock, "dash-churn", "churn", "2", str(int(seconds))], env)
    shim = dict(env, LD_PRELOAD=args.shim, PYTHONMALLOC="malloc")
    procs.start("process-heap", [args.python, "-c", WORKLOAD, "3", str(seconds)],
                dict(shim, MEMD_TELEMETRY="1", MEMD_CHAIN_POOLS="1"))
    procs.start("daemon-mode", [args.python, "-c", WORKLOAD, "4", str(seconds)],
                dict(shim, MEMD_REGION="dash-shim-heap", MEMD_REGION_REQUIRED="1"))
    for name in ("hold", "process-heap", "daemon-mode"):
        wait_for("%s to be ready" % name, lambda name=name: "ready" in procs.log(name), 60, procs)
    # Failed RPCs, so that the error panels have something to show.
    subprocess.run([args.memdctl, "--socket", sock, "stat", "no-such-region"], capture_output=True)
    subprocess.run([tc, sock, "bad..name", "open"], capture_output=True, env=dict(os.environ, **env))


def start_prometheus(procs, args, work, target):
    port = free_port()
    config = os.path.join(work, "prometheus.yml")
    with open(config, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: memd\n    static_configs:\n      - targets: ['%s']\n" % target)
    procs.start("prometheus", [args.prometheus, "--config.file=" + config,
                               "--storage.tsdb.path=" + os.path.join(work, "tsdb"),
                               "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn"])
    prom = Prometheus("127.0.0.1:%d" % port)
    wait_for("Prometheus to be ready", prom.ready, 60, procs)
    return prom


SHM_PREFIX = "/dev/shm/memd.dashboards"   # + the test's pid: its shm namespace
WORK_PREFIX = "memd-dashboards-"          # + the test's pid: its temporary directory


def remove_stale_leftovers():
    """What an earlier run killed outright (SIGKILL, e.g. a ctest timeout)
    could not remove: its shm objects and directory, once its pid is gone."""
    paths = glob.glob(SHM_PREFIX + "*") + glob.glob(os.path.join(tempfile.gettempdir(), WORK_PREFIX + "*"))
    for path in paths:
        m = re.match(r"(?:memd\.dashboards|memd-dashboards-)(\d+)", os.path.basename(path))
        if not m or os.path.exists("/proc/" + m.group(1)):
            continue
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


def run_live(args):
    for tool in (args.memd, args.memdctl, args.test_client, args.shim):
        if not os.path.exists(tool):
            print("FAIL: %s not found (build first)" % tool)
            return 1
    if shutil.which(args.prometheus) is None:
        print("FAIL: %s not found: install the prometheus package (tools/setup.sh)" % args.prometheus)
        return 1
    dashboards = [(n, d) for n, d in load_dashboards(args.dashboards) if not isinstance(d, Exception)]
    remove_stale_leftovers()
    work = tempfile.mkdtemp(prefix="%s%d-" % (WORK_PREFIX, os.getpid()))
    ns = "dashboards%d" % os.getpid()
    procs = Processes(work)
    # ctest's timeout and Ctrl-C: clean up like any other failure.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    ok = False
    try:
        sock = os.path.join(work, "memd.sock")
        address = start_memd(procs, args, work, sock, ns)
        print("memd metrics on", address)
        prom = start_prometheus(procs, args, work, address)
        start_clients(procs, args, sock, 280)
        wait_for("Prometheus to scrape memd (up == 1)",
                 lambda: any(r["value"][1] == "1" for r in prom.instant('up{job="memd"}')[0]), 60, procs)
        time.sleep(SCRAPES_BEFORE_CHECKING)
        deadline = time.time() + RETRY_SECONDS
        while True:
            procs.check_running()
            passed, failures = check_live_dashboards(prom, dashboards)
            if not failures or time.time() > deadline:
                break
            time.sleep(5)
        for f in failures:
            print("FAIL", f)
        print("%d expressions non-empty, %d failures" % (passed, len(failures)))
        ok = not failures
    except RuntimeError as e:
        print("FAIL:", e)
    finally:
        if not ok:
            print("---- memd log (tail)\n" + procs.log("memd")[-4000:])
            print("---- prometheus log (tail)\n" + procs.log("prometheus")[-2000:])
        procs.stop_all()
        for shm in glob.glob("%s%d.*" % (SHM_PREFIX, os.getpid())):
            os.unlink(shm)
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("static")
    s.add_argument("--dashboards", required=True)
    s.add_argument("--metrics-doc", required=True)
    s.add_argument("--readme", required=True)
    s.add_argument("--promtool", help="also parse every expression with promtool")
    t = sub.add_parser("table")
    t.add_argument("--dashboards", required=True)
    live = sub.add_parser("live")
    live.add_argument("--dashboards", required=True)
    live.add_argument("--memd", required=True)
    live.add_argument("--memdctl", required=True)
    live.add_argument("--test-client", required=True)
    live.add_argument("--shim", required=True)
    live.add_argument("--prometheus", default="prometheus")
    live.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    return {"static": run_static, "table": run_table, "live": run_live}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
