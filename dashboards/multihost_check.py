#!/usr/bin/env python3
"""The pingmesh on a real Prometheus: the host-side checks of tests/multihost-prometheus, which
boots a 4-host lab (one rdmad per host, peers from the DNS name rdmad.lab alone, UD probes)
and a Prometheus on this machine that scrapes the four through the lab's forwards (the
target labels instance=hK and host=hK) with the rules of dashboards/rules/ (`for:` shortened
in a temporary copy). This drives the faults through `rdmactl lab fault|exec` and checks the
results through the Prometheus HTTP API:

  1. the pingmesh dashboard's matrix query (read from dashboards/rdma-pingmesh.json) returns
     all 12 ordered pairs, every pair probed over UD;
  2. the fault matrix (dashboards/fault_matrix.py), with a real Alertmanager: link down,
     20% ingress loss, 20% egress loss, a partition, a one-way partition, rdmad killed,
     rxe0 removed, +2 ms delay (more where the lab's baseline is over 0.67 ms: delay_inject),
     a host killed; for each the culprit alerts, the pair alerts left firing, seconds to
     firing and to resolved, one notification per culprit. During the egress loss on h3:
     only pairs with h3 show loss, the localization names h3 alone
     (RdmaHostLinkLossy{host="h3", direction="egress"}) with no path alert, the dashboard's
     verdicts panel names it, and `rdmactl mesh --prometheus` (text and --json, printed)
     names it; h4 killed: its pairs go unreachable, RdmaHostUnreachable{host="h4"} fires
     and no path alert does;
  3. h4 out of DNS: its series vanish (staleness: an instant query no longer returns them);
  4. h4 back in DNS: every pair answers, alerts resolve;
  5. h3 and h4 out of DNS: h1 and h2 probe one peer each with the QPs (`rdma res`) they had
     with three (UD: one QP per device whatever the mesh), then back: the 12 pairs again;
  6. five minutes without a fault: no alert fires, no notification; then the notifications
     of each fault (one per culprit) and the matrix table.

    dashboards/multihost_check.py --prometheus URL --rdmactl PATH --control SOCKET \
        --start-rdmad-file FILE --alertmanager URL --hook-port PORT [--interval 2]

Every wait is bounded; every fault is undone on the way out (netem cleared, hosts back in
DNS, hosts cleared, partitions healed, links up; a killed h4 is restarted by the checks
themselves, or ends with the lab).
Prints one line per check and "N passed, M failed"; exits 1 on any failure.
"""
import argparse
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import fault_matrix
from fault_matrix import Fault, Matrix
from live_check import DASH, api, get, resolve_vars, substitute

HOSTS = ["h1", "h2", "h3", "h4"]
PROBE_PORT = 9737
MATRIX_PANEL = "Latency matrix (typical round trip)"
LOSS_PANEL = "Loss matrix (lost probes, 30s)"
VERDICTS_PANEL = "Verdicts (firing culprit alerts)"
LOSS_THRESHOLD = 0.02  # MESH_LOSS_RATIO of dashboards/gen.py: a pair is lossy above it
PATH_ALERTS = ["RdmaPathDown", "RdmaPathLossy", "RdmaPairLatencyAboveBaseline"]


def peer_of(host):
    return f"10.2.0.{host[1:]}:{PROBE_PORT}"


def host_of(peer):
    ip = peer.rsplit(":", 1)[0]
    return "h" + ip.rsplit(".", 1)[1] if ip.startswith("10.2.0.") else peer


ALL_PAIRS = {(a, b) for a in HOSTS for b in HOSTS if a != b}


class Run:
    def __init__(self, a):
        self.base = a.prometheus.rstrip("/")
        self.rdmactl = a.rdmactl
        self.control = a.control
        self.start_rdmad = Path(a.start_rdmad_file).read_text().strip()
        self.interval = a.interval
        self.all_pairs = ALL_PAIRS
        self.passed = 0
        self.failed = 0
        self.netem_on = False
        self.dns_out = set()
        self.qps_3_peers = {}

    # -- results
    def check(self, name, ok, detail):
        if ok:
            self.passed += 1
            print(f"ok {name}: {detail}", flush=True)
        else:
            self.failed += 1
            print(f"FAILED {name}: {detail}", flush=True)
        return ok

    # -- the lab
    def lab(self, *args, timeout=120):
        cmd = [self.rdmactl, "lab", *args[:1], "--control", self.control, *args[1:]]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return r.returncode, (r.stdout + r.stderr).strip()

    def fault(self, *words, timeout=120):
        code, out = self.lab("fault", *words, timeout=timeout)
        print(f"   fault {' '.join(words)}: {out.splitlines()[-1] if out else ''} (exit {code})",
              flush=True)
        if code != 0:
            raise RuntimeError(f"lab fault {' '.join(words)} failed: {out}")

    def exec(self, host, script, timeout=120):
        code, out = self.lab("exec", host, script, timeout=timeout)
        if code != 0:
            raise RuntimeError(f"lab exec {host}: exit {code}: {out}")
        return out

    def dns(self, host, present):
        """Put `host` in rdmad.lab or take it out (h1's dnsmasq answers rdmad.lab from
        /etc/lab/dns-hosts and re-reads it on SIGHUP)."""
        line = f"10.2.0.{host[1:]} rdmad.lab"
        if present:
            script = (f"grep -q '^{line}$' /etc/lab/dns-hosts || "
                      f"echo '{line}' >> /etc/lab/dns-hosts; kill -HUP $(pidof dnsmasq)")
        else:
            script = f"sed -i '/^{line}$/d' /etc/lab/dns-hosts; kill -HUP $(pidof dnsmasq)"
        self.exec("h1", script)
        if present:
            self.dns_out.discard(host)
        else:
            self.dns_out.add(host)

    def qps(self, host):
        """{QP type: count} of every QP on rxe0 of `host` (`rdma res show qp`): the pingmesh
        rdmad's are the only user QPs there (the lab's own rdmad does not probe). Not by
        pid: rdma res names the thread that created a QP, not the process."""
        counts = {}
        for q in json.loads(self.exec(host, "rdma -j res show qp")):
            if q.get("ifname") == "rxe0":
                counts[q.get("type")] = counts.get(q.get("type"), 0) + 1
        return counts

    # -- Prometheus
    def query(self, expr, at=None):
        params = {"query": expr}
        if at is not None:
            params["time"] = at
        return api(self.base, "/api/v1/query", params)["result"]

    def query_range(self, expr, start, end, step):
        return api(self.base, "/api/v1/query_range",
                   {"query": expr, "start": start, "end": end, "step": step})["result"]

    def pairs(self, expr):
        """{(instance, peer host): value} of an instant query whose series are pairs."""
        out = {}
        for s in self.query(expr):
            m = s["metric"]
            if "peer" in m and "instance" in m:
                out[(m["instance"], host_of(m["peer"]))] = float(s["value"][1])
        return out

    def alerts(self, name, state="firing"):
        """Who alert `name` in `state` is about: (instance, peer host) of a per-target
        alert, (host, "") of a culprit, (a, b) of a path."""
        out = set()
        for al in get(self.base, "/api/v1/alerts")["alerts"]:
            lb = al["labels"]
            if lb.get("alertname") == name and al.get("state") == state:
                out.add((lb.get("instance") or lb.get("host") or lb.get("a"),
                         host_of(lb.get("peer", "")) or lb.get("b", "")))
        return out

    def rule_groups(self):
        return get(self.base, "/api/v1/rules")["groups"]

    def api_alerts(self):
        return get(self.base, "/api/v1/alerts")["alerts"]

    def culprits(self, name, state="firing"):
        """The label sets (host, direction) of the host alert `name` in `state`."""
        return {(al["labels"].get("host"), al["labels"].get("direction", ""))
                for al in get(self.base, "/api/v1/alerts")["alerts"]
                if al["labels"].get("alertname") == name and al.get("state") == state}

    def paths(self, state="firing"):
        """The path alerts (name, a, b) in `state`: the pair alerts no host explains."""
        return {(al["labels"]["alertname"], al["labels"].get("a"), al["labels"].get("b"))
                for al in get(self.base, "/api/v1/alerts")["alerts"]
                if al["labels"].get("alertname") in PATH_ALERTS and al.get("state") == state}

    def wait(self, what, limit, cond):
        """Evaluate cond() every interval until it returns a true value, at most limit
        seconds; returns (value, seconds waited) or (last value, None) on time-out."""
        t0 = time.time()
        last = None
        while True:
            try:
                last = cond()
            except Exception as e:  # Prometheus busy: try again until the limit
                last = None
                print(f"   ({what}: {e})", flush=True)
            if last:
                return last, time.time() - t0
            if time.time() - t0 > limit:
                return last, None
            time.sleep(self.interval)

    def panel_expr(self, title):
        board = json.loads((DASH / "rdma-pingmesh.json").read_text())
        now = time.time()
        values, _ = resolve_vars(self.base, board, {}, now - 600, now)
        for p in board["panels"]:
            if p.get("title") == title and p.get("targets"):
                return substitute(p["targets"][0]["expr"], values)
        raise SystemExit(f"rdma-pingmesh.json has no panel {title!r}")

    # -- the phases
    def targets_up(self):
        def cond():
            up = {s["metric"].get("instance"): s["value"][1]
                  for s in self.query('up{job="rdmad"}')}
            return up if sorted(up) == HOSTS and all(v == "1" for v in up.values()) else None
        up, t = self.wait("targets up", 300, cond)
        return self.check("prometheus-scrapes-the-4-rdmads", t is not None,
                          f"up{{job=\"rdmad\"}} per instance: {up} (after {t or 0:.0f} s)")

    def matrix(self, name):
        expr = self.panel_expr(MATRIX_PANEL)

        def cond():
            got = self.pairs(expr)
            return got if set(got) == ALL_PAIRS else None
        got, t = self.wait("matrix", 300, cond)
        got = got or self.pairs(expr)
        self.check(name, t is not None,
                   f"the dashboard's matrix query `{expr}` returns {len(got)} pairs "
                   f"(want the 12 ordered pairs of h1..h4; missing "
                   f"{sorted(ALL_PAIRS - set(got)) or 'none'}, extra "
                   f"{sorted(set(got) - ALL_PAIRS) or 'none'})")
        if got:
            print("   typical RTT (us): " + ", ".join(
                f"{a}->{b} {v * 1e6:.0f}" for (a, b), v in sorted(got.items())), flush=True)
        return t is not None

    def discovery_and_transport(self):
        disc = {s["metric"]["instance"]: float(s["value"][1]) for s in
                self.query('rdma_probe_discovered_peers{job="rdmad", source="dns"}')}
        self.check("every-rdmad-discovers-3-peers-from-dns", disc == {h: 3.0 for h in HOSTS},
                   f"rdma_probe_discovered_peers{{source=\"dns\"}}: {disc}")
        # rdma_probe_peer_status (under rdma:probe_pair_up) has no transport: the latency
        # series of the pair's probes say which transport they use.
        lat = 'group by (instance, peer) (rdma_probe_latency_last_seconds{job="rdmad", kind="peer", transport="%s"})'
        ud_rc = lambda: (set(self.pairs("rdma:probe_pair_up == 1")) & set(self.pairs(lat % "ud")),
                         set(self.pairs(lat % "rc")))
        _, t = self.wait("every pair up over UD", 120, lambda: ud_rc() == (ALL_PAIRS, set()))
        ud, rc = ud_rc()
        self.check("every-pair-probed-over-ud", t is not None,
                   f"{len(ud)} pairs up over UD, {len(rc)} RC peer series")
        self.qps_3_peers = {h: self.qps(h) for h in ["h1", "h2"]}

    def qps_one_peer(self):
        """h3 and h4 out of DNS: h1 and h2 probe one peer each, with the QPs they had for 3."""
        self.dns("h3", False)
        self.dns("h4", False)
        sel = 'job="rdmad", instance=~"h1|h2"'

        def cond():
            d = self.query(f'rdma_probe_discovered_peers{{{sel}, source="dns"}} == 1')
            p = self.query(f'rdma_probe_pinglist_peers{{{sel}}} == 1')
            return len(d) == 2 and len(p) == 2
        _, t = self.wait("one peer on h1 and h2", 120, cond)
        one = {h: self.qps(h) for h in ["h1", "h2"]}
        self.check("ud-qps-per-host-the-same-with-1-and-3-peers",
                   t is not None and one == self.qps_3_peers and
                   all(q.get("UD") == 1 for q in one.values()),
                   f"QPs on rxe0 by type (rdma res show qp) with 3 peers {self.qps_3_peers}, "
                   f"with 1 peer {one} (one peer after {t or 0:.0f} s)")
        self.dns("h3", True)
        self.dns("h4", True)

    def latency(self, window):
        """Mean of each pair's typical round trip (the matrix's recording rule) over the last
        `window` seconds. Not the latency histogram: per-peer histograms are opt-in, and
        without them its per-pair sum and count do not exist (this printed 0 and nan)."""
        return self.pairs(
            f'avg_over_time(rdma:probe_pair_latency_seconds:typical{{job="rdmad"}}[{window}s])')

    def netem_h3(self, t_fault, before):
        """The checks during 20% egress loss on h3 (the matrix injects and undoes it)."""
        with3 = {p for p in ALL_PAIRS if "h3" in p}
        without = ALL_PAIRS - with3

        want = {("h3", "egress")}

        def cond():
            ratio = self.pairs(self.panel_expr(LOSS_PANEL))
            firing = self.culprits("RdmaHostLinkLossy")
            ok = all(ratio.get(p, 0) > LOSS_THRESHOLD for p in with3) and want <= firing
            return (ratio, firing) if ok else None
        res, t = self.wait("loss on h3's pairs", 60, cond)
        ratio, firing = res or (self.pairs(self.panel_expr(LOSS_PANEL)),
                                self.culprits("RdmaHostLinkLossy"))
        paths = self.paths()
        fmt = lambda ps: ", ".join(f"{a}->{b} {ratio.get((a, b), float('nan')):.4f}"
                                   for a, b in sorted(ps))
        self.check("netem-h3-loss-on-h3-pairs", t is not None and
                   all(ratio.get(p, 0) > LOSS_THRESHOLD for p in with3),
                   f"loss ratio (the dashboard's loss matrix) of h3's pairs: {fmt(with3)} "
                   f"(after {t or 0:.0f} s of 20% netem loss on h3's egress)")
        # The healthy pairs: no lost request since the fault began (a reply later than the
        # probe's reply timeout on a loaded TCG host would count; the printed figures say).
        window = int(time.time() - t_fault) + 2 * int(self.interval)
        lost = self.pairs(f'sum by (instance, peer) (increase(rdma_probe_lost_total'
                          f'{{job="rdmad", kind="peer"}}[{window}s]))')
        sent = self.pairs(f'sum by (instance, peer) (increase(rdma_probe_sent_total'
                          f'{{job="rdmad", kind="peer"}}[{window}s]))')
        worst = max((ratio.get(p, 0) for p in without), default=0)
        self.check("netem-h3-no-loss-elsewhere",
                   all(p in ratio for p in without) and worst < LOSS_THRESHOLD / 2,
                   f"loss ratio of the 6 pairs without h3: {fmt(without)} (max {worst:.4f}); "
                   f"lost/sent during the fault: " + ", ".join(
                       f"{a}->{b} {lost.get((a, b), 0):.0f}/{sent.get((a, b), 0):.0f}"
                       for a, b in sorted(ALL_PAIRS)))
        self.check("netem-h3-the-culprit-is-h3-egress-and-no-path-alert",
                   t is not None and firing == want and not paths,
                   f"RdmaHostLinkLossy firing for (host, direction) {sorted(firing)} after "
                   f"{t or 0:.0f} s; path alerts firing {sorted(paths) or 'none'}")
        during = self.latency(max(window, 10))
        med = lambda xs: sorted(xs)[len(xs) // 2] if xs else float("nan")
        print("   typical RTT per pair (us) before -> during the loss: " + ", ".join(
            f"{a}->{b} {before.get((a, b), 0) * 1e6:.0f}->{during.get((a, b), 0) * 1e6:.0f}"
            for a, b in sorted(ALL_PAIRS)), flush=True)
        # Printed, not asserted: a lost UD request gives no sample (no retransmission). The
        # host's load moves every pair alike, so h3's pairs are compared with the others in
        # the same window.
        rel = lambda d: (med([d[p] for p in with3 if p in d]) /
                         med([d[p] for p in without if p in d]))
        print(f"   median RTT of h3's pairs over the others' (not asserted): before "
              f"{rel(before):.2f}, during the loss {rel(during):.2f}", flush=True)
        # The dashboard opens with the verdicts: its panel names h3's egress.
        expr = self.panel_expr(VERDICTS_PANEL)
        rows = [s["metric"] for s in self.query(expr)]
        self.check("pingmesh-dashboard-verdicts-name-h3-egress",
                   any(m.get("alertname") == "RdmaHostLinkLossy" and m.get("host") == "h3"
                       and m.get("direction") == "egress" for m in rows),
                   f"the verdicts panel's query returns {rows}")
        # What an operator runs: `rdmactl mesh` on the same Prometheus, text and --json.
        out = fault_matrix.mesh_cli(self, self.base)
        try:
            verdicts = json.loads(out[True].stdout)["verdicts"]
        except (ValueError, KeyError) as e:
            verdicts = f"not JSON with verdicts: {e}"
        named = isinstance(verdicts, list) and any(
            v.get("host") == "h3" and v.get("fault") == "egress" for v in verdicts)
        self.check("rdmactl-mesh-names-h3-egress", named and out[True].returncode == 4
                   and out[False].returncode == 4,
                   f"rdmactl mesh exits {out[False].returncode} (text) and "
                   f"{out[True].returncode} (--json; 4: a fault named); its verdicts {verdicts}")

    def kill_h4(self):
        """The checks while h4 is killed (the matrix kills it and brings it back)."""
        to_h4 = {(h, "h4") for h in HOSTS if h != "h4"}

        want = {("h4", "")}

        def cond():
            down = set(self.pairs("rdma:probe_pair_up == 0"))
            firing = self.culprits("RdmaHostUnreachable")
            return (down, firing) if to_h4 <= down and want <= firing else None
        res, t = self.wait("h4 unreachable", 60, cond)
        down, firing = res or (set(self.pairs("rdma:probe_pair_up == 0")),
                               self.culprits("RdmaHostUnreachable"))
        paths = self.paths()
        # Exactly h4's pairs: the alert (10 s of failed runs) says it; the instant value
        # may also catch a healthy pair's single failed run on a loaded host (printed).
        self.check("kill-h4-pairs-unreachable", t is not None,
                   f"rdma:probe_pair_up == 0 for {sorted(down)} (after {t or 0:.0f} s)")
        self.check("kill-h4-the-culprit-is-h4-unreachable-and-no-path-alert",
                   t is not None and firing == want and not paths,
                   f"RdmaHostUnreachable firing for {sorted(firing)} after {t or 0:.0f} s; "
                   f"path alerts firing {sorted(paths) or 'none'}")

    def dns_remove_h4(self):
        sel = f'{{job="rdmad", peer="{peer_of("h4")}"}}'
        t_edit = time.time()
        self.dns("h4", False)
        res, t = self.wait("h4's series gone", 180, lambda: self.query(
            f"absent(rdma_probe_peer_status{sel}) and absent(rdma:probe_pair_up{sel})"))
        # When did the last sample with h4 arrive? Raw samples of the last 10 minutes
        # (a range selector leaves out the staleness markers).
        last = 0.0
        for s in self.query(f"rdma_probe_peer_status{sel}[10m]"):
            last = max([last] + [float(ts) for ts, _ in s["values"]])
        after = last - t_edit
        self.check("dns-remove-h4-its-series-vanish", t is not None,
                   f"no rdma_probe_peer_status nor rdma:probe_pair_up series for peer h4 "
                   f"{t or 0:.0f} s after the DNS edit (seen by polling every "
                   f"{self.interval:.0f} s); the last scraped sample with peer h4 is "
                   f"{after:.1f} s after the edit = {after / self.interval:.1f} discovery "
                   f"intervals of {self.interval:.0f} s")
        want = {p for p in ALL_PAIRS if "h4" not in p}

        def others():
            # h4 itself runs on (the matrix brought it back): it still finds the other three.
            disc = {s["metric"]["instance"]: float(s["value"][1]) for s in
                    self.query('rdma_probe_discovered_peers{job="rdmad", source="dns", instance!="h4"}')}
            rest = {p for p in self.pairs("rdma:probe_pair_up == 1") if p[0] != "h4"}
            ok = disc == {"h1": 2.0, "h2": 2.0, "h3": 2.0} and rest == want
            return (ok, disc, rest)
        _, t = self.wait("the others probing", 120, lambda: others()[0])
        _, disc, rest = others()
        self.check("dns-remove-h4-the-others-keep-probing", t is not None,
                   f"discovered peers {disc}; pairs up {sorted(rest)}")

    def restart_h4(self):
        """Undo of the matrix's kill: h4 booted again, and its pingmesh rdmad started."""
        self.fault("restart", "h4", timeout=420)
        self.exec("h4", self.start_rdmad)

    def h4_back(self):
        self.dns("h4", True)
        names = ["RdmaHostUnreachable", "RdmaAgentDown", "RdmaHostRdmaDown", "RdmaHostLinkLossy",
                 "RdmaPathDown", "RdmaPathLossy", "RdmaExporterDown"]

        def cond():
            up = set(self.pairs("rdma:probe_pair_up == 1"))
            active = {n: self.alerts(n, "firing") | self.alerts(n, "pending") for n in names}
            return (up, active) if up == ALL_PAIRS and not any(active.values()) else None
        res, t = self.wait("h4 back", 600, cond)
        up, active = res or (set(self.pairs("rdma:probe_pair_up == 1")),
                             {n: self.alerts(n, "firing") | self.alerts(n, "pending")
                              for n in names})
        self.check("h4-back-every-pair-answers-and-the-alerts-resolve", t is not None,
                   f"{len(up)} of 12 pairs up; pending or firing: "
                   f"{ {n: sorted(v) for n, v in active.items()} } (after {t or 0:.0f} s)")

    def undo(self):
        undo = [(f"faults on {h}", lambda h=h: self.fault("clear", h)) for h in HOSTS[1:]]
        undo += [("partitions", lambda: self.fault("heal")),
                 ("links", lambda: [self.fault("link", h, "up") for h in HOSTS[1:]])]
        undo += [(f"{h} out of DNS", lambda h=h: self.dns(h, True)) for h in sorted(self.dns_out)]
        for what, fn in undo:
            try:
                fn()
            except Exception as e:
                print(f"undo {what}: {e}", flush=True)


def run_matrix(r, m, only=()):
    """The faults of issue #29's matrix, in an order that never repeats a culprit in two
    faults in a row (Alertmanager groups by culprit), puts the link down early (rdmad's
    RdmaLinkDowned counts it over 5 minutes: over before the quiet phase) and the rxe0
    removal first (the row that once hung: a run that fails there fails early). h1 runs the
    lab's DNS: the faults that cut a host off spare it."""
    host = lambda name, h, **lb: (name, dict(host=h, **lb))
    path = lambda a, b, layer: ("RdmaPathDown", dict(a=a, b=b, layer=layer))
    state = {}

    def egress_inject():
        state["before"] = r.latency(60)
        r.fault("netem", "h3", "loss", "20%")
        state["t"] = time.time()

    def delay_history(m, row):
        """Before the delay row's settle and clock (fault_matrix.Fault.prepare): a pair's
        baseline is the median of its whole history, the delay's runs included. Held longer
        than the history before it, the delay becomes the pair's baseline, and the row cannot
        fire (run alone, `--only delay-h3`, it came about a minute after Prometheus started
        and fired nothing in two runs). So the row waits, bounded, until every pair to h3 has
        more history than the row can hold the delay. In the full matrix the row comes after
        minutes of history and does not wait."""
        need = m.longest_hold(row)
        hist = 'min(count_over_time(rdma:probe_pair_latency_seconds:typical{target="h3"}[1d]))'

        def history():
            res = r.query(hist)
            return float(res[0]["value"][1]) * r.interval if res else 0.0
        _, t = r.wait("history before the delay", need + 120, lambda: history() > need)
        print(f"   delay-h3: {history():.0f} s of history on the pairs to h3 (the row holds the "
              f"delay up to {need:.0f} s; waited {t or 0:.0f} s)", flush=True)
        if t is None:
            raise RuntimeError(f"the pairs to h3 have {history():.0f} s of history after "
                               f"{need + 120:.0f} s, not over {need:.0f} s")

    def delay_inject():
        """+2 ms on h3's egress, or more where the lab's round trips are slow. The rule calls a
        pair slow above MESH latency_factor (2) x its own baseline: +2 ms is that wherever
        round trips are under 2 ms (any real fabric; promtool's cases at 20 us). Under TCG the
        pairs' baseline is milliseconds (about 4 ms on a loaded 2-core machine, with single
        runs at twice that in the quiet phase), and +2 ms is +50%: inside the noise the factor
        is there for. So the delay is the larger of 2 ms and (factor + 1) x the median
        baseline of the pairs to h3 (whole ms): the pairs at about 4x their baseline, where
        +2 ms puts them on a fabric of 0.67 ms or faster (a margin: a pair's single runs dip
        to 1.6x under a 3x delay here).

        A delay costs the probers CPU: they wait for each reply yielding the CPU on every
        spin for up to the UD engine's BLOCK_AFTER (10 ms), so the 4 VMs' probe CPU about
        doubles during this row (31-42% of a CPU each, against 13-24% in the other faults;
        2026-12-06, +6 and +12 ms), this 2-core machine runs every vCPU slower, and other
        pairs slow too. h3's verdict then fired after 57 s in one run and 96-97 s in two:
        one evaluation without the verdict restarted the `for:` (the timeline printed below
        the row shows it). Since the verdict reads the median of the window's runs, not the
        last run, it fired after 70 s without a gap (2026-12-07, with a busy loop taking 15%
        of a core beside the lab). The row's bound follows the alert's longer `for:`
        (fault_matrix.Matrix.one). With the alert's `for:` at 2m (10 s here) it fired after
        20-32 s, 10 s after the median moved, which took 10-22 s with the lab's noise. With
        the onset stretch (pingmesh.toml latency_onset_seconds) a pair is slow once every run
        of its last 10 s is: the verdict held 14-16 s after the injection and fired after 26 s
        (2026-12-07, full matrix, +22 ms on 7.26 ms).
        The row then proves the path on this lab: the rule, RdmaHostLatencyHigh naming h3
        and no pair alert, its one notification."""
        base = r.pairs('rdma:probe_pair_latency_seconds:baseline1d{target="h3"}')
        med = sorted(base.values())[len(base) // 2] if base else 0.0
        factor = fault_matrix.MESH["latency_factor"]
        ms = max(2, math.ceil((factor + 1) * med * 1e3))
        print(f"   delay-h3: median baseline RTT of the pairs to h3 {med * 1e3:.2f} ms: +{ms} ms"
              + ("" if ms == 2 else f" (+2 ms would be {2 / (med * 1e3):.2f}x it; the rule "
                                    f"wants over {factor - 1:g}x, this lab's noise more)"),
              flush=True)
        r.fault("netem", "h3", "delay", f"{ms}ms")

    faults = [
        # rdma_rxe cannot take a device from its users, so the lab's rxe-remove kills h2's
        # rdmad and starts it again around the delete: while it restarts, h2's agent is
        # really down (RdmaAgentDown{h2} is true if the restart outlasts a `for:`).
        Fault("rxe-remove-h2", ["rxe-remove", "h2"], ["rxe-add", "h2"],
              [host("RdmaHostRdmaDown", "h2")], ["h2"],
              allowed=[host("RdmaAgentDown", "h2")]),
        Fault("link-down-h3", ["link", "h3", "down"], ["link", "h3", "up"],
              [host("RdmaHostUnreachable", "h3")], ["h3"]),
        Fault("kill-rdmad-h4", ["kill-rdmad", "h4"], ["start-rdmad", "h4"],
              [host("RdmaAgentDown", "h4")], ["h4"]),
        Fault("egress-loss-20%-h3", egress_inject, ["clear", "h3"],
              [host("RdmaHostLinkLossy", "h3", direction="egress")], ["h3"]),
        # h4 -> h2 dropped, h2 -> h4 passes: a UD echo and a TCP connect both need the way
        # back, so both pairs fail; the pair is named, its direction is not.
        Fault("oneway-partition-h4-to-h2", ["partition", "h4", "h2", "--oneway"],
              ["heal", "h4", "h2"], [path("h4", "h2", "host"), path("h2", "h4", "host")],
              ["h2", "h4"], kind="path"),
        Fault("ingress-loss-20%-h2", ["ingress", "h2", "loss", "20%"], ["clear", "h2"],
              [host("RdmaHostLinkLossy", "h2", direction="ingress")], ["h2"]),
        Fault("delay-h3", delay_inject, ["clear", "h3"],
              [host("RdmaHostLatencyHigh", "h3")], ["h3"], prepare=delay_history),
        Fault("partition-h2-h3", ["partition", "h2", "h3"], ["heal", "h2", "h3"],
              [path("h2", "h3", "host"), path("h3", "h2", "host")], ["h2", "h3"], kind="path"),
        Fault("kill-h4", ["kill", "h4"], r.restart_h4,
              [host("RdmaHostUnreachable", "h4")], ["h4"]),
    ]
    during = {"egress-loss-20%-h3": lambda: r.netem_h3(state["t"], state["before"]),
              "kill-h4": r.kill_h4}
    unknown = set(only) - {f.name for f in faults}
    if unknown:
        raise ValueError(f"--only: no fault named {sorted(unknown)}; the faults: "
                         f"{[f.name for f in faults]}")
    for f in faults:
        if not only or f.name in only:
            m.one(f, during.get(f.name))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--rdmactl", required=True)
    ap.add_argument("--control", required=True)
    ap.add_argument("--start-rdmad-file", required=True,
                    help="shell script that starts a host's rdmad (for h4 after its restart)")
    ap.add_argument("--interval", type=float, default=2.0,
                    help="the probe (= discovery) interval and the scrape interval, seconds")
    ap.add_argument("--alertmanager", required=True,
                    help="the Alertmanager the Prometheus sends its alerts to")
    ap.add_argument("--hook-port", type=int, required=True,
                    help="127.0.0.1 port of the webhook the Alertmanager's receivers point at")
    ap.add_argument("--only", default="",
                    help="comma-separated fault names: run only those faults of the matrix and "
                         "stop (a developer's rerun of a failed row; the run reports itself as "
                         "partial and fails)")
    a = ap.parse_args()
    fault_matrix.start_hook(a.hook_port)
    r = Run(a)
    # SIGTERM (tests/multihost-prometheus stopping): undo the faults, then exit.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t0 = time.time()
    try:
        if r.targets_up() and r.matrix("pingmesh-matrix-has-the-12-pairs"):
            r.discovery_and_transport()
            m = Matrix(r, a.alertmanager)
            try:
                only = [n for n in a.only.split(",") if n]
                run_matrix(r, m, only)
                if only:
                    # The notifications of the faults that ran are checked all the same.
                    m.check_notifications()
                    r.check("matrix-partial-run", False,
                            f"--only {a.only}: the other faults, the DNS checks and the quiet "
                            f"phase did not run")
                else:
                    r.dns_remove_h4()
                    r.h4_back()
                    r.qps_one_peer()
                    r.matrix("pingmesh-matrix-has-the-12-pairs-again")
                    m.quiet_phase()
                    m.check_notifications()
            finally:
                m.table()
    except Exception as e:  # a fault that could not be injected fails the run
        r.check("faults-and-queries", False, f"{type(e).__name__}: {e}")
    finally:
        r.undo()
    print(f"checks took {time.time() - t0:.0f} s")
    print(f"{r.passed} passed, {r.failed} failed")
    sys.exit(1 if r.failed else 0)


if __name__ == "__main__":
    main()
