#!/usr/bin/env python3
"""Writes dashboards/rules/rdma.mesh.test.yml: promtool unit tests of the pingmesh localization
rules (dashboards/rules/rdma.rules.yml) on a 4-host and a 3-host mesh, one test per fault.

    dashboards/mesh_tests.py            # rewrite the test file
    dashboards/mesh_tests.py --check    # exit 1 if the committed file differs

The input series are rdmad's per-peer series as issue #29 defines them (rdma_probe_peer_status,
rdma_probe_sent_total, rdma_probe_lost_total{direction}); a dead host or a dead rdmad is not
scraped, so it has no series as a prober. Each fault is written here as what the probes see
(which pairs fail, at which layer, which direction loses), never from the rules; the expected
alerts are the culprit the fault names, written by hand per fault. Every test asserts the
complete set of firing pingmesh alerts (so the pair alerts a culprit explains must be
absent), and the faults with a loss window also assert that everything resolves within a
minute of the fault's end. The 4-host mesh names hosts by address (instance 10.0.0.K:9736,
peer 10.0.0.K:9737: the names are the addresses without the port); the 3-host mesh as the lab
does (target label host=hK, metric relabeling peer_host=hK).
"""
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "rules" / "rdma.mesh.test.yml"
# Latency needs the pair's baseline of a day: its own file, evaluated every minute.
OUT_LATENCY = Path(__file__).resolve().parent / "rules" / "rdma.mesh-latency.test.yml"
DAY = 60           # minutes of baseline before the latency faults (the [1d] baseline
                   # window takes what there is: an hour is enough and keeps the test quick)
LAT_FAULT = 20     # minutes of the latency fault
LAT_EARLY = 5      # minutes into it, every alert but a pair's latency fires (a culprit waits
                   # 2 minutes, the evidence of one pair 10)
BASE_RTT = 0.00002  # 20 us
STEP = 10          # seconds between samples and evaluations
FAULT_END = 240    # seconds: every fault lasts 4 minutes...
END = 360          # ...then 2 minutes without it
SENT = 100         # UD probes per pair per sample (20 every 2 s)
SAMPLED = 16       # hosts of the sampled mesh...
SAMPLED_CYCLE = 8  # ...each pair probed once per this many samples (80 s > the 30 s window)
MESH_ALERTS = "RdmaHostUnreachable|RdmaAgentDown|RdmaHostRdmaDown|RdmaHostLinkLossy|RdmaPathDown|RdmaPathLossy|RdmaHostLatencyHigh|RdmaPairLatencyAboveBaseline"


class Mesh:
    def __init__(self, n, lab_names):
        self.hosts = [f"h{k}" for k in range(1, n + 1)]
        self.lab = lab_names

    def name(self, h):  # the host name the rules derive
        return h if self.lab else f"10.0.0.{h[1:]}"

    def prober_labels(self, h):
        return f'job="rdmad", instance="{h}", host="{h}"' if self.lab else \
            f'job="rdmad", instance="10.0.0.{h[1:]}:9736"'

    def peer_labels(self, t):
        return f'peer="10.2.0.{t[1:]}:9737", peer_host="{t}"' if self.lab else \
            f'peer="10.0.0.{t[1:]}:9737"'


def values(during, after, cumulative=False):
    """Sample values: `during` per step until FAULT_END, then `after` (per step increments
    when cumulative)."""
    n_during, n_after = FAULT_END // STEP, (END - FAULT_END) // STEP
    if not cumulative:
        return f"{during}x{n_during} {after}x{n_after}"
    total = during * n_during
    return f"0+{during}x{n_during} {total}+{after}x{n_after}"


def series(mesh, fault, never_up=False):
    """fault(prober, target) -> (status, request loss share, reply loss share) or None when
    the prober is not scraped. `never_up`: a pair failing during the fault never answered
    before it, so rdmad exports its status alone until it answers (sent and lost appear
    with the fault's end)."""
    out = []
    for p in mesh.hosts:
        for t in mesh.hosts:
            if p == t:
                continue
            f = fault(p, t)
            if f is None:
                continue
            status, req, rep = f
            base = f'{mesh.prober_labels(p)}, device="rxe0", {mesh.peer_labels(t)}, peer_rack=""'
            probe = f'{base}, port="1", op="send", kind="peer", transport="ud"'
            out.append((f"rdma_probe_peer_status{{{base}}}", values(status, 0)))
            counters = values
            if never_up and status > 0:
                def counters(during, after, cumulative):
                    full = values(during, after, cumulative).split(" ")
                    return f"_x{FAULT_END // STEP + 1} {full[1]}"
            out.append((f"rdma_probe_sent_total{{{probe}}}", counters(SENT, SENT, True)))
            out.append((f'rdma_probe_lost_total{{{probe}, direction="request"}}',
                        counters(int(SENT * req), 0, True)))
            out.append((f'rdma_probe_lost_total{{{probe}, direction="reply"}}',
                        counters(int(SENT * rep), 0, True)))
    return out


def sampled_series(mesh, fault):
    """As `series`, on a mesh above --probe.mesh-max: every prober keeps a status for every
    peer, but probes each pair only once per SAMPLED_CYCLE samples (its phase set by the two
    hosts' numbers), so the 30 s loss window sees a few of a host's pairs at a time."""
    out = []
    n = END // STEP + 1
    for i, p in enumerate(mesh.hosts):
        for j, t in enumerate(mesh.hosts):
            if p == t:
                continue
            _, req, rep = fault(p, t)
            base = f'{mesh.prober_labels(p)}, device="rxe0", {mesh.peer_labels(t)}, peer_rack="r{i % 2}"'
            probe = f'{base}, port="1", op="send", kind="peer", transport="ud"'
            sent, lost_req, lost_rep = [], [], []
            acc = [0, 0, 0]
            for k in range(n):
                if k % SAMPLED_CYCLE == (i + j) % SAMPLED_CYCLE and k > 0:
                    run = SENT * SAMPLED_CYCLE
                    lossy = k * STEP <= FAULT_END
                    acc[0] += run
                    acc[1] += int(run * req) if lossy else 0
                    acc[2] += int(run * rep) if lossy else 0
                sent.append(acc[0])
                lost_req.append(acc[1])
                lost_rep.append(acc[2])
            out.append((f"rdma_probe_peer_status{{{base}}}", f"0x{n - 1}"))
            out.append((f"rdma_probe_sent_total{{{probe}}}", " ".join(map(str, sent))))
            out.append((f'rdma_probe_lost_total{{{probe}, direction="request"}}', " ".join(map(str, lost_req))))
            out.append((f'rdma_probe_lost_total{{{probe}, direction="reply"}}', " ".join(map(str, lost_rep))))
    return out


def sampled_faults(m):
    """(title, fault function, expected alerts) on the sampled mesh: the loss faults, whose
    majority counts only the pairs probed in the window."""
    x = m.hosts[-1]
    nx = m.name(x)
    ok = (0, 0.0, 0.0)
    return [
        ("no fault: no alert", lambda p, t: ok, []),
        (f"30% egress loss on {x}, each pair probed once in {SAMPLED_CYCLE * STEP} s: "
         "RdmaHostLinkLossy egress only",
         lambda p, t: (0, 0.0, 0.3) if t == x else ((0, 0.3, 0.0) if p == x else ok),
         [host("RdmaHostLinkLossy", "warning", nx, fault="egress", direction="egress")]),
        (f"30% ingress loss on {x}, each pair probed once in {SAMPLED_CYCLE * STEP} s: "
         "RdmaHostLinkLossy ingress only",
         lambda p, t: (0, 0.3, 0.0) if t == x else ((0, 0.0, 0.3) if p == x else ok),
         [host("RdmaHostLinkLossy", "warning", nx, fault="ingress", direction="ingress")]),
    ]


def alert(name, sev, **labels):
    return (name, sev, labels)


def host(name, sev, h, **more):
    return alert(name, sev, host=h, a=h, b=h, **more)


def faults(m):
    """(title, fault function, expected alerts) for mesh m; X is the sick host."""
    hs = m.hosts
    x = hs[-1]          # the faulty host
    a, b = hs[0], hs[2]  # the partitioned pair (h1, h3)
    nx = m.name(x)
    na, nb = m.name(a), m.name(b)
    others = len(hs) - 1
    ok = (0, 0.0, 0.0)
    return [
        ("no fault: no alert", lambda p, t: ok, []),
        (f"{x} down (not scraped; its probers time out): RdmaHostUnreachable only",
         lambda p, t: None if p == x else ((2, 1.0, 0.0) if t == x else ok),
         [host("RdmaHostUnreachable", "critical", nx, fault="host")]),
        (f"rdmad on {x} stopped (not scraped; TCP refused): RdmaAgentDown only",
         lambda p, t: None if p == x else ((1, 1.0, 0.0) if t == x else ok),
         [host("RdmaAgentDown", "warning", nx, fault="agent")]),
        (f"rxe0 gone on {x} (its rdmad runs; UD unanswered both ways): RdmaHostRdmaDown only",
         lambda p, t: (3, 1.0, 0.0) if x in (p, t) else ok,
         [host("RdmaHostRdmaDown", "critical", nx, fault="rdma")]),
        (f"30% egress loss on {x}: its replies and its own requests: RdmaHostLinkLossy egress only",
         lambda p, t: (0, 0.0, 0.3) if t == x else ((0, 0.3, 0.0) if p == x else ok),
         [host("RdmaHostLinkLossy", "warning", nx, fault="egress", direction="egress")]),
        (f"30% ingress loss on {x}: requests to it, replies to its probes: RdmaHostLinkLossy ingress only",
         lambda p, t: (0, 0.3, 0.0) if t == x else ((0, 0.0, 0.3) if p == x else ok),
         [host("RdmaHostLinkLossy", "warning", nx, fault="ingress", direction="ingress")]),
        (f"{x}'s fabric link down (it is scraped; every pair with it times out): "
         "RdmaHostUnreachable only",
         lambda p, t: (2, 1.0, 0.0) if x in (p, t) else ok,
         [host("RdmaHostUnreachable", "critical", nx, fault="host")]),
        # As the lab shows it (tests/multihost-prometheus, `link hK down`): its peers time out
        # connecting to it, while its own UD probes fail at its DOWN port (rdma) for the
        # 20-odd seconds before their reconnects time out too.
        (f"{x}'s fabric link down, its own probes failing at rdma: RdmaHostUnreachable only",
         lambda p, t: (3, 1.0, 0.0) if p == x else ((2, 1.0, 0.0) if t == x else ok),
         [host("RdmaHostUnreachable", "critical", nx, fault="host")]),
    ] + ([
        # Half the mesh down: each survivor fails to 2 of its 3 targets, a majority, yet it is
        # not the culprit: the targets most of whose probers fail are left out first.
        ("h3 and h4 down: two RdmaHostUnreachable, the survivors not blamed",
         lambda p, t: None if p in ("h3", "h4") else ((2, 1.0, 0.0) if t in ("h3", "h4") else ok),
         [host("RdmaHostUnreachable", "critical", m.name("h3"), fault="host"),
          host("RdmaHostUnreachable", "critical", m.name("h4"), fault="host")]),
    ] if len(hs) == 4 else []) + [
        (f"{a} <-> {b} partitioned (TCP times out both ways): RdmaPathDown for the two "
         f"directions, no host (each fails to 1 of {others})",
         lambda p, t: (2, 1.0, 0.0) if {p, t} == {a, b} else ok,
         [alert("RdmaPathDown", "warning", a=na, b=nb, layer="host"),
          alert("RdmaPathDown", "warning", a=nb, b=na, layer="host")]),
        (f"one-way: half of {a} -> {b} dropped, {b} -> {a} passes: one RdmaPathLossy {a} -> {b}",
         lambda p, t: (0, 0.5, 0.0) if (p, t) == (a, b) else ((0, 0.0, 0.5) if (p, t) == (b, a) else ok),
         [alert("RdmaPathLossy", "warning", a=na, b=nb)]),
    ]


def yaml_labels(name, sev, labels):
    inner = ", ".join([f'alertname="{name}"', 'alertstate="firing"'] +
                      [f'{k}="{v}"' for k, v in sorted(dict(labels, job="rdmad", severity=sev).items())])
    return f"ALERTS{{{inner}}}"


def render():
    out = [f"# Generated by dashboards/mesh_tests.py: do not edit, edit the generator.",
           "#   promtool test rules dashboards/rules/rdma.mesh.test.yml",
           "# Pingmesh localization: one test per fault on a 4-host and a 3-host mesh, and the loss",
           f"# faults on a {SAMPLED}-host mesh probed as above --probe.mesh-max (each pair once in {SAMPLED_CYCLE * STEP} s); each asserts",
           "# the complete set of firing pingmesh alerts during the fault (after the rules' 2m `for:`)",
           f"# and that none is left a minute after it; a pair that was down is no lossy pair once up.",
           "# Each fault that fails pairs at a layer runs twice: the pairs answered before it (their",
           "# counters go on), and they never answered (rdmad exports their status alone until then).",
           "rule_files:", "  - rdma.rules.yml", f"evaluation_interval: {STEP}s", "", "tests:"]
    sel = f'ALERTS{{alertstate="firing", alertname=~"{MESH_ALERTS}"}}'
    for n, lab in ((4, False), (3, True), (SAMPLED, False)):
        m = Mesh(n, lab)
        cases = []
        for title, fault, want in (faults(m) if n != SAMPLED else sampled_faults(m)):
            cases.append((title, fault, want, False))
            if any((fault(p, t) or (0,))[0] for p in m.hosts for t in m.hosts if p != t):
                cases.append((f"{title}; the failing pairs never answered before (status only)",
                              fault, want, True))
        for title, fault, want, never_up in cases:
            out += [f"  # {n} hosts: {title}", f"  - interval: {STEP}s", "    input_series:"]
            made = series(m, fault, never_up) if n != SAMPLED else sampled_series(m, fault)
            for s, v in made:
                out += [f"      - series: '{s}'", f"        values: '{v}'"]
            out += ["    promql_expr_test:", *expect_alerts(sel, f"{FAULT_END - STEP}s", want)]
            out += [f"      - expr: '{sel}'", f"        eval_time: {FAULT_END + 60}s",
                    "        exp_samples: []"]
            if any((fault(p, t) or (0,))[0] for p in m.hosts for t in m.hosts if p != t):
                # A pair that was down: its unanswered probes are not loss once it is up.
                out += ["      - expr: rdma:probe_pair_fault:target_view",
                        f"        eval_time: {FAULT_END + STEP}s", "        exp_samples: []"]
            out.append("")
    return "\n".join(out)


def expect_alerts(sel, at, want):
    """A promql_expr_test case: at `at`, `sel` returns exactly the alerts `want`."""
    out = [f"      - expr: '{sel}'", f"        eval_time: {at}"]
    if not want:
        return out + ["        exp_samples: []"]
    out.append("        exp_samples:")
    for name, sev, labels in want:
        out += [f"          - labels: '{yaml_labels(name, sev, labels)}'", "            value: 1"]
    return out


def latency_faults(m):
    """(title, rtt(prober, target) after the day of baseline, expected alerts)."""
    hs = m.hosts
    x, a, b = hs[-1], hs[0], hs[2]
    return [
        ("no change: no alert", lambda p, t: BASE_RTT, []),
        ("every host loaded (TCG): every pair 20x slower at once: no alert (a loaded prober "
         "proves nothing about its targets)", lambda p, t: BASE_RTT * 20, []),
        (f"+2 ms on {x}: every pair with it slow: RdmaHostLatencyHigh only",
         lambda p, t: BASE_RTT + 0.002 if x in (p, t) else BASE_RTT,
         [host("RdmaHostLatencyHigh", "warning", m.name(x))]),
        # As the lab showed it: a slow host's prober with one more pair slow is not "loaded"
        # (the slow host's pair is left out of that count), so its vote stands. 4 hosts and up
        # (with 3, b is x).
        *([(f"+2 ms on {x} and {a} <-> {b} 1 ms slower: RdmaHostLatencyHigh for {x}, "
            f"RdmaPairLatencyAboveBaseline for {a} -> {b} and {b} -> {a}",
            lambda p, t: BASE_RTT + (0.002 if x in (p, t) else 0) + (0.001 if {p, t} == {a, b} else 0),
            [host("RdmaHostLatencyHigh", "warning", m.name(x)),
             alert("RdmaPairLatencyAboveBaseline", "warning", a=m.name(a), b=m.name(b)),
             alert("RdmaPairLatencyAboveBaseline", "warning", a=m.name(b), b=m.name(a))])]
          if b != x else []),
        (f"{a} -> {b} alone 1 ms slower: RdmaPairLatencyAboveBaseline for that pair only",
         lambda p, t: BASE_RTT + 0.001 if (p, t) == (a, b) else BASE_RTT,
         [alert("RdmaPairLatencyAboveBaseline", "warning", a=m.name(a), b=m.name(b))]),
        (f"{a} -> {b} 100 us slower (5x its baseline, under the 200 us floor): no alert",
         lambda p, t: BASE_RTT + 0.0001 if (p, t) == (a, b) else BASE_RTT, []),
        # As the lab's kill-rdmad showed it: the pairs to the host are down (agent) with a
        # last latency from before, its own probes slow: named for the failure alone.
        (f"rdmad on {x} refusing, every pair with it 2 ms slower: RdmaAgentDown only",
         lambda p, t: BASE_RTT + 0.002 if x in (p, t) else BASE_RTT,
         [host("RdmaAgentDown", "warning", m.name(x), fault="agent")],
         lambda p, t: 1 if t == x else 0),
    ]


def render_latency():
    out = ["# Generated by dashboards/mesh_tests.py: do not edit, edit the generator.",
           "#   promtool test rules dashboards/rules/rdma.mesh-latency.test.yml",
           f"# Pingmesh latency localization: {DAY} minutes at {BASE_RTT * 1e6:.0f} us per pair, then each "
           f"fault for {LAT_FAULT} minutes,",
           "# on a 4-host and a 3-host mesh; each asserts the complete set of firing pingmesh alerts",
           f"# after the rules' `for:`, and at its minute {LAT_EARLY} every one of them but a pair's latency.",
           "rule_files:", "  - rdma.rules.yml", "evaluation_interval: 1m", "", "tests:"]
    sel = f'ALERTS{{alertstate="firing", alertname=~"{MESH_ALERTS}"}}'
    for n, lab in ((4, False), (3, True)):
        m = Mesh(n, lab)
        for title, rtt, want, *st in latency_faults(m):
            status = st[0] if st else (lambda p, t: 0)
            out += [f"  # {n} hosts: {title}", "  - interval: 1m", "    input_series:"]
            for p in m.hosts:
                for t in m.hosts:
                    if p == t:
                        continue
                    base = f'{m.prober_labels(p)}, device="rxe0", {m.peer_labels(t)}, peer_rack=""'
                    out += [f"      - series: 'rdma_probe_peer_status{{{base}}}'",
                            f"        values: '0x{DAY} {status(p, t)}x{LAT_FAULT}'",
                            f"      - series: 'rdma_probe_latency_last_seconds{{{base}, port=\"1\", "
                            f"op=\"send\", kind=\"peer\", transport=\"ud\", stat=\"typical\"}}'",
                            f"        values: '{BASE_RTT}x{DAY} {rtt(p, t):.6g}x{LAT_FAULT}'"]
            # The fault's first sample is at minute DAY + 1.
            early = [w for w in want if w[0] != "RdmaPairLatencyAboveBaseline"]
            out += ["    promql_expr_test:", *expect_alerts(sel, f"{DAY + LAT_EARLY}m", early),
                    *expect_alerts(sel, f"{DAY + LAT_FAULT - 1}m", want), ""]
    return "\n".join(out)


def main():
    stale = []
    for path, text in ((OUT, render()), (OUT_LATENCY, render_latency())):
        if "--check" in sys.argv[1:]:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date, run dashboards/mesh_tests.py: {', '.join(stale)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
