#!/usr/bin/env python3
"""Generator of the Grafana dashboards in dashboards/*.json (owns every dashboard JSON file).

The dashboards are written here, as Python, and generated into committed JSON:

    dashboards/gen.py            # rewrite dashboards/*.json
    dashboards/gen.py --check    # exit 1 if a committed file differs from what this generates

Metric names, types and HELP come from rdmad itself (`rdmad --print-metrics json`: its
collectors' declarations and the counter catalog run through its naming code), never from a
copy of its naming rules here; panel descriptions come from the catalog's summary, meaning,
causes and next steps, and from the doctor rules (catalog/rules.toml). The rdmad binary is
$RDMAD_BIN, or `cargo run --release -p rdmad` when that is not set. Only the Python standard
library is used (tomllib: Python >= 3.11).
"""
import json
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39

# ---------------------------------------------------------------------------------------------
# What rdmad exports, and the counter catalog


def rdmad_inventory():
    """`rdmad --print-metrics json`: every family rdmad can export, and the family of each
    catalog counter."""
    rdmad = os.environ.get("RDMAD_BIN")
    cmd = ([rdmad] if rdmad else ["cargo", "run", "-q", "--release", "-p", "rdmad", "--"]) + [
        "--print-metrics", "json"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


INVENTORY = rdmad_inventory()
# (catalog family, counter file) -> the family rdmad exports for it.
METRIC_OF = {(c["family"], c["counter"]): c["metric"] for c in INVENTORY["counters"]}


def load_catalog():
    families, rules = {}, []
    for f in sorted((ROOT / "catalog").glob("*.toml")):
        d = tomllib.loads(f.read_text())
        if f.stem == "rules":
            rules = d["rule"]
            continue
        entries = []
        for c in d.get("counter", []):  # ionic: names from firmware, none here
            loc = c.get("location", d.get("location"))
            c = dict(c, location=loc, family=d["family"])
            c["metric"] = METRIC_OF.get((d["family"], c["name"]))  # None: rdmad does not read it
            entries.append(c)
        families[d["family"]] = {"description": d["description"], "counters": entries}
    return families, rules


FAMILIES, RULES = load_catalog()
# rxe first (the lab), then the InfiniBand PMA set, then every other family of the catalog.
FAMILY_ORDER = ["rxe", "ib_pma"] + sorted(set(FAMILIES) - {"rxe", "ib_pma"})
# The kernel driver (rdma_device_info's `driver` label) of each family's devices; devices are
# matched by that driver or by a name starting with the family, as `rdmactl --driver` does
# (rxe has no driver label; renamed devices such as rocep3s0f0 still have one).
FAMILY_DRIVERS = {"mlx5": "mlx5_core", "bnxt_re": "bnxt_en", "irdma": "irdma|ice|i40e",
                  "rxe": "rdma_rxe"}


def by_name(name):
    """Every catalog entry (any family) for a sysfs counter name."""
    return [c for f in FAMILIES.values() for c in f["counters"] if c["name"] == name and c["metric"]]


def flow(text):
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------
# PromQL helpers

PORT_SEL = 'instance=~"$instance", device=~"$device", port=~"$port"'
DEV_SEL = 'instance=~"$instance", device=~"$device"'


def sel(metric):
    return DEV_SEL if metric.startswith("rdma_device_") else PORT_SEL


def labelled_rates(metrics, label="counter", extra=""):
    """rate() of several counters as one vector, told apart by a label (`or` keeps all:
    rate() drops the metric name, so a plain {__name__=~...} would clash). `extra`: one more
    matcher for every selector."""
    parts = []
    for m in metrics:
        v = m.removeprefix("rdma_").removesuffix("_total")
        s = sel(m) + (", " + extra if extra else "")
        parts.append(
            f'label_replace(rate({m}{{{s}}}[$__rate_interval]), "{label}", "{v}", "", "")'
        )
    return "\n  or ".join(parts)


# ---------------------------------------------------------------------------------------------
# Grafana JSON helpers


class Board:
    def __init__(self, uid, title, description, tags, extra_vars=(), port_vars=True):
        self.uid, self.title, self.description, self.tags = uid, title, description, tags
        self.panels, self.next_id, self.y = [], 1, 0
        self.row_x, self.row_h = 0, 0
        self.vars = standard_vars(port_vars) + list(extra_vars)

    def _id(self):
        i = self.next_id
        self.next_id += 1
        return i

    def row(self, title):
        self._newline()
        self.panels.append({"type": "row", "title": title, "id": self._id(), "collapsed": False,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.y += 1

    def _newline(self):
        if self.row_x:
            self.y += self.row_h
            self.row_x, self.row_h = 0, 0

    def add(self, panel, w=12, h=8):
        if self.row_x + w > 24:
            self._newline()
        panel["id"] = self._id()
        panel["gridPos"] = {"h": h, "w": w, "x": self.row_x, "y": self.y}
        self.row_x += w
        self.row_h = max(self.row_h, h)
        self.panels.append(panel)

    def json(self):
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": ["rdma", "rdmad"] + self.tags,
            "editable": True,
            "graphTooltip": 1,
            "refresh": "30s",
            "schemaVersion": SCHEMA_VERSION,
            "version": 1,
            "time": {"from": "now-1h", "to": "now"},
            "timezone": "",
            "links": [{"type": "dashboards", "tags": ["rdmad"], "asDropdown": True,
                       "title": "RDMA dashboards", "includeVars": True, "keepTime": True}],
            "annotations": {"list": [{
                "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts", "type": "dashboard"}]},
            "templating": {"list": self.vars},
            "panels": self.panels,
        }


def target(expr, legend="", ref="A", instant=False, fmt="time_series"):
    t = {"refId": ref, "datasource": DS, "expr": expr, "legendFormat": legend or "__auto",
         "range": not instant, "instant": instant, "format": fmt}
    return t


def timeseries(title, desc, expr, legend, unit="short", stack=False):
    return {"type": "timeseries", "title": title, "description": desc, "datasource": DS,
            "targets": [target(expr, legend)],
            "fieldConfig": {"defaults": {"unit": unit, "min": 0, "custom": {
                "drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never",
                "stacking": {"mode": "normal" if stack else "none", "group": "A"}}},
                "overrides": []},
            "options": {"legend": {"displayMode": "table", "placement": "bottom",
                                   "calcs": ["max", "lastNotNull"]},
                        "tooltip": {"mode": "multi", "sort": "desc"}}}


def two_lines(title, desc, expr_a, what_a, expr_b, what_b, unit="short"):
    """A per-port timeseries of two queries (A and B), each line named by port and `what`."""
    port = "{{instance}} {{device}}/{{port}}"
    panel = timeseries(title, desc, expr_a, f"{port} {what_a}", unit=unit)
    panel["targets"].append(target(expr_b, f"{port} {what_b}", ref="B"))
    return panel


def stat(title, desc, expr, unit="short", thresholds=None, color_mode="value"):
    steps = thresholds or [{"color": "green", "value": None}]
    return {"type": "stat", "title": title, "description": desc, "datasource": DS,
            "targets": [target(expr, instant=True)],
            "fieldConfig": {"defaults": {"unit": unit, "thresholds": {"mode": "absolute",
                                                                      "steps": steps}},
                            "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": color_mode, "graphMode": "area", "textMode": "auto",
                        "justifyMode": "auto", "orientation": "auto"}}


def table(title, desc, expr, unit="short", exclude=(), rename=None):
    return {"type": "table", "title": title, "description": desc, "datasource": DS,
            "targets": [target(expr, instant=True, fmt="table")],
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"showHeader": True, "cellHeight": "sm"},
            "transformations": [{"id": "organize", "options": {
                "excludeByName": {k: True for k in ("Time", "__name__", "job") + tuple(exclude)},
                "renameByName": rename or {}}}]}


def text(title, content):
    return {"type": "text", "title": title, "options": {"mode": "markdown", "content": content}}


RED_IF_POSITIVE = [{"color": "green", "value": None}, {"color": "red", "value": 1}]


def query_var(name, label, query, regex=""):
    return {"type": "query", "name": name, "label": label, "datasource": DS,
            "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
            "definition": query, "refresh": 2, "sort": 1, "multi": True, "includeAll": True,
            "allValue": ".*", "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "regex": regex, "hide": 0, "options": []}


def standard_vars(port_vars=True):
    v = [{"type": "datasource", "name": "datasource", "label": "Data source", "query": "prometheus",
          "current": {}, "hide": 0, "refresh": 1, "regex": "", "options": []},
         query_var("job", "Job", "label_values(rdma_exporter_build_info, job)"),
         query_var("instance", "Instance",
                   'label_values(rdma_exporter_build_info{job=~"$job"}, instance)'),
         query_var("device", "Device", 'label_values(rdma_device_info{instance=~"$instance"}, device)')]
    if port_vars:
        v.append(query_var("port", "Port", 'label_values(rdma_port_info{instance=~"$instance", '
                                           'device=~"$device"}, port)'))
    return v


# ---------------------------------------------------------------------------------------------
# The counters that make up throughput, packet rates and error rates


def metrics_named(names):
    out = []
    for n in names:
        for c in by_name(n):
            if c["metric"] not in out:
                out.append(c["metric"])
    return out


# hfi1's TxWords/RxWords are left out: rdmad exports them as words, and hfi1 has the PMA ones.
TX_BYTES = metrics_named(["port_xmit_data", "rdma_tx_bytes", "tx_bytes", "ip4OutOctets",
                          "ip6OutOctets"])
RX_BYTES = metrics_named(["port_rcv_data", "rdma_rx_bytes", "rx_bytes", "ip4InOctets",
                          "ip6InOctets"])
TX_PKTS = metrics_named(["port_xmit_packets", "rdma_tx_packets", "tx_pkts", "TxPkt", "sent_pkts",
                         "ip4OutPkts", "ip6OutPkts"])
RX_PKTS = metrics_named(["port_rcv_packets", "rdma_rx_packets", "rx_pkts", "RxPkt", "rcvd_pkts",
                         "ip4InPkts", "ip6InPkts"])
ERROR_RULES = [r for r in RULES if r["severity"] in ("warning", "error")]
ERROR_METRICS = metrics_named([n for r in ERROR_RULES for n in r["counters"]])


def sum_by_port(exprs_metrics, label):
    return f"sum by (instance, device, port) (\n  {labelled_rates(exprs_metrics, label)}\n)"


# ---------------------------------------------------------------------------------------------
# Dashboards


def fleet():
    b = Board("rdma-fleet", "RDMA / Fleet overview",
              "Every RDMA device and port rdmad sees: state, throughput, packet rates, errors.",
              ["overview"])
    b.row("Health")
    b.add(stat("Exporters up", "rdmad targets Prometheus scraped successfully (up == 1).",
               'sum(up{job=~"$job", instance=~"$instance"})'), w=4, h=4)
    b.add(stat("Devices", "RDMA devices reported by rdma_device_info.",
               'count(rdma_device_info{instance=~"$instance", device=~"$device"})'), w=4, h=4)
    b.add(stat("Ports ACTIVE", "Ports whose logical state is ACTIVE (rdma_port_state_id == 4).",
               f'sum(rdma_port_state_id{{{PORT_SEL}}} == bool 4)'), w=4, h=4)
    b.add(stat("Ports not ACTIVE", "Ports in DOWN, INIT or ARMED: no RDMA traffic can use them.",
               f'sum(rdma_port_state_id{{{PORT_SEL}}} != bool 4)',
               thresholds=RED_IF_POSITIVE, color_mode="background"), w=4, h=4)
    b.add(stat("Failing collectors", "Collectors of rdmad whose last run failed "
               "(rdma_scrape_collector_success == 0): their metrics are missing.",
               'sum(rdma_scrape_collector_success{instance=~"$instance"} == bool 0)',
               thresholds=RED_IF_POSITIVE, color_mode="background"), w=4, h=4)
    b.add(stat("sysfs read errors", "Counter files rdmad could not read, parse or export in the "
               "last scrape (rdma_sysfs_read_errors). 0 when all is well.",
               f'sum(rdma_sysfs_read_errors{{{DEV_SEL}}})',
               thresholds=RED_IF_POSITIVE, color_mode="background"), w=4, h=4)
    b.row("Devices and ports")
    b.add(table("Ports", "One row per port: link layer, netdev, logical and physical state; the "
                "value is the port's rate (rdma_port_rate_bytes_per_second).",
                f'rdma_port_info{{{PORT_SEL}}}\n  * on (instance, device, port) group_left ()\n'
                f'  rdma_port_rate_bytes_per_second{{{PORT_SEL}}}',
                unit="Bps", rename={"Value": "rate"}), w=14, h=8)
    b.add(table("Device inventory", "One row per device: driver, firmware, HCA type, board, GUID, PCI "
                "address (rdma_device_info). Empty fields are not reported by the driver (rxe).",
                f'rdma_device_info{{{DEV_SEL}}}', exclude=("Value",)), w=10, h=8)
    st = timeseries("Port state", "Logical port state over time (rdma_port_state_id): "
                    "1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.",
                    f'rdma_port_state_id{{{PORT_SEL}}}', "{{instance}} {{device}}/{{port}}")
    st["type"] = "state-timeline"
    st["fieldConfig"]["defaults"] = {"mappings": [{"type": "value", "options": {
        "1": {"text": "DOWN", "color": "red"}, "2": {"text": "INIT", "color": "orange"},
        "3": {"text": "ARMED", "color": "yellow"}, "4": {"text": "ACTIVE", "color": "green"},
        "5": {"text": "ACTIVE_DEFER", "color": "blue"}}}], "color": {"mode": "thresholds"},
        "thresholds": {"mode": "absolute", "steps": [{"color": "red", "value": None},
                                                     {"color": "green", "value": 4}]}}
    st["options"] = {"showValue": "auto", "mergeValues": True, "rowHeight": 0.8,
                     "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False}}
    b.add(st, w=24, h=5)
    b.row("Traffic")
    b.add(timeseries("Throughput", "Bytes per second sent (tx) and received (rx) per port. "
                     "Sources: IB PMA port_xmit_data/port_rcv_data (x4: they count 4-octet words) "
                     "and the driver byte counters (mlx5 rdma_*_bytes, bnxt_re/efa *_bytes, "
                     "irdma ip*Octets). Soft-RoCE (rxe) counts no bytes.",
                     f'label_replace(({labelled_rates(TX_BYTES)}), "dir", "tx", "", "")\n  or '
                     f'label_replace(({labelled_rates(RX_BYTES)}), "dir", "rx", "", "")',
                     "{{instance}} {{device}}/{{port}} {{dir}} ({{counter}})", unit="Bps"))
    b.add(timeseries("Packet rate", "Packets per second sent (tx) and received (rx) per port: IB "
                     "PMA port_xmit/rcv_packets, mlx5 rdma_*_packets, rxe sent_pkts/rcvd_pkts, "
                     "bnxt_re/efa *_pkts, irdma ip*Pkts, hfi1 TxPkt/RxPkt.",
                     f'label_replace(({labelled_rates(TX_PKTS)}), "dir", "tx", "", "")\n  or '
                     f'label_replace(({labelled_rates(RX_PKTS)}), "dir", "rx", "", "")',
                     "{{instance}} {{device}}/{{port}} {{dir}} ({{counter}})", unit="pps"))
    b.row("Errors")
    b.add(timeseries("Error events per port", "Sum of the rates of every counter a doctor rule of "
                     "severity warning or error watches (catalog/rules.toml): RNR NAKs, retries, "
                     "remote access, sequence errors, link errors, link downs. Break it down on "
                     "the 'RDMA / Errors and diagnosis' dashboard.",
                     sum_by_port(ERROR_METRICS, "counter"), "{{instance}} {{device}}/{{port}}",
                     unit="cps"))
    b.add(table("Top talkers (packets/s)", "The 10 busiest ports by packets sent + received "
                "per second over the rate interval.",
                'topk(10, sum by (instance, device, port) (\n  '
                + labelled_rates(TX_PKTS + RX_PKTS) + "\n))", unit="pps",
                rename={"Value": "packets/s"}))
    return b


def counter_doc(c):
    lines = [f"**`{c['name']}`** ({c['family']}, `{c['metric']}`): {c['summary']}."]
    return " ".join(lines)


def rule_description(r):
    entries = [c for n in r["counters"] for c in by_name(n)]
    parts = [flow(r["finding"]).replace("On {target} ", "").replace("{target}", "a port"),
             "", "**What to do:** " + flow(r["advice"]), "", "**Counters:**", ""]
    for c in entries:
        parts.append(f"- {counter_doc(c)} Explain: `rdmactl explain {shlex.quote(c['name'])} --driver "
                     f"{c['family']}`")
    if r.get("experiment"):
        parts += ["", f"Reproduce it: `rdmactl experiment run {r['experiment']}`."]
    return "\n".join(parts)


def family_description(fam, entries):
    where = ("every device" if fam == "ib_pma" else
             "the netdev of every RDMA port (ethtool -S, any driver)" if fam == "netdev" else
             f"devices of driver {FAMILY_DRIVERS.get(fam, fam)} or named {fam}*")
    parts = [FAMILIES[fam]["description"] + ": every counter the catalog rates warning or error, "
             f"as events per second, on {where}.", ""]
    for c in entries:
        sev = c["severity"]
        parts.append(f"- {counter_doc(c)} [{sev}] {flow(c['meaning'])[:300]}"
                     f"{'...' if len(flow(c['meaning'])) > 300 else ''} "
                     f"Explain: `rdmactl explain {shlex.quote(c['name'])} --driver {fam}`")
    return "\n".join(parts)


def errors():
    b = Board("rdma-errors", "RDMA / Errors and diagnosis",
              "Every RDMA error counter as a rate, grouped by failure (doctor rules) and by driver "
              "family, with the catalog's explanation in each panel's description (hover the "
              "(i)).", ["errors"])
    b.add(text("How to read this dashboard",
               "Each panel is a rate in events per second, one line per port and counter. Hover "
               "the **(i)** of a panel for what its counters mean, what causes them and what to "
               "do. On a host with rdmactl, `rdmactl explain COUNTER` prints the full entry, "
               "`rdmactl doctor` ranks what moved, and `rdmactl experiment run NAME` reproduces "
               "it in a lab. An empty panel means the devices shown have no such counter (for "
               "example Soft-RoCE has no InfiniBand PMA counters)."), w=24, h=4)
    b.row("Failure signatures (catalog/rules.toml)")
    for r in RULES:
        metrics = metrics_named(r["counters"])
        if not metrics:
            continue
        p = timeseries(f"{r['title']} [{r['severity']}]", rule_description(r),
                       labelled_rates(metrics), "{{instance}} {{device}}/{{port}} {{counter}}",
                       unit="cps")
        b.add(p)
    b.row("Error counters by driver family (catalog/*.toml)")
    for fam in FAMILY_ORDER:
        entries = [c for c in FAMILIES[fam]["counters"]
                   if c["metric"] and c["kind"] == "counter" and c["severity"] in ("warning", "error")]
        if not entries:
            continue
        # hfi1 has ~500 such counters (one per hardware error bit, per VL, per SDMA engine),
        # most generated from chip.c (catalog/gen-hfi1.py): one panel per error status
        # register, one for the per-VL/per-engine copies, one for the rest.
        for title, group in panel_groups(fam, entries):
            family_panel(b, fam, title, group)
    return errors_tail(b)


def panel_groups(fam, entries):
    """(panel title, entries) for one family's error panels."""
    if fam != "hfi1":
        return [(f"{fam}: error counters", entries)]
    groups = {}
    for c in entries:
        if ": error bit " in c["summary"]:
            key = f"hfi1: {c['summary'].split(': error bit ')[0]} error bits"
        elif c["summary"].endswith(")") and ("(VL " in c["summary"] or "(SDMA engine " in c["summary"]):
            key = "hfi1: per-VL and per-SDMA-engine error counters"
        else:
            key = "hfi1: error counters"
        groups.setdefault(key, []).append(c)
    first = "hfi1: error counters"
    head = [(first, groups.pop(first))] if first in groups else []
    return head + sorted(groups.items())


def family_panel(b, fam, title, entries):
    """One panel: the rates of `entries` (counters of family `fam`) on that family's devices."""
    # Only the family's devices: mlx5 and rxe share counter names (duplicate_request).
    expr = labelled_rates([c["metric"] for c in entries])
    legend = "{{instance}} {{device}}/{{port}} {{counter}}"
    if fam == "netdev":
        # The port's netdev, any driver: the series carry netdev and their own labels.
        legend = ("{{instance}} {{device}}/{{port}} {{netdev}} {{counter}} {{direction}} "
                  "{{priority}}{{reason}}")
    elif fam != "ib_pma":
        drv = FAMILY_DRIVERS.get(fam, fam)
        expr = (f"(\n  {expr}\n)\nand on (instance, device) (\n  rdma_device_info"
                f'{{{DEV_SEL}, driver=~"{drv}"}}\n  or rdma_device_info{{{DEV_SEL}, '
                f'device=~"{fam}.*"}}\n)')
    b.add(timeseries(title, family_description(fam, entries), expr,
                     legend, unit="cps"), w=24 if fam
          in ("mlx5", "bnxt_re", "hfi1") else 12)


def errors_tail(b):
    b.row("Per Slurm job")
    b.add(timeseries("QPs in ERR per Slurm job", "QPs in the ERR state per Slurm job and "
                     "step (rdma_owner_qps{state=\"ERR\"} of owners whose cgroup is a "
                     "slurmstepd job's: the job_id and job_step labels). A QP goes to ERR when "
                     "a work request fails; `rdmactl doctor` on the node names the process. "
                     "Empty where no job holds QPs in ERR.",
                     f'sum by (instance, job_id, job_step) (rdma_owner_qps{{{DEV_SEL}, '
                     f'state="ERR", job_id!=""}})',
                     "{{instance}} job {{job_id}} step {{job_step}}"))
    b.add(timeseries("Control-path events per Slurm job", "Rate of RDMA control-path calls "
                     "(QP create/modify, MR registration, ...) per Slurm job, from the eBPF "
                     "tracer (rdma_trace_events_total, --collector.trace): a job that re-creates "
                     "QPs in a loop is recovering from errors.",
                     f'sum by (instance, job_id, kind) (rate(rdma_trace_events_total{{'
                     f'instance=~"$instance", job_id!=""}}[5m]))',
                     "{{instance}} job {{job_id}} {{kind}}", unit="cps"))
    b.row("Exporter")
    b.add(timeseries("sysfs read errors", "Counter files rdmad could not read, parse or export "
                     "(EINVAL, 'N/A (no PMA)', garbage, a name clash), per collector and device. "
                     "`RDMAD_LOG=debug` makes rdmad log each file.",
                     f'rdma_sysfs_read_errors{{{DEV_SEL}}}',
                     "{{instance}} {{device}} {{collector}}"))
    b.add(timeseries("Collector success", "1 when the collector's last run succeeded, 0 when it "
                     "failed (its metrics are then missing from the scrape).",
                     'rdma_scrape_collector_success{instance=~"$instance"}',
                     "{{instance}} {{collector}}"))
    return b


PROBE_LAT = "rdma_probe_latency_seconds"
PROBE_LAST = "rdma_probe_latency_last_seconds"
PROBE_SEL = 'instance=~"$instance", device=~"$device", op=~"$op"'


def probes():
    op_var = query_var("op", "Operation", 'label_values(rdma_probe_latency_seconds_bucket'
                                          '{instance=~"$instance"}, op)')
    peer_var = query_var("peer", "Peer", 'label_values(rdma_probe_latency_seconds_bucket'
                                        '{instance=~"$instance", kind="peer"}, peer)')
    b = Board("rdma-probes", "RDMA / Probes",
              "Active probes of rdmad: loopback and peer RDMA latency per operation and peer, "
              "and probe failures by work-completion status.", ["probes"],
              extra_vars=[op_var, peer_var], port_vars=False)
    b.row("Is RDMA working?")
    b.add(timeseries("Probe failures by status", "Failed probe runs per second by failure name: "
                     "a work-completion status (RETRY_EXC_ERR, RNR_RETRY_EXC_ERR, REM_ACCESS_ERR, "
                     "...) or the probe's own (TIMEOUT, SETUP_ERR, POST_ERR, CONNECT_ERR, "
                     "HANDSHAKE_ERR, PEER_CLOSED, NO_DEVICE). `rdmactl explain` covers the "
                     "counters the same failures move.",
                     'sum by (instance, status) (rate(rdma_probe_failures_total{instance=~"$instance", '
                     'device=~"$device"}[$__rate_interval]))', "{{instance}} {{status}}",
                     unit="ops"))
    b.add(timeseries("Successful probe runs", "Probe runs per second that completed, per "
                     "operation (rdma_probe_runs_total).",
                     f'sum by (instance, device, op, peer) (rate(rdma_probe_runs_total{{{PROBE_SEL}}}'
                     '[$__rate_interval]))', "{{instance}} {{device}} {{op}} {{peer}}", unit="ops"))
    b.row("Latency per operation")
    hm = timeseries("Latency heatmap", "Distribution of probe latencies (one-way for send/write "
                    "loopback, round trip for read and peers), all selected operations.",
                    f'sum by (le) (increase({PROBE_LAT}_bucket{{{PROBE_SEL}}}[$__rate_interval]))',
                    "{{le}}", unit="s")
    hm["type"] = "heatmap"
    hm["targets"][0]["format"] = "heatmap"
    hm["options"] = {"calculate": False, "yAxis": {"unit": "s"}, "cellGap": 1,
                     "color": {"mode": "scheme", "scheme": "Oranges", "scale": "exponential"},
                     "rowsFrame": {"layout": "auto"}, "tooltip": {"show": True, "yHistogram": True}}
    hm["fieldConfig"] = {"defaults": {}, "overrides": []}
    b.add(hm)
    pct = timeseries("Latency p50 / p99 per operation", "Percentiles of the loopback probe "
                     "latency histogram per operation (histogram_quantile over the rate "
                     "interval): one-way for send and write, round trip for read.",
                     f'histogram_quantile(0.99, sum by (le, instance, device, op) (rate({PROBE_LAT}'
                     f'_bucket{{{PROBE_SEL}, kind="loopback"}}[$__rate_interval])))',
                     "p99 {{instance}} {{device}} {{op}}", unit="s")
    pct["targets"].append(target(
        f'histogram_quantile(0.5, sum by (le, instance, device, op) (rate({PROBE_LAT}'
        f'_bucket{{{PROBE_SEL}, kind="loopback"}}[$__rate_interval])))',
        "p50 {{instance}} {{device}} {{op}}", ref="B"))
    b.add(pct)
    b.row("Latency per peer")
    b.add(timeseries("Peer latency p99", "99th percentile round trip to each peer in the last "
                     "run (RDMA over an authenticated handshake; the run's summary, one of the "
                     "6 default series per peer).",
                     f'max by (instance, peer) ({PROBE_LAST}{{instance=~"$instance", kind="peer", '
                     'peer=~"$peer", stat="p99"})', "{{instance}} -> {{peer}}", unit="s"))
    b.add(timeseries("Peer latency typical", "Typical (median) round trip to each peer in the "
                     "last run. Per-peer histograms, with every summary stat, come with "
                     "--probe.peer-histograms.",
                     f'max by (instance, peer) ({PROBE_LAST}{{instance=~"$instance", kind="peer", '
                     'peer=~"$peer", stat="typical"})', "{{instance}} -> {{peer}}", unit="s"))
    b.row("Handshake port")
    b.add(timeseries("Peer handshakes accepted and refused", "Handshakes per second on this "
                     "host's probe listener: accepted (rdma_probe_handshakes_accepted_total) "
                     "and refused by reason (rdma_probe_handshakes_refused_total: busy = over "
                     "the concurrent-handshake cap, timeout = not finished within its "
                     "deadline, bad_mac = wrong secret, malformed, replay). Refusals without a "
                     "misconfigured peer are a scan or a flood of the probe port.",
                     'sum by (instance) (rate(rdma_probe_handshakes_accepted_total'
                     '{instance=~"$instance"}[$__rate_interval]))',
                     "{{instance}} accepted", unit="cps"), w=24)
    b.panels[-1]["targets"].append(target(
        'sum by (instance, reason) (rate(rdma_probe_handshakes_refused_total'
        '{instance=~"$instance"}[$__rate_interval]))',
        "{{instance}} refused {{reason}}", ref="B"))
    return b


# The pingmesh: a pair is (instance = the probing host, peer = the probed one). The recording
# rules below (rules_yaml) are what the pingmesh board and alerts read.
#
# Localization (issue #29). Every pair gets two host names: `prober` (the scrape's `host`
# target label if it sets one, else its instance without the port) and `target` (the peer's
# `peer_host` label if metric relabeling sets one, else its address without the port); the
# two must name a host the same way for the prober's and the target's views to meet. Each
# failing pair gets a `fault`: its layer from rdma_probe_peer_status (agent, host, rdma) or,
# when the pair is up, its lossy direction. The same pair is read twice: from the target's
# side (request loss is the target's ingress, reply loss its egress) and from the prober's
# (request loss is the prober's egress, reply loss its ingress). A host is a culprit when
# at least MESH_MIN_COUNTERPARTS of its counterparts, and more than half of them, see the same
# fault with it: so with 3 or 4 hosts one failing pair is a path, never a host (R-Pingmesh's
# small-mesh caution). Three passes keep one sick host from blaming its healthy peers: the
# targets most of whose probers fail (raw), then the probers that fail to most targets
# leaving those targets out, then the targets again leaving those probers out. A failing
# pair that neither end explains is a path. Windows are 30 s (15 scrapes at 2 s) so alerts
# resolve within a minute of the fault's end. "Half of its counterparts" depends on the
# fault: a layer fault (agent, host, rdma) is a status every pair keeps between runs, so it
# counts against all of the host's pairs; a loss fault exists only for the pairs probed in
# the window, so it counts against those. On a full mesh every pair is probed every round and
# both are the same; above --probe.mesh-max a cross-rack pair is probed once per planner
# cycle (304 s at 10,000 hosts), and against all pairs a lossy host's 30 s of evidence would
# never be a majority.
# The thresholds: dashboards/pingmesh.toml, which `rdmactl mesh` reads too.
MESH = tomllib.loads((ROOT / "dashboards/pingmesh.toml").read_text())
MESH_LOSS_RATIO = MESH["loss_ratio"]
MESH_WINDOW = f"{MESH['window_seconds']}s"
MESH_MIN_COUNTERPARTS = MESH["min_counterparts"]
MESH_LATENCY_FACTOR = f"{MESH['latency_factor']:g}"
MESH_LATENCY_MIN_DELTA = MESH["latency_min_delta_seconds"]
MESH_LATENCY_ONSET = f"{MESH['latency_onset_seconds']}s"
# (FACTOR - 1) as a PromQL factor of the baseline: nothing when it is 1 (FACTOR 2).
LATENCY_EXCESS = "" if MESH["latency_factor"] == 2 else f"{MESH['latency_factor'] - 1:g} * "
# A pair's slow threshold: FACTOR x its baseline and at least MIN_DELTA above it.
LATENCY_THRESHOLD = ("rdma:probe_pair_latency_seconds:baseline1d\n"
                     f"      + clamp_min({LATENCY_EXCESS}rdma:probe_pair_latency_seconds:baseline1d, "
                     f"{MESH_LATENCY_MIN_DELTA})")
PAIR = "job, instance, peer, peer_rack"
NAMES = "* on (job, instance, peer) group_left (prober, target) rdma:probe_pair_names"
STRIP_PORT = '"(.*?)(?::[0-9]+)?"'


def fault_view(request, reply):
    """The failing pairs with a `fault` label: their layer when down, else the direction
    the given side calls request loss and reply loss."""
    lossy = lambda d, f: (f'label_replace(max without (direction) (rdma:probe_pair_loss_direction:ratio{MESH_WINDOW}'
                          f'{{direction="{d}"}} > {MESH_LOSS_RATIO}), "fault", "{f}", "", "")\n'
                          # A pair down in the window: its unanswered probes are the
                          # layer's, not loss (nor loss for a window after it heals).
                          f'  unless on (job, instance, peer) (max_over_time(rdma:probe_pair_status[{MESH_WINDOW}]) > 0)')
    return ('label_replace(rdma:probe_pair_status == 1, "fault", "agent", "", "")\n'
            'or label_replace(rdma:probe_pair_status == 2, "fault", "host", "", "")\n'
            'or label_replace(rdma:probe_pair_status == 3, "fault", "rdma", "", "")\n'
            f'or {lossy("request", request)}\nor {lossy("reply", reply)}')


def majority(count, total, by):
    return (f"({count} >= {MESH_MIN_COUNTERPARTS})\nand ({count} * 2 > on ({by}) group_left () "
            f"{total})")


def per_fault(name, by, unless=""):
    """The counterparts a fault counts against (see above): `name`_any counts every pair, for
    the layer faults; `name`_probed the pairs probed in the loss window, for the loss faults;
    `name` is both as one series per fault (from the two small per-host counts, so that the
    pairs are counted once each per evaluation)."""
    tail = f" {unless}" if unless else ""

    def variant(suffix):  # rdma:probe_target_pairs:all -> rdma:probe_target_pairs_any:all
        level, metric, *ops = name.split(":")
        return ":".join([level, metric + suffix, *ops])

    anyn, probed = variant("_any"), variant("_probed")
    legs = [f'label_replace({anyn}, "fault", "{f}", "", "")' for f in ("agent", "host", "rdma")]
    legs += [f'label_replace({probed}, "fault", "{f}", "", "")' for f in ("ingress", "egress")]
    return [
        (anyn, f"count by ({by}) (rdma:probe_pair_status{tail})"),
        (probed, f"count by ({by}) (rdma:probe_pair_loss:ratio{MESH_WINDOW}{tail})"),
        (name, "\nor ".join(legs)),
    ]


def as_label(expr, new, old):
    return f'label_replace({expr}, "{new}", "$1", "{old}", "(.*)")'


EXPLAINED = ("unless on (job, target) " + as_label("rdma:probe_host_culprit", "target", "host")
             + "\n  unless on (job, prober) " + as_label("rdma:probe_host_culprit", "prober", "host"))
# A slow target explains its pairs both ways, also where it is not named (a loaded mesh, see
# rdma:probe_host_slow): the pairs of a loaded mesh are no path's.
SLOW_EXPLAINED = ("unless on (job, target) rdma:probe_target_slow"
                  + "\n  unless on (job, prober) " + as_label("rdma:probe_target_slow", "prober", "target")
                  + "\n  unless on (job, prober) rdma:probe_prober_latency_loaded")

# The pair's own baseline: the median of its typical latency over the last day. It reads a
# day of samples per pair (8,641 at a 10 s scrape), which makes it the costliest rule by far
# once the pairs have that history: bench/rules-history measures it against the window's
# median. So it has a group of its own, evaluated every minute (BASELINE_INTERVAL), where
# the others run at the evaluation interval (10 s): a day's median moves little in a minute,
# the verdicts read it as an instant vector (a minute-old sample is well within Prometheus'
# 5-minute lookback), and a new pair has a baseline within a minute.
BASELINE_INTERVAL = "1m"
BASELINE_RULES = [
    ("rdma:probe_pair_latency_seconds:baseline1d",
     "quantile_over_time(0.5, rdma:probe_pair_latency_seconds:typical[1d])"),
]
PAIR_RULES = [
    # (record, expr)
    # Host names of every pair (see above).
    ("rdma:probe_pair_prober",
     f'label_replace(group by (job, instance, host, peer, peer_host) (rdma_probe_peer_status{{host!=""}}), '
     f'"prober", "$1", "host", "(.+)")\n'
     f'or label_replace(group by (job, instance, peer, peer_host) (rdma_probe_peer_status{{host=""}}), '
     f'"prober", "$1", "instance", {STRIP_PORT})'),
    ("rdma:probe_pair_names",
     'group by (job, instance, peer, prober, target) (\n'
     '  label_replace(rdma:probe_pair_prober{peer_host!=""}, "target", "$1", "peer_host", "(.+)")\n'
     f'  or label_replace(rdma:probe_pair_prober{{peer_host=""}}, "target", "$1", "peer", {STRIP_PORT})\n)'),
    # 0 ok, 1 agent (the peer's rdmad refuses or is absent), 2 host (unreachable), 3 rdma (TCP
    # works, UD requests unanswered); the worst of the pair's devices.
    ("rdma:probe_pair_status", f"max by ({PAIR}) (rdma_probe_peer_status)\n{NAMES}"),
    ("rdma:probe_pair_up", "rdma:probe_pair_status == bool 0"),
    # The perftest median of the pair's last run: there with and without per-peer histograms.
    ("rdma:probe_pair_latency_seconds:typical",
     f'max by ({PAIR}) (rdma_probe_latency_last_seconds{{kind="peer", stat="typical"}})\n{NAMES}'),
    # Lost probe requests over sent ones in the window, by direction: request (prober ->
    # peer) and reply (peer -> prober). No series for a pair that sent nothing.
    (f"rdma:probe_pair_loss_direction:ratio{MESH_WINDOW}",
     f'sum by ({PAIR}, direction) (increase(rdma_probe_lost_total{{kind="peer"}}[{MESH_WINDOW}]))\n'
     f'/ on ({PAIR}) group_left ()\n'
     f'  (sum by ({PAIR}) (increase(rdma_probe_sent_total{{kind="peer"}}[{MESH_WINDOW}])) > 0)\n{NAMES}'),
    # Both directions: the sum of the above (the counters' increases are taken once per pair,
    # not twice: at 1,000 hosts they are the costliest rules of the group).
    (f"rdma:probe_pair_loss:ratio{MESH_WINDOW}",
     f"sum without (direction) (rdma:probe_pair_loss_direction:ratio{MESH_WINDOW})"),
    # The pair's latency now, for the verdicts: the median of its runs over the window, not
    # the last run alone. One run above (or below) the threshold neither starts a latency
    # alert's `for:` nor restarts it; a delay that lasts half the window does (as Pingmesh
    # judges latency by percentiles over a window, not by single probes), and one whose every
    # run of the onset stretch is slow (rdma:probe_pair_latency_high below).
    (f"rdma:probe_pair_latency_seconds:median{MESH_WINDOW}",
     f"quantile_over_time(0.5, rdma:probe_pair_latency_seconds:typical[{MESH_WINDOW}])"),
    # Failing pairs as the target and as the prober see them.
    ("rdma:probe_pair_fault:target_view", fault_view("ingress", "egress")),
    ("rdma:probe_pair_fault:prober_view", fault_view("egress", "ingress")),
    # Pass 1: targets most of whose probers see the same fault.
    *per_fault("rdma:probe_target_pairs:all", "job, target"),
    ("rdma:probe_target_fault:all", "count by (job, target, fault) (rdma:probe_pair_fault:target_view)"),
    ("rdma:probe_target_culprit:raw",
     majority("rdma:probe_target_fault:all", "rdma:probe_target_pairs:all", "job, target, fault")),
    # Pass 2: probers failing to most of their targets, those targets left out.
    *per_fault("rdma:probe_prober_pairs", "job, prober", "unless on (job, target) rdma:probe_target_culprit:raw"),
    ("rdma:probe_prober_fault",
     "count by (job, prober, fault) (\n  rdma:probe_pair_fault:prober_view\n"
     "  unless on (job, target) rdma:probe_target_culprit:raw\n)"),
    ("rdma:probe_prober_culprit", majority("rdma:probe_prober_fault", "rdma:probe_prober_pairs", "job, prober, fault")),
    # Pass 3: targets again, the culprit probers left out.
    *per_fault("rdma:probe_target_pairs", "job, target", "unless on (job, prober) rdma:probe_prober_culprit"),
    ("rdma:probe_target_fault",
     "count by (job, target, fault) (\n  rdma:probe_pair_fault:target_view\n"
     "  unless on (job, prober) rdma:probe_prober_culprit\n)"),
    ("rdma:probe_target_culprit", majority("rdma:probe_target_fault", "rdma:probe_target_pairs", "job, target, fault")),
    # One series per culprit host and fault (value: how many counterparts see it). `a` and
    # `b` repeat the host so that Alertmanager's equal-label inhibition matches the path
    # alerts (a, b) with either end. A host its counterparts blame is named by their view
    # only: its own probes may fail at another layer (its fabric link down: its peers time
    # out, while its own UD probes fail at its DOWN port first).
    ("rdma:probe_host_culprit",
     'label_replace(label_replace(max by (job, host, fault) (\n  '
     + as_label("rdma:probe_target_culprit", "host", "target") + "\n  or ("
     + as_label("rdma:probe_prober_culprit", "host", "prober")
     + "\n    unless on (job, host) " + as_label("rdma:probe_target_culprit", "host", "target")
     + ')\n), "a", "$1", "host", "(.*)"), "b", "$1", "host", "(.*)")'),
    # Latency: a pair above its baseline (relative and absolute); a prober with most of its
    # pairs slow is loaded itself (a busy host slows all it measures) and proves nothing about
    # its targets; a target most of whose other probers see it slow is a slow host. Three
    # passes, as for the faults: the targets most of whose probers see them slow (raw), then
    # the loaded probers leaving those targets out (else a prober of a slow host with one more
    # pair slow for a moment would be "loaded", and its vote for that host lost), then the
    # targets again leaving the loaded probers out. Slow hosts that are more than half of the
    # mesh are no outliers but a loaded mesh (under TCG every round trip grows at once): none
    # is named.
    # Only pairs that are up: a down pair's last latency is from before its fault.
    # Above FACTOR x the baseline and MIN_DELTA above it, in one comparison per leg:
    # median > b + max((FACTOR - 1) b, MIN_DELTA). Two legs: the median over the window, or
    # every run of the onset stretch (its least above the threshold), so that a delay which
    # starts at once is slow after the onset stretch and not only after half the window.
    # The value is the median when it is above, else the onset stretch's least run. Per pair,
    # the onset leg holds for a whole `for:` (10 s in the lab) only when the median leg holds
    # by then too: it starts alerts sooner, and no other ones.
    ("rdma:probe_pair_latency_high",
     "(\n"
     f"  rdma:probe_pair_latency_seconds:median{MESH_WINDOW}\n"
     f"    > {LATENCY_THRESHOLD}\n"
     f"  or min_over_time(rdma:probe_pair_latency_seconds:typical[{MESH_LATENCY_ONSET}])\n"
     f"    > {LATENCY_THRESHOLD}\n"
     ")\n"
     "and on (job, instance, peer) (rdma:probe_pair_status == 0)"),
    ("rdma:probe_target_slow:raw",
     majority("count by (job, target) (rdma:probe_pair_latency_high)",
              "count by (job, target) (rdma:probe_pair_latency_seconds:typical)", "job, target")),
    ("rdma:probe_prober_latency_loaded",
     "count by (job, prober) (rdma:probe_pair_latency_high unless on (job, target) rdma:probe_target_slow:raw) * 2\n"
     "> count by (job, prober) (rdma:probe_pair_latency_seconds:typical unless on (job, target) rdma:probe_target_slow:raw)"),
    ("rdma:probe_target_slow",
     majority("count by (job, target) (rdma:probe_pair_latency_high unless on (job, prober) rdma:probe_prober_latency_loaded)",
              "count by (job, target) (rdma:probe_pair_latency_seconds:typical unless on (job, prober) rdma:probe_prober_latency_loaded)",
              "job, target")),
    ("rdma:probe_host_slow",
     'max by (job, host, a, b) (label_replace(label_replace(label_replace(\n'
     '  rdma:probe_target_slow\n'
     '  and on (job) (count by (job) (rdma:probe_target_slow) * 2\n'
     '    <= count by (job) (count by (job, target) (rdma:probe_pair_latency_seconds:typical)))\n'
     ', "host", "$1", "target", "(.*)"), "a", "$1", "host", "(.*)"), "b", "$1", "host", "(.*)"))\n'
     # A host already named for a failure or loss is named for that alone.
     'unless on (job, host) rdma:probe_host_culprit'),
]


def host_alert(name, fault, severity, summary, desc, direction=False):
    expr = f'rdma:probe_host_culprit{{fault=~"{fault}"}}'
    if direction:
        expr = f'label_replace({expr}, "direction", "$1", "fault", "(.*)")'
    return (name, expr, "2m", severity, summary, desc)


def path_legs():
    """Unexplained lossy pairs as their lossy leg a -> b: request loss is prober -> target,
    reply loss target -> prober (a one-way fault seen by both pairs is one alert)."""
    leg = lambda f, a, b: ("label_replace(label_replace(\n    (rdma:probe_pair_fault:target_view"
                           f'{{fault="{f}"}}\n    {EXPLAINED.replace(chr(10), chr(10) + "  ")}),\n'
                           f'    "a", "$1", "{a}", "(.*)"), "b", "$1", "{b}", "(.*)")')
    return f"max by (job, a, b) (\n  {leg('ingress', 'prober', 'target')}\n  or {leg('egress', 'target', 'prober')}\n)"


MESH_HELP = " `rdmactl mesh` prints the matrix and these verdicts; see the RDMA / Pingmesh dashboard."

PAIR_ALERTS = [
    host_alert("RdmaHostUnreachable", "host", "critical",
               "{{ $labels.host }} is unreachable from {{ $value }} of its pingmesh peers",
               "Most of the host's pingmesh counterparts time out connecting to it (or it to "
               "them): the host is down or its fabric link is." + MESH_HELP),
    host_alert("RdmaAgentDown", "agent", "warning",
               "rdmad on {{ $labels.host }} refuses or is absent for {{ $value }} pingmesh peers",
               "The host answers but its rdmad's probe port refuses the connection or the "
               "handshake fails (rdmad stopped, wrong --probe.secret-file, or a firewall)." + MESH_HELP),
    host_alert("RdmaHostRdmaDown", "rdma", "critical",
               "RDMA on {{ $labels.host }} does not answer {{ $value }} pingmesh peers",
               "Its rdmad answers over TCP but the UD probe requests get no reply: the host's RDMA "
               "device or its RDMA path is down (rdma link, the device's port state)." + MESH_HELP),
    host_alert("RdmaHostLinkLossy", "ingress|egress", "warning",
               "{{ $labels.host }} loses {{ $labels.direction }} probes with {{ $value }} pingmesh peers",
               f"More than {MESH_LOSS_RATIO:.0%} of the probes going {{{{ $labels.direction }}}} at this host "
               f"are lost with most of its counterparts over {MESH_WINDOW}: its link, NIC or switch port "
               "drops in that direction." + MESH_HELP, direction=True),
    ("RdmaPathDown",
     'max by (job, a, b, layer) (label_replace(label_replace(label_replace(\n  '
     '(rdma:probe_pair_fault:target_view{fault=~"agent|host|rdma"}\n  '
     + EXPLAINED + '),\n  "a", "$1", "prober", "(.*)"), "b", "$1", "target", "(.*)"), "layer", "$1", "fault", "(.*)"))',
     "2m", "warning",
     "{{ $labels.a }} cannot probe {{ $labels.b }} ({{ $labels.layer }})",
     "The probes from {{ $labels.a }} to {{ $labels.b }} fail at layer {{ $labels.layer }} while both "
     "hosts reach their other peers: the path between them (a switch, a route, an ACL)." + MESH_HELP),
    ("RdmaPathLossy", path_legs(), "2m", "warning",
     "Probe loss {{ $value | humanizePercentage }} on the way {{ $labels.a }} -> {{ $labels.b }}",
     f"More than {MESH_LOSS_RATIO:.0%} of the probe packets from {{{{ $labels.a }}}} to {{{{ $labels.b }}}} "
     f"are lost over {MESH_WINDOW} while both hosts exchange probes with their other peers without "
     "loss: the path between them in that direction." + MESH_HELP),
    # 2m like the other culprits: its evidence is already a vote (most of the host's probers,
    # each on the median of its pair over the window or every run of the onset stretch,
    # against the pair's own baseline). One pair's latency is weaker evidence, so the pair
    # alert below keeps 10m.
    ("RdmaHostLatencyHigh", "rdma:probe_host_slow", "2m", "warning",
     "{{ $labels.host }} is slow for {{ $value }} of its pingmesh peers",
     f"Most of the host's probers see their typical round trip to it (the median over {MESH_WINDOW}, "
     f"or every run of the last {MESH_LATENCY_ONSET}) "
     f"above {MESH_LATENCY_FACTOR}x "
     f"their own baseline of the last day and {MESH_LATENCY_MIN_DELTA * 1e6:.0f} us above it, while "
     "their other pairs are not: the host or its link adds delay." + MESH_HELP),
    ("RdmaPairLatencyAboveBaseline",
     'max by (job, a, b) (label_replace(label_replace(\n  (rdma:probe_pair_latency_high\n  ' + SLOW_EXPLAINED +
     '\n  ' + EXPLAINED + '),\n  "a", "$1", "prober", "(.*)"), "b", "$1", "target", "(.*)"))',
     "10m", "warning",
     "Probe latency {{ $labels.a }} -> {{ $labels.b }} is above twice its baseline",
     f"The median round trip of the pair's probes over {MESH_WINDOW} (or every run of the last "
     f"{MESH_LATENCY_ONSET}) has been more than "
     f"{MESH_LATENCY_FACTOR}x the pair's "
     f"own median of the last day, and {MESH_LATENCY_MIN_DELTA * 1e6:.0f} us above it, for 10 minutes "
     "(the alert's value is that median now, or the stretch's least run, seconds), while the prober's other pairs are not and "
     "no slow host explains it." + MESH_HELP),
]


def pingmesh():
    b = Board("rdma-pingmesh", "RDMA / Pingmesh",
              "Peer probes between hosts (rdmad --probe.peers-dns / --probe.peers-file): a "
              "source x destination matrix, the worst pairs and a per-rack rollup, from the "
              "rdma:probe_pair_* recording rules. A row is the probing host (instance), a "
              "column the probed one (peer).", ["probes", "pingmesh"], port_vars=False)
    # The board opens with the verdicts: the culprit alerts firing now, since when.
    culprits = "|".join(a[0] for a in PAIR_ALERTS)
    keys = "alertname, host, direction, a, b, layer"
    b.row("Verdicts")
    b.add(table("Verdicts (firing culprit alerts)", "The pingmesh localization's alerts "
                "firing now (Prometheus' ALERTS): a culprit host (RdmaHostUnreachable, "
                "RdmaAgentDown, RdmaHostRdmaDown: the layer; RdmaHostLinkLossy: the direction; "
                "RdmaHostLatencyHigh) or a path no host explains (RdmaPathDown, RdmaPathLossy "
                "a -> b, RdmaPairLatencyAboveBaseline), and since when (the alert's start). "
                "Empty: no fault named. `rdmactl mesh` prints the same verdicts in words.",
                f'1000 * max by ({keys}) (ALERTS_FOR_STATE{{alertname=~"{culprits}"}})\n'
                f'and on ({keys}) max by ({keys}) (ALERTS{{alertstate="firing", alertname=~"{culprits}"}})',
                unit="dateTimeAsIso", rename={"Value": "since"}), w=24, h=6)
    b.row("Matrix")

    def matrix(title, desc, expr, unit, steps):
        t = table(title, desc, expr, unit=unit)
        t["transformations"] = [{"id": "groupingToMatrix", "options": {
            "columnField": "peer", "rowField": "instance", "valueField": "Value",
            "emptyValue": "null"}}]
        t["fieldConfig"]["defaults"]["custom"] = {"cellOptions": {"type": "color-background"}}
        t["fieldConfig"]["defaults"]["thresholds"] = {"mode": "absolute", "steps": steps}
        return t

    b.add(matrix("Latency matrix (typical round trip)", "perftest median of each pair's last "
                 "probe run (rdma:probe_pair_latency_seconds:typical), source row x destination "
                 "column. A bad host shows as a hot row and column; a bad link as one cell.",
                 'rdma:probe_pair_latency_seconds:typical{instance=~"$instance"}', "s",
                 [{"color": "green", "value": None}, {"color": "orange", "value": 0.0001},
                  {"color": "red", "value": 0.001}]), w=12, h=10)
    b.add(matrix(f"Loss matrix (lost probes, {MESH_WINDOW})", "Share of probes per pair without "
                 f"an answer within the timeout over {MESH_WINDOW} (rdma:probe_pair_loss:ratio{MESH_WINDOW}).",
                 f'rdma:probe_pair_loss:ratio{MESH_WINDOW}{{instance=~"$instance"}}', "percentunit",
                 [{"color": "green", "value": None}, {"color": "orange", "value": 0.01},
                  {"color": "red", "value": 0.05}]), w=12, h=10)
    b.row("Culprits")
    b.add(table("Culprit hosts", "The hosts the pingmesh localization blames "
                "(rdma:probe_host_culprit): the fault (agent, host, rdma: the layer; ingress, "
                "egress: the lossy direction) and how many of the host's counterparts see it. "
                "The alerts RdmaHostUnreachable, RdmaAgentDown, RdmaHostRdmaDown and "
                "RdmaHostLinkLossy say the same after their `for:`; `rdmactl mesh` prints it "
                "with the paths no host explains.",
                "rdma:probe_host_culprit", exclude=("a", "b")), w=24)
    b.row("Worst pairs")
    b.add(table("Pairs furthest above their baseline", "The 10 pairs whose typical latency is "
                "highest relative to their own median of the last day.",
                'topk(10, rdma:probe_pair_latency_seconds:typical{instance=~"$instance"}\n'
                '  / rdma:probe_pair_latency_seconds:baseline1d)'), w=12)
    b.add(table("Unreachable pairs", "Pairs whose last probe failed (rdma:probe_pair_up == 0).",
                'rdma:probe_pair_up{instance=~"$instance"} == 0'), w=12)
    b.row("Per rack")
    b.add(timeseries("Typical latency by destination rack", "Mean of the pairs' typical latency "
                     "per destination rack (peer_rack, from the peers file).",
                     'avg by (peer_rack) (rdma:probe_pair_latency_seconds:typical{instance=~"$instance"})',
                     "{{peer_rack}}", unit="s"))
    b.add(timeseries("Probe loss by destination rack", "Mean lost-request share per "
                     "destination rack.",
                     f'avg by (peer_rack) (rdma:probe_pair_loss:ratio{MESH_WINDOW}{{instance=~"$instance"}})',
                     "{{peer_rack}}", unit="percentunit"))
    b.add(timeseries("Peers discovered", "Peers per discovery source (static, dns, file) and "
                     "peers planned per round (rdma_probe_discovered_peers, "
                     "rdma_probe_pinglist_peers).",
                     'sum by (instance, source) (rdma_probe_discovered_peers{instance=~"$instance"})',
                     "{{instance}} {{source}}"))
    return b


def cat_metrics(pairs):
    """The exported metrics of (catalog family, counter) pairs, in order; the ones rdmad does
    not export (or the catalog lacks) are left out."""
    out = []
    for fam, name in pairs:
        m = METRIC_OF.get((fam, name))
        if m and m not in out:
            out.append(m)
    return out


def explain_lines(pairs):
    """One line per catalog counter: its summary and the `rdmactl explain` command."""
    lines = []
    for fam, name in pairs:
        c = next((c for c in FAMILIES.get(fam, {"counters": []})["counters"]
                  if c["name"] == name and c["metric"]), None)
        if c:
            lines.append(f"- {counter_doc(c)} Explain: `rdmactl explain {shlex.quote(name)} --driver {fam}`")
    return "\n".join(lines)


# ECN / DCQCN: the notification point (the receiver: ECN-marked packets in, CNPs out) and the
# reaction point (the sender: CNPs in, rate cuts), per driver, from the catalog.
ECN_NP = [("mlx5", "np_ecn_marked_roce_packets"), ("mlx5", "np_cnp_sent"),
          ("irdma", "RxECNMrkd"), ("irdma", "cnpSent"),
          ("bnxt_re", "rx_ecn_marked_pkts"), ("bnxt_re", "tx_cnp_pkts"),
          ("bnxt_re", "np_cnp_pkts")]  # tx_cnp_pkts' name from kernel 6.18 on
ECN_RP = [("mlx5", "rp_cnp_handled"), ("mlx5", "rp_cnp_ignored"),
          ("irdma", "cnpHandled"), ("irdma", "cnpIgnored"), ("bnxt_re", "rx_cnp_pkts")]
LINK_ERRORS = [("ib_pma", "symbol_error"), ("netdev", "symbol_errors"),
               ("netdev", "crc_errors"), ("ib_pma", "port_rcv_errors")]
LINK_RECOVERY = [("ib_pma", "link_error_recovery"), ("ib_pma", "link_downed"),
                 ("rxe", "link_downed"), ("netdev", "link_down_events")]
NETDEV_SEL = PORT_SEL + ', netdev=~"$netdev"'


def roce():
    netdev_var = query_var("netdev", "Netdev", 'label_values(rdma_netdev_info{instance=~'
                                               '"$instance", device=~"$device"}, netdev)')
    b = Board("rdma-roce", "RDMA / RoCE fabric",
              "The Ethernet side of RoCE ports: PFC pause frames and pause time per priority, "
              "NIC discards, ECN/CNP (DCQCN) counters side by side per port, link errors and "
              "link recovery, the link's width and rate. `rdmactl doctor roce` on the host "
              "checks the configuration behind them (PFC priority, DSCP map, ECN, MTU).",
              ["roce", "netdev"], extra_vars=[netdev_var])
    pause = "rdma_netdev_pause_frames_total"
    pause_t = "rdma_netdev_pause_duration_seconds_total"
    legend = "{{instance}} {{device}}/{{port}} {{netdev}} prio {{priority}}"
    b.row("Priority flow control (pause)")
    for direction, what in (("rx", "received from the link partner: this port was told to "
                             "stop sending on the priority"),
                            ("tx", "sent by this port: its receive buffer for the priority "
                             "was filling up")):
        b.add(timeseries(f"Pause frames {direction} per priority",
                         f"Pause (XOFF) frames per second {what} (`{pause}`, "
                         f"direction=\"{direction}\"; priority `global` is 802.3x link pause)."
                         "\n\n" + explain_lines([("netdev", "pause_frames")]),
                         f'sum by (instance, device, port, netdev, priority) (rate({pause}'
                         f'{{{NETDEV_SEL}, direction="{direction}"}}[$__rate_interval]))',
                         legend, unit="pps"))
    b.add(timeseries("Paused fraction of time per priority",
                     f"rate() of the pause duration (`{pause_t}`): the share of time the port "
                     "was paused (rx: told to stop; tx: telling its partner to stop); 1 means "
                     "paused all the time, a pause storm. mlx5 and bnxt_en report it, ice does "
                     "not.\n\n" + explain_lines([("netdev", "pause_duration")]),
                     f'sum by (instance, device, port, netdev, direction, priority) (rate('
                     f'{pause_t}{{{NETDEV_SEL}}}[$__rate_interval]))',
                     "{{instance}} {{device}}/{{port}} {{netdev}} {{direction}} prio {{priority}}",
                     unit="percentunit"), w=24)
    b.row("Drops")
    b.add(timeseries("NIC discards", "Frames the adapter dropped per second, by direction "
                     "and reason (`rdma_netdev_discards_total`: port = no buffer space at the "
                     "port, out_of_buffer = no receive descriptor posted). On a lossless "
                     "priority each one is a RoCE retransmission.\n\n"
                     + explain_lines([("netdev", "discards")]),
                     f'sum by (instance, device, port, netdev, direction, reason) (rate('
                     f'rdma_netdev_discards_total{{{NETDEV_SEL}}}[$__rate_interval]))',
                     "{{instance}} {{device}}/{{port}} {{netdev}} {{direction}} {{reason}}",
                     unit="pps"))
    # bnxt_re: rx_out_of_buffer until kernel 6.17, out_of_buffer from 6.18 on.
    oob = [("mlx5", "out_of_buffer"), ("bnxt_re", "rx_out_of_buffer"), ("bnxt_re", "out_of_buffer")]
    b.add(timeseries("RDMA receive queue out of buffer", "Packets the RDMA device dropped "
                     "because the receive queue had no posted buffer (the RDMA counterpart of "
                     "the NIC's out_of_buffer).\n\n" + explain_lines(oob),
                     labelled_rates(cat_metrics(oob)),
                     "{{instance}} {{device}}/{{port}} {{counter}}", unit="pps"))
    b.add(timeseries("Standard MAC and PHY statistics", "The kernel's standard statistics "
                     "over ethtool netlink where the driver has them "
                     "(rdma_netdev_standard_frames_total: groups eth-phy, eth-mac, eth-ctrl, "
                     "rmon), per second, by group and statistic.\n\n"
                     + explain_lines([("netdev", "standard_frames")]),
                     f'sum by (instance, device, port, netdev, group, stat) (rate('
                     f'rdma_netdev_standard_frames_total{{{NETDEV_SEL}}}[$__rate_interval]))',
                     "{{instance}} {{netdev}} {{group}} {{stat}}", unit="pps"))
    b.add(stat("ethtool netlink requests failing", "Netdevs whose last ethtool netlink "
               "request failed (rdma_netdev_standard_read_errors, by request: pause, stats, "
               "fec): the netdev vanished, the kernel refused, or the reply was malformed. "
               "Only that request's series are missing; a driver without the operation "
               "counts 0.",
               f'sum(rdma_netdev_standard_read_errors{{{NETDEV_SEL}}})',
               thresholds=RED_IF_POSITIVE))
    b.row("Congestion: ECN and CNP (DCQCN), per port")
    b.add(timeseries("Notification point: ECN-marked in, CNPs out", "The receiving side of "
                     "DCQCN per port: RoCE packets that arrived with ECN Congestion "
                     "Experienced set, and the congestion notification packets (CNPs) sent "
                     "back to their senders. Read it next to the reaction point panel of the "
                     "same port.\n\n" + explain_lines(ECN_NP),
                     labelled_rates(cat_metrics(ECN_NP)),
                     "{{instance}} {{device}}/{{port}} {{counter}}", unit="pps"))
    b.add(timeseries("Reaction point: CNPs handled / ignored", "The sending side of DCQCN "
                     "per port: CNPs received and acted on (the sender cut its rate) or "
                     "ignored. CNPs handled without pauses falling means DCQCN works; pauses "
                     "without CNPs means ECN is off somewhere on the path.\n\n"
                     + explain_lines(ECN_RP),
                     labelled_rates(cat_metrics(ECN_RP)),
                     "{{instance}} {{device}}/{{port}} {{counter}}", unit="pps"))
    b.row("Link quality")
    b.add(timeseries("Symbol and CRC errors", "Physical-layer errors per second: symbol "
                     "errors (InfiniBand PMA and the NIC's PHY), frames with a bad FCS, "
                     "received packets with errors. Rising counters on one port point at its "
                     "cable, optic or connector.\n\n" + explain_lines(LINK_ERRORS),
                     labelled_rates(cat_metrics(LINK_ERRORS)),
                     "{{instance}} {{device}}/{{port}} {{counter}}", unit="cps"))
    b.add(timeseries("Link error recovery and link downs", "Link retraining events and "
                     "link-down transitions per second (InfiniBand PMA link_error_recovery and "
                     "link_downed, rxe's link_downed, the NIC's link down events): a flapping "
                     "link shows here first.\n\n" + explain_lines(LINK_RECOVERY),
                     labelled_rates(cat_metrics(LINK_RECOVERY)),
                     "{{instance}} {{device}}/{{port}} {{counter}}", unit="cps"))
    b.row("Link width and rate")
    b.add(table("Port links", "One row per port: netdev, state, active width and lane speed "
                "(rdma_port_info); the value is the active rate. rdmad exports no supported "
                "maximum: compare with the port's best of the last day (next panels).",
                f'rdma_port_info{{{PORT_SEL}}}\n  * on (instance, device, port) group_left ()\n'
                f'  rdma_port_rate_bytes_per_second{{{PORT_SEL}}}',
                unit="Bps", rename={"Value": "rate"}), w=24, h=6)
    b.add(two_lines("Active rate vs its 1-day maximum", "The port's active rate "
                    "(rdma_port_rate_bytes_per_second) and the highest it had over the last "
                    "day: a line below its maximum is a link that renegotiated down "
                    "(RdmaLinkRateDegraded).",
                    f'rdma_port_rate_bytes_per_second{{{PORT_SEL}}}', "now",
                    f'max_over_time(rdma_port_rate_bytes_per_second{{{PORT_SEL}}}[1d])',
                    "1d max", unit="Bps"))
    b.add(two_lines("Effective (data) rate", "What the link carries after encoding "
                    "(rdma_port_effective_rate_bytes_per_second): InfiniBand lanes times the "
                    "lane's data rate after 8b/10b or 64b/66b; Ethernet the netdev's speed, "
                    "already the MAC data rate. Next to it the lane rate "
                    "(rdma_port_lane_rate_bytes_per_second).",
                    f'rdma_port_effective_rate_bytes_per_second{{{PORT_SEL}}}', "effective",
                    f'rdma_port_lane_rate_bytes_per_second{{{PORT_SEL}}}', "per lane",
                    unit="Bps"))
    b.add(table("FEC mode", "The forward error correction the NIC runs on each netdev "
                "(ethtool netlink FEC_GET: rdma_netdev_fec_info's active and auto labels). "
                "Both ends of a link must agree; a port without FEC where the optic needs it "
                "shows as symbol and CRC errors.",
                f'rdma_netdev_fec_info{{{NETDEV_SEL}}}', exclude=("Value",)))
    b.add(two_lines("Active width vs its 1-day maximum", "Lanes of the active link "
                    "(rdma_port_link_width_lanes, 4 for 4X) and the most it had over the last "
                    "day: fewer lanes than before is a degraded link (RdmaLinkWidthDegraded).",
                    f'rdma_port_link_width_lanes{{{PORT_SEL}}}', "now",
                    f'max_over_time(rdma_port_link_width_lanes{{{PORT_SEL}}}[1d])', "1d max"))
    return b


RES_TYPES = [("qp", "Queue pairs"), ("cq", "Completion queues"), ("mr", "Memory regions"),
             ("pd", "Protection domains"), ("cm_id", "CM IDs"), ("ctx", "Contexts"),
             ("srq", "Shared receive queues")]


def resources():
    b = Board("rdma-resources", "RDMA / Resources",
              "Live RDMA objects per device (rdma_resources, the RDMA netlink resource summary "
              "that `rdma resource show` prints).", ["resources"], port_vars=False)
    b.row("Now")
    for t, title in RES_TYPES:
        b.add(stat(title, f"Live {title.lower()} ({t}) on the selected devices now. The kernel "
                   "creates some itself (an idle rxe device holds 1 PD, 1 CQ and 1 QP for GSI).",
                   f'sum(rdma_resources{{{DEV_SEL}, type="{t}"}})'), w=3, h=4)
    b.add(stat("Cgroups at their RDMA limit", "Cgroups whose rdma.current has reached "
               "rdma.max (rdma_cgroups_at_limit): their next create of that resource fails. "
               "`rdmactl doctor` names them.",
               f'sum(rdma_cgroups_at_limit{{{DEV_SEL}}}) or vector(0)',
               thresholds=RED_IF_POSITIVE, color_mode="background"), w=3, h=4)
    b.row("Over time")
    for t, title in RES_TYPES[:3]:
        b.add(timeseries(f"{title} per device", f"Live {title.lower()} per device. A line that "
                         "only climbs while the workload is steady is a leak (objects created and "
                         "never destroyed).",
                         f'rdma_resources{{{DEV_SEL}, type="{t}"}}', "{{instance}} {{device}}"),
              w=8)
    b.add(timeseries("All objects per device and type", "Every object kind of "
                     "rdma_resources, per device.", f'rdma_resources{{{DEV_SEL}}}',
                     "{{instance}} {{device}} {{type}}"), w=12)
    b.add(timeseries("Object churn", "Net change of each object kind over 5 minutes (delta): "
                     "positive while applications create objects, negative as they free them.",
                     f'delta(rdma_resources{{{DEV_SEL}}}[5m])',
                     "{{instance}} {{device}} {{type}}"), w=12)
    b.row("Who")
    owner = "instance, comm, cgroup, pod_uid, job_id"
    b.add(table("Top owners by QPs", "The 20 owners (process name, cgroup, pod, Slurm job) holding the "
                "most QPs now (rdma_owner_objects, the netlink_owners collector). comm=\"kernel\" "
                "are kernel users (the GSI QP); comm=\"other\" the owners beyond "
                "--collector.netlink_owners.max-owners. `rdmactl resources --by process` on "
                "the host lists them with pids.",
                f'topk(20, sum by ({owner}) (rdma_owner_objects{{{DEV_SEL}, type="qp"}}))',
                rename={"Value": "QPs"}), w=12, h=8)
    b.add(timeseries("QPs in ERR by owner", "QPs in the ERR state per owner "
                     "(rdma_owner_qps{state=\"ERR\"}): a QP goes to ERR when a work request "
                     "fails and stays there until its program resets or destroys it. 0 per "
                     "instance when none is in ERR.",
                     f'sum by ({owner}) (rdma_owner_qps{{{DEV_SEL}, state="ERR"}}) or on(instance) '
                     f'(0 * sum by (instance) (rdma_owner_objects{{{DEV_SEL}, type="qp"}}))',
                     "{{instance}} {{comm}} {{cgroup}} {{pod_uid}} {{job_id}}"), w=12)
    b.add(timeseries("Objects per cgroup", "Every RDMA object kind per cgroup "
                     "(rdma_owner_objects summed over devices and processes).",
                     f'sum by (instance, cgroup, type) (rdma_owner_objects{{{DEV_SEL}}})',
                     "{{instance}} {{cgroup}} {{type}}"), w=12)
    b.add(table("RDMA objects per Slurm job", "Every RDMA object kind per Slurm job "
                "(rdma_owner_objects of owners whose cgroup is a slurmstepd job's, summed over "
                "steps, processes and devices). `rdmactl resources --by job` on the node "
                "prints the same.",
                f'sum by (instance, job_id, type) (rdma_owner_objects{{{DEV_SEL}, job_id!=""}})',
                rename={"Value": "objects"}), w=12, h=8)
    b.add(timeseries("QPs per Slurm job", "QPs per Slurm job over time: a job's QPs should "
                     "rise at its start and fall to none at its end; QPs left after the job "
                     "ended belong to a process that outlived it.",
                     f'sum by (instance, job_id) (rdma_owner_objects{{{DEV_SEL}, type="qp", '
                     f'job_id!=""}})', "{{instance}} job {{job_id}}"), w=12)
    b.add(table("RDMA cgroups: share of the limit used", "rdma.current / rdma.max per cgroup, "
                "device and resource (the rdma_cgroup collector; 0 where unlimited). 1 means "
                "the next create fails.",
                f'rdma_cgroup_current{{{DEV_SEL}}} / rdma_cgroup_max{{{DEV_SEL}}}',
                unit="percentunit", rename={"Value": "used"}), w=12, h=8)
    return b



# ---------------------------------------------------------------------------------------------
# Prometheus recording and alerting rules (dashboards/rules/rdma.rules.yml)

def rule_rate(metrics, window="5m"):
    parts = []
    for m in metrics:
        v = m.removeprefix("rdma_").removesuffix("_total")
        parts.append(f'label_replace(rate({m}[{window}]), "counter", "{v}", "", "")')
    return "\n  or ".join(parts)


def yaml_block(text, indent):
    pad = " " * indent
    return "|-\n" + "\n".join(pad + line for line in text.splitlines())


ALERTS = [
    # (alert, expr, for, severity, summary, description)
    ("RdmaExporterDown", 'up{job="rdmad"} == 0', "2m", "critical",
     "rdmad on {{ $labels.instance }} cannot be scraped",
     "Prometheus failed to scrape rdmad for 2 minutes: no RDMA metrics from this host. Check "
     "that rdmad runs (systemctl status rdmad) and listens on its port."),
    ("RdmaCollectorFailing", "rdma_scrape_collector_success == 0", "5m", "warning",
     "rdmad collector {{ $labels.collector }} fails on {{ $labels.instance }}",
     "The collector's last runs failed, so its metrics are missing. rdmad logs the error; "
     "RDMAD_LOG=debug shows more."),
    ("RdmaSysfsReadErrors", "rdma_sysfs_read_errors > 0", "30m", "info",
     "rdmad cannot read {{ $value }} counter files of {{ $labels.device }} on {{ $labels.instance }}",
     "Some counter files of the device could not be read, parsed or exported (EINVAL, 'N/A (no "
     "PMA)', a name clash). Run rdmad with RDMAD_LOG=debug to see which."),
    ("RdmaPortNotActive",
     "(rdma_port_state_id != 4)\n  * on (instance, device, port) group_left (state, phys_state, netdev, link_layer)\n  rdma_port_info",
     "2m", "critical",
     "RDMA port {{ $labels.device }}/{{ $labels.port }} on {{ $labels.instance }} is {{ $labels.state }}",
     "The port's logical state is {{ $labels.state }} (physical {{ $labels.phys_state }}, netdev "
     "{{ $labels.netdev }}), not ACTIVE: no RDMA traffic can use it. Check the cable, the switch "
     "port and the subnet manager (InfiniBand) or the netdev (RoCE)."),
    # RoCE fabric (the netdev collector's curated families; `rdmactl doctor roce` on the host).
    ("RdmaNetdevPauseStorm",
     "max by (job, instance, device, port, netdev, direction, priority) (\n"
     "  rate(rdma_netdev_pause_duration_seconds_total[5m])\n) > 0.5",
     "5m", "critical",
     "Pause storm on {{ $labels.instance }} {{ $labels.netdev }} ({{ $labels.direction }}, priority {{ $labels.priority }})",
     "The netdev was paused more than half of the time for 5 minutes: a peer or this host "
     "cannot drain the lossless priority, and PFC spreads the stall upstream. Run "
     "`rdmactl doctor roce` on the host and look for the receiver that discards."),
    ("RdmaNetdevDiscardsRising",
     "sum by (job, instance, device, port, netdev, direction, reason) (\n"
     "  rate(rdma_netdev_discards_total[5m])\n) > 0",
     "10m", "warning",
     "{{ $labels.netdev }} on {{ $labels.instance }} discards {{ $labels.direction }} frames ({{ $labels.reason }})",
     "The NIC dropped frames for 10 minutes (out_of_buffer: the host did not post buffers "
     "fast enough; port: the NIC's buffers were full). On a lossless priority each drop is a "
     "RoCE retransmission. `rdmactl doctor roce` checks PFC on the RDMA priority."),
    ("RdmaNetdevSymbolErrorsRising",
     "sum by (job, instance, device, port, netdev) (\n"
     "  rate(rdma_netdev_symbol_errors_total[5m])\n) > 0",
     "15m", "warning",
     "Symbol errors rising on {{ $labels.instance }} {{ $labels.netdev }}",
     "The physical layer of the link keeps seeing symbol errors: a marginal cable, optic or "
     "connector. Reseat or replace it before it starts dropping frames."),
]

# Link quality (the RoCE fabric dashboard's link rows). rdmad exports the active rate and
# width only (sysfs `rate`; no file says what the port supports), so "below the maximum" is
# below the port's own best of the last day, while the port is ACTIVE (a port that is down is
# RdmaPortNotActive's).
PORT_KEY = "job, instance, device, port"
LINK_ALERTS = [
    ("RdmaLinkErrorRecoveryRising",
     f"sum by ({PORT_KEY}) (\n  rate({METRIC_OF[('ib_pma', 'link_error_recovery')]}[5m])\n) > 0",
     "0m", "warning",
     "Link error recovery on {{ $labels.instance }} {{ $labels.device }}/{{ $labels.port }}",
     "The port's link retrained (InfiniBand PMA link_error_recovery rose in the last 5 "
     "minutes): the physical link failed and recovered, dropping the packets in flight. "
     "Repeated, it is a marginal cable or optic. See the RDMA / RoCE fabric dashboard; "
     "`rdmactl explain link_error_recovery`."),
    ("RdmaPortSymbolErrorsRising",
     f"sum by ({PORT_KEY}) (\n  rate({METRIC_OF[('ib_pma', 'symbol_error')]}[5m])\n) > 0",
     "15m", "warning",
     "Symbol errors rising on {{ $labels.instance }} {{ $labels.device }}/{{ $labels.port }}",
     "The port's InfiniBand PMA symbol_error counter kept rising for 15 minutes: the physical "
     "layer decodes bad symbols (cable, optic, connector). The NIC's own symbol errors are "
     "RdmaNetdevSymbolErrorsRising. `rdmactl explain symbol_error`."),
    ("RdmaLinkRateDegraded",
     "(\n  rdma_port_rate_bytes_per_second\n  < max_over_time(rdma_port_rate_bytes_per_second[1d])\n)"
     "\nand on (job, instance, device, port) (rdma_port_state_id == 4)",
     "15m", "warning",
     "{{ $labels.device }}/{{ $labels.port }} on {{ $labels.instance }} runs below its rate of the last day",
     "The port is ACTIVE at a lower rate than it had in the last day ({{ $value | humanize }}B/s "
     "now): the link renegotiated to a lower speed or fewer lanes (bad lane, cable, optic, or "
     "a switch port forced down). Check `ethtool <netdev>` (speed, supported link modes) and "
     "the port's rdma_port_info link_width / link_speed."),
    ("RdmaLinkWidthDegraded",
     "(\n  rdma_port_link_width_lanes\n  < max_over_time(rdma_port_link_width_lanes[1d])\n)"
     "\nand on (job, instance, device, port) (rdma_port_state_id == 4)",
     "15m", "warning",
     "{{ $labels.device }}/{{ $labels.port }} on {{ $labels.instance }} lost lanes",
     "The port is ACTIVE with {{ $value }} lane(s), fewer than it had in the last day: a lane "
     "failed and the link trained narrower (the rate drops with it). Reseat or replace the "
     "cable or optic."),
]

RULE_ALERTS = [
    # (doctor rule id, alert, threshold per second, for, severity)
    ("link-down", "RdmaLinkDowned", 0, "0m", "critical"),
    ("rnr-retry-exhausted", "RdmaRnrRetryExhausted", 0, "0m", "warning"),
    ("transport-retry-exhausted", "RdmaTransportRetryExhausted", 0, "0m", "warning"),
    ("remote-access", "RdmaRemoteAccessErrors", 0, "0m", "warning"),
    ("rnr-naks", "RdmaRnrNakRateHigh", 100, "10m", "warning"),
]

PROBE_ALERT = (
    "RdmaProbeFailures",
    # Peer probes are the pingmesh's (the localization alerts); 1m so that it resolves soon.
    'sum by (job, instance, device, status) (increase(rdma_probe_failures_total{kind!="peer"}[1m])) > 0',
    "0m", "warning",
    "RDMA probes fail on {{ $labels.instance }} {{ $labels.device }}: {{ $labels.status }}",
    "rdmad's active probes failed {{ $value | humanize }} times in the last minute with "
    "{{ $labels.status }}: RDMA does not work end to end right now. See the RDMA / Probes "
    "dashboard; `rdmactl explain` covers the counters the same failure moves.")


def rules_yaml():
    out = ["# Prometheus rules for rdmad, generated by dashboards/gen.py from catalog/rules.toml:",
           "# do not edit, edit the generator. Recording rules per doctor rule (events per second",
           "# per port, summed over the rule's counters on every driver), alerts for the common",
           "# failures. Alerts on `up` expect the scrape job to be named \"rdmad\".",
           "groups:", "  - name: rdma-recording", "    rules:"]
    for r in RULES:
        metrics = metrics_named(r["counters"])
        if not metrics:
            continue
        expr = f"sum by (job, instance, device, port) (\n  {rule_rate(metrics)}\n)"
        out += ["      - record: rdma:port_rule_events:rate5m",
                "        expr: " + yaml_block(expr, 10),
                "        labels:", f"          rule: {r['id']}"]
    out += ["  - name: rdma-pingmesh-baseline", f"    interval: {BASELINE_INTERVAL}", "    rules:"]
    for record, expr in BASELINE_RULES:
        out += [f"      - record: {record}", "        expr: " + yaml_block(expr, 10)]
    out += ["  - name: rdma-pingmesh", "    rules:"]
    for record, expr in PAIR_RULES:
        out += [f"      - record: {record}", "        expr: " + yaml_block(expr, 10)]
    out += ["  - name: rdma-alerts", "    rules:"]

    def alert(name, expr, for_, sev, summary, desc, extra=()):
        lines = [f"      - alert: {name}", "        expr: " + yaml_block(expr, 10),
                 f"        for: {for_}", "        labels:", f"          severity: {sev}",
                 "        annotations:", f"          summary: {json.dumps(summary)}",
                 f"          description: {json.dumps(desc)}"]
        lines += [f"          {k}: {json.dumps(v)}" for k, v in extra]
        return lines

    for a in ALERTS:
        out += alert(*a)
    rules = {r["id"]: r for r in RULES}
    for rid, name, threshold, for_, sev in RULE_ALERTS:
        r = rules[rid]
        expr = f'rdma:port_rule_events:rate5m{{rule="{rid}"}} > {threshold}'
        # The catalog's finding and advice are in the dashboard panel and `rdmactl doctor`;
        # the alert names them without copying them (catalog edits do not change alerts).
        out += alert(name, expr, for_, sev,
                     f"{r['title']} on {{{{ $labels.instance }}}} {{{{ $labels.device }}}}/"
                     f"{{{{ $labels.port }}}}",
                     f"The counters of the doctor rule {rid} rose on {{{{ $labels.device }}}}/"
                     f"{{{{ $labels.port }}}} (events per second over 5m: the alert's value). What "
                     f"they mean and what to do: the panel \"{r['title']} [{r['severity']}]\" of the "
                     "RDMA / Errors and diagnosis dashboard, `rdmactl doctor` on the host, and "
                     "`rdmactl explain COUNTER`.")
    out += alert(*PROBE_ALERT)
    for a in PAIR_ALERTS:
        out += alert(*a)
    out += ["  - name: rdma-link", "    rules:"]
    for a in LINK_ALERTS:
        out += alert(*a)
    return "\n".join(out) + "\n"


BOARDS = {"rdma-fleet.json": fleet, "rdma-errors.json": errors, "rdma-probes.json": probes,
          "rdma-resources.json": resources, "rdma-pingmesh.json": pingmesh,
          "rdma-roce.json": roce}


def render():
    out = {name: json.dumps(f().json(), indent=2, sort_keys=False) + "\n"
           for name, f in BOARDS.items()}
    out["rules/rdma.rules.yml"] = rules_yaml()
    return out


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for name, content in render().items():
        path = OUT / name
        if check:
            if not path.exists() or path.read_text() != content:
                stale.append(name)
        else:
            path.write_text(content)
    if stale:
        print("dashboards out of date, run dashboards/gen.py: " + ", ".join(stale))
        sys.exit(1)


if __name__ == "__main__":
    main()
