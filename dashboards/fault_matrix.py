"""The pingmesh fault matrix (issue #29's "Must show"), run by dashboards/multihost_check.py on
the one 4-host lab of tests/multihost-prometheus: a real Prometheus with the shipped rules
(`for:` divided by 12: 2 m, the culprits', at 10 s) sends its alerts to a real Alertmanager with the shipped configuration
(deploy/alertmanager/alertmanager.yml; only its webhook URL points at the Hook below, on
127.0.0.1, which keeps every notification).

Each fault is injected through `rdmactl lab fault`, held until its culprit alerts fire and
one `for:` plus two evaluations more (an alert pending beside them would fire in that time)
and until the culprit's notification has gone out (the route's group_wait; bounded), then
undone; the matrix records, from Prometheus' /api/v1/alerts polled every second:

  - the culprit alerts that fired (the pingmesh's host or path alerts) and whether they are
    the right ones (host, direction, layer, pair);
  - the pair alerts left firing beside a host culprit (RdmaPathDown, RdmaPathLossy,
    RdmaPairLatencyAboveBaseline: none may, a culprit explains them);
  - the other alerts that fired (rdmad down, an RDMA port down, counter alerts): each must
    be about a host the fault touches;
  - seconds from injection to the culprits firing (target: 30) and from the undo to every
    culprit, pair, rdmad-down and port-down alert resolved (target: 60);
  - the notifications the Alertmanager sent the culprit receivers: exactly one per culprit.

Then five minutes without a fault: no alert fires, no notification. Every wait is a bounded
poll; the bounds come from the probe/scrape interval and the shortened `for:`.
"""
import http.server
import json
import re
import subprocess
import threading
import time
import tomllib
from pathlib import Path

HOST_ALERTS = ["RdmaHostUnreachable", "RdmaAgentDown", "RdmaHostRdmaDown", "RdmaHostLinkLossy",
               "RdmaHostLatencyHigh"]
PAIR_ALERTS = ["RdmaPathDown", "RdmaPathLossy", "RdmaPairLatencyAboveBaseline"]
MESH_ALERTS = HOST_ALERTS + PAIR_ALERTS
# Not the pingmesh's, but the same verdict about a host (routed with its culprit alerts).
HOST_STATE_ALERTS = ["RdmaExporterDown", "RdmaPortNotActive"]
CULPRIT_RECEIVERS = {"rdma-culprit-host", "rdma-culprit-path"}
# Issue #29's targets, reported per fault and in the table. The checks themselves wait with
# bounds (FIRE_BOUND, RESOLVE_BOUND): a time measured on a loaded 2-core TCG lab is a figure
# to report, not an assertion (a culprit that never fires, or an alert that never resolves,
# fails).
FIRE_TARGET = 30.0
RESOLVE_TARGET = 60.0
FIRE_BOUND = 3 * FIRE_TARGET
RESOLVE_BOUND = 2 * RESOLVE_TARGET
QUIET_SECONDS = 300
# The localization's thresholds (what gen.py writes into the rules).
MESH = tomllib.loads((Path(__file__).resolve().parent / "pingmesh.toml").read_text())
# The longest group_wait or group_interval of the shipped Alertmanager routes: a culprit's
# first notification goes out at most that long after its alerts reach the Alertmanager (a
# new group waits group_wait; alerts joining a group that still exists, e.g. one kept by the
# resolved alerts Prometheus resends, wait for its next group_interval).
NOTIFY_WITHIN = max(float(w) * (60 if u == "m" else 1) for w, u in re.findall(
    r"^\s*group_(?:wait|interval):\s*(\d+)([sm])\s*$",
    (Path(__file__).resolve().parents[1] / "deploy/alertmanager/alertmanager.yml").read_text(),
    re.M))


class Hook(http.server.BaseHTTPRequestHandler):
    """The Alertmanager's webhook receiver: keeps (arrival time, notification)."""
    received = []
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with Hook.lock:
            Hook.received.append((time.time(), json.loads(body)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def start_hook(port):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def key_of(labels):
    return tuple(sorted((k, v) for k, v in labels.items() if k != "severity"))


def show(key):
    lb = dict(key)
    name = lb.get("alertname", "?")
    if name in PAIR_ALERTS:
        extra = f",{lb['layer']}" if lb.get("layer") else ""
        return f"{name}{{{lb.get('a')}->{lb.get('b')}{extra}}}"
    who = lb.get("host") or lb.get("instance", "")
    extra = "".join(f",{lb[k]}" for k in ("direction", "device") if lb.get(k))
    return f"{name}{{{who}{extra}}}"


def about(key):
    """The hosts an alert is about."""
    lb = dict(key)
    hosts = {lb.get(k) for k in ("host", "a", "b") if lb.get(k)}
    if not hosts and lb.get("instance"):
        hosts.add(lb["instance"].split(":")[0])
    return hosts


class Tracker:
    """Polls Prometheus' active alerts every `step` seconds: [(time, {key: state})]."""

    def __init__(self, get_alerts, step=1.0):
        self.get_alerts = get_alerts
        self.step = step
        self.snaps = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors = 0
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self):
        while not self.stop.is_set():
            t = time.time()
            try:
                snap = {key_of(a["labels"]): a["state"] for a in self.get_alerts()}
                with self.lock:
                    self.snaps.append((t, snap))
            except Exception:  # Prometheus busy: the next poll
                self.errors += 1
            self.stop.wait(self.step)

    def since(self, t0, t1=None):
        with self.lock:
            return [(t, s) for t, s in self.snaps if t >= t0 and (t1 is None or t <= t1)]

    def latest(self):
        with self.lock:
            return self.snaps[-1] if self.snaps else (0.0, {})

    def fired(self, t0, t1=None):
        """{key: first time seen firing} between t0 and t1."""
        out = {}
        for t, s in self.since(t0, t1):
            for k, st in s.items():
                if st == "firing" and k not in out:
                    out[k] = t
        return out

    def wait_for(self, after, limit, cond):
        """Poll the snapshots taken after `after` until cond(snapshot) holds, at most `limit`
        seconds from `after`; the snapshot's time or None."""
        while True:
            for t, s in self.since(after):
                if cond(s):
                    return t
            if time.time() - after > limit:
                return None
            time.sleep(self.step)


class Fault:
    def __init__(self, name, inject, undo, culprits, touched, kind="host", note="",
                 allowed=(), prepare=None):
        self.name = name
        # Called before the settle and the injection's clock (a wait the row needs first).
        self.prepare = prepare
        self.inject = inject      # [fault words] or a callable
        self.undo = undo
        self.culprits = culprits  # [(alertname, {label: value})]
        self.touched = touched    # the hosts the fault touches
        self.kind = kind          # "host": pair alerts must not fire; "path": they are the culprit
        self.note = note
        # [(alertname, {label: value})]: true of what the injection itself does beside the
        # fault (e.g. the rdmad restart of rxe-remove), so not wrong, but never required.
        self.allowed = list(allowed)
        self.row = {}


def matches(key, want):
    lb = dict(key)
    name, labels = want
    return lb.get("alertname") == name and all(lb.get(k) == v for k, v in labels.items())


def names_culprit(note, fault):
    """A notification to a culprit receiver with one of the fault's culprit alerts firing."""
    return note.get("receiver") in CULPRIT_RECEIVERS and any(
        a.get("status") == "firing" and any(matches(key_of(a["labels"]), c) for c in fault.culprits)
        for a in note["alerts"])


class Matrix:
    def __init__(self, run, alertmanager):
        self.run = run
        self.am = alertmanager
        self.interval = run.interval
        self.for_s = 10.0  # the culprit alerts' shortened `for:` (tests/multihost-prometheus)
        self.tracker = Tracker(lambda: run.api_alerts(), step=1.0)
        self.faults = []
        self.quiet = {}

    def settle(self, what):
        """Before a fault: no pingmesh alert pending or firing, no rdmad or port down, and
        every pair up (bounded: a loss window, a `for:` and a reconnect backoff)."""
        t0 = time.time()
        limit = 180

        def clean():
            _, s = self.tracker.latest()
            bad = [k for k in s if dict(k).get("alertname") in MESH_ALERTS + HOST_STATE_ALERTS]
            up = set(self.run.pairs("rdma:probe_pair_up == 1"))
            return not bad and up == self.run.all_pairs
        _, t = self.run.wait(f"clean before {what}", limit, clean)
        if t is None:
            _, s = self.tracker.latest()
            print(f"   not clean before {what} after {limit} s: active "
                  f"{sorted(show(k) + ' ' + v for k, v in s.items())}", flush=True)
        return time.time() - t0

    def do(self, action):
        if callable(action):
            action()
        else:
            # A fault the controller cannot make in 2 minutes fails the run (a restart,
            # which boots a VM, is a callable with its own bound).
            self.run.fault(*action, timeout=120)

    def one(self, f, during=None):
        """Inject, hold, undo, measure one fault; returns its row."""
        t_begin = time.time()
        if f.prepare:
            f.prepare(self, f)
        settle = self.settle(f.name)
        _, before = self.tracker.latest()
        t_inj = time.time()
        self.do(f.inject)
        # Hold: until every culprit fires (bounded; the 30 s target measured), then one
        # `for:` and two evaluations more.
        limit = self.fire_limit(f)
        t_all = self.tracker.wait_for(t_inj, limit, lambda s: all(
            any(matches(k, c) and st == "firing" for k, st in s.items()) for c in f.culprits))
        if during:
            during()
        hold_until = (t_all or time.time()) + self.hold_after_fire()
        # A fault that fired its culprits lasts until their notification has gone out (within
        # the routes' group_wait or group_interval): a real fault does, and one undone sooner
        # would be notified as already resolved, or not at all. Bounded.
        notify_by = (t_all + self.notify_wait()) if t_all else 0
        # The notification that counts is one carrying a culprit alert: a host's port-down
        # alert can go out first on its own, when the host's group still exists from an
        # earlier fault (then alerts join it at its group_interval, not its group_wait).
        while time.time() < hold_until or (time.time() < notify_by and not any(
                names_culprit(n, f) for n in self.firing_notes(t_inj))):
            time.sleep(self.tracker.step)
        t_undo0 = time.time()
        self.do(f.undo)
        t_undo = time.time()
        fired = self.tracker.fired(t_inj, t_undo)
        first = {i: min([t for k, t in fired.items() if matches(k, c)], default=None)
                 for i, c in enumerate(f.culprits)}
        mesh = {k for k in fired if dict(k)["alertname"] in MESH_ALERTS}
        culprit_keys = {k for k in mesh if any(matches(k, c) for c in f.culprits)}
        allowed_keys = {k for k in mesh - culprit_keys if any(matches(k, c) for c in f.allowed)}
        wrong = mesh - culprit_keys - allowed_keys
        pairs_left = {k for k in mesh if dict(k)["alertname"] in PAIR_ALERTS} - culprit_keys
        # Alerts firing already before the injection (a counter window of the last fault)
        # are not this fault's.
        other = {k for k in fired if k not in mesh and before.get(k) != "firing"}
        other_elsewhere = {k for k in other if not about(k) <= set(f.touched)}
        # Resolution: no culprit, pair, rdmad-down or port-down alert firing (those that
        # fired, and any that would fire only after the undo).
        watched = MESH_ALERTS + HOST_STATE_ALERTS
        t_res = self.tracker.wait_for(t_undo, RESOLVE_BOUND, lambda s: not any(
            st == "firing" and dict(k)["alertname"] in watched for k, st in s.items()))
        late = self.tracker.fired(t_undo, t_res)
        late = sorted(show(k) for k in late if k not in fired
                      and dict(k)["alertname"] in watched)
        # The other alerts (counter windows, e.g. RdmaLinkDowned over 5m): printed only.
        _, now = self.tracker.latest()
        other_left = sorted(show(k) for k in other if now.get(k) == "firing")
        fire_s = (max(first.values()) - t_inj) if all(first.values()) else None
        row = dict(fault=f.name, kind=f.kind, settle=settle, t_inj=t_inj, t_undo=t_undo,
                   t_begin=t_begin, t_end=time.time(),
                   undo_took=t_undo - t_undo0,
                   culprits=sorted(show(k) for k in culprit_keys),
                   allowed=sorted(show(k) for k in allowed_keys),
                   missing=[f"{f.culprits[i][0]}{f.culprits[i][1]}" for i, t in first.items()
                            if t is None],
                   wrong=sorted(show(k) for k in wrong),
                   pairs_left=sorted(show(k) for k in pairs_left) if f.kind == "host" else [],
                   other=sorted(show(k) for k in other),
                   other_elsewhere=sorted(show(k) for k in other_elsewhere),
                   other_left=other_left, late=late,
                   fire_s=fire_s, resolve_s=(t_res - t_undo) if t_res else None,
                   touched=f.touched, note=f.note)
        f.row = row
        found = not row["missing"] and fire_s is not None
        ok = (not row["wrong"] and not row["other_elsewhere"] and not late
              and not row["pairs_left"] and found
              and row["resolve_s"] is not None)
        fmt = lambda v: f"{v:.0f} s" if v is not None else "never"
        met = lambda v, target: ("met" if v <= target else "OVER") if v is not None else "-"
        self.run.check(f"matrix-{f.name}", ok,
                       f"culprits fired {row['culprits'] or 'none'} (missing "
                       f"{row['missing'] or 'none'}, wrong {row['wrong'] or 'none'}, allowed "
                       f"{row['allowed'] or 'none'}); pair alerts "
                       f"left firing {row['pairs_left'] or 'none'}; other alerts "
                       f"{row['other'] or 'none'} (about hosts the fault does not touch: "
                       f"{row['other_elsewhere'] or 'none'}; first firing after the undo "
                       f"{late or 'none'}; still firing when the culprits "
                       f"resolved, not asserted: {other_left or 'none'}); fired {fmt(fire_s)} after the "
                       f"injection (target {FIRE_TARGET:.0f} s: {met(fire_s, FIRE_TARGET)}), "
                       f"resolved {fmt(row['resolve_s'])} after the undo (target "
                       f"{RESOLVE_TARGET:.0f} s: {met(row['resolve_s'], RESOLVE_TARGET)}; the undo took "
                       f"{row['undo_took']:.0f} s)")
        print(f"   probe CPU during the fault: {self.probe_cpu(t_inj, t_undo0)}", flush=True)
        for line in self.verdict_timeline(f, t_inj, t_undo0):
            print(f"   {line}", flush=True)
        if not ok:
            self.diagnose(t_inj, t_undo)
        self.faults.append(f)
        return row

    def fire_limit(self, f):
        """Seconds `one` waits for f's culprits to fire. FIRE_BOUND is for culprits whose
        `for:` is the matrix's (10 s); one with a longer `for:` in the rules gets the
        difference on top, so that its detection has the same time before the bound."""
        return FIRE_BOUND + max(0.0, max(self.alert_for(c[0]) for c in f.culprits) - self.for_s)

    def hold_after_fire(self):
        """Seconds `one` holds a fault after its culprits fired: one `for:` and two
        evaluations (an alert pending beside them would fire in that time)."""
        return self.for_s + 2 * self.interval

    def notify_wait(self):
        """Seconds after its culprits fired that `one` waits, at most, for their notification."""
        return NOTIFY_WITHIN + 3 * self.interval + 5

    def longest_hold(self, f):
        """The longest `one` can hold f injected: its culprits' fire limit, then the longer
        of the hold after firing and the notification's wait."""
        return self.fire_limit(f) + max(self.hold_after_fire(), self.notify_wait())

    def probe_cpu(self, t0, t1):
        """What each host's probe engine used of a CPU from t0 to t1 (a figure, printed: a
        fault must not make a prober spin, which would slow its other pairs)."""
        span = max(int(t1 - t0), 4)
        try:
            res = self.run.query(f"rate(rdma_probe_cpu_seconds_total[{span}s])", at=t1)
        except Exception as e:  # a figure never fails the run
            return f"unknown ({e})"
        cpu = sorted((s["metric"].get("instance", "?"), float(s["value"][1])) for s in res)
        return ", ".join(f"{h} {v:.0%}" for h, v in cpu) or "no series"

    def alert_for(self, name):
        """The `for:` (seconds) of alerting rule `name` as the running Prometheus loaded it."""
        if not hasattr(self, "_for"):
            self._for = {r["name"]: float(r.get("duration", 0))
                         for g in self.run.rule_groups() for r in g["rules"]
                         if r.get("type") == "alerting"}
        if name not in self._for:
            raise ValueError(f"Prometheus has no alerting rule {name}")
        return self._for[name]

    def verdict_timeline(self, f, t0, t1):
        """For each host culprit of the fault: its host verdict's recording rule at each
        evaluation step from the injection to the undo ('#' present, '.' absent), the `for:`
        of its alert counting from the first '#' of the last unbroken run. Printed, never
        asserted: it shows whether a slow culprit was late to appear or flickered."""
        lines = []
        for name, labels in f.culprits:
            h = labels.get("host")
            if not h:
                continue
            rec = "rdma:probe_host_slow" if name == "RdmaHostLatencyHigh" else "rdma:probe_host_culprit"
            step = self.interval
            try:
                res = self.run.query_range(f'max({rec}{{host="{h}"}})', t0, t1, step)
            except Exception as e:  # a figure never fails the run
                lines.append(f"{rec}{{host={h}}}: unknown ({e})")
                continue
            seen = {round((float(t) - t0) / step) for t, _ in (res[0]["values"] if res else [])}
            n = int((t1 - t0) / step) + 1
            marks = "".join("#" if k in seen else "." for k in range(n))
            lines.append(f"{rec}{{host={h}}} every {step:g} s from the injection: {marks}")
        return lines

    def diagnose(self, t_inj, t_undo):
        """A failed row says why: what the probers saw of each pair during the fault (failed
        runs by failure, the worst status, the worst loss by direction, the latency against
        the baseline and the latency stages of the rules), from Prometheus."""
        span = max(int(t_undo - t_inj), 1)
        queries = [
            ("failed runs", f'sum by (instance, peer, status) (increase('
                            f'rdma_probe_failures_total{{kind="peer"}}[{span}s])) > 0'),
            ("worst status (1 agent, 2 host, 3 rdma)",
             f'max_over_time(rdma:probe_pair_status[{span}s]) > 0'),
            ("worst loss ratio by direction",
             f'max_over_time(rdma:probe_pair_loss_direction:ratio30s[{span}s]) > 0'),
            # The latency path (the delay row): what each pair measured against its
            # baseline, and how far the rules' stages got.
            ("lowest typical latency (s)",
             f'min_over_time(rdma:probe_pair_latency_seconds:typical[{span}s])'),
            ("highest typical latency (s)",
             f'max_over_time(rdma:probe_pair_latency_seconds:typical[{span}s])'),
            ("baseline (s)", 'rdma:probe_pair_latency_seconds:baseline1d'),
            ("evaluations with the pair above its baseline",
             f'count_over_time(rdma:probe_pair_latency_high[{span}s])'),
            ("evaluations with a slow target",
             f'count_over_time(rdma:probe_target_slow[{span}s])'),
            ("evaluations with a slow host",
             f'count_over_time(rdma:probe_host_slow[{span}s])'),
            ("evaluations with a host culprit",
             f'count_over_time(rdma:probe_host_culprit[{span}s])'),
        ]
        for what, expr in queries:
            try:
                res = self.run.query(expr, at=t_undo)
            except Exception as e:  # the diagnosis never fails the run
                print(f"   diagnosis {what}: {e}", flush=True)
                continue
            rows = []
            for s in res:
                m = {k: v for k, v in s["metric"].items()
                     if k not in ("job", "__name__", "peer_rack") and v}
                rows.append(f"{m} {float(s['value'][1]):.3g}")
            print(f"   diagnosis {what}: " + ("; ".join(sorted(rows)) or "none"), flush=True)

    def quiet_phase(self):
        """Five minutes without a fault: no alert fires (any rule), no notification."""
        t_settle = time.time()
        self.settle("the quiet phase")
        t0 = time.time()
        while time.time() - t0 < QUIET_SECONDS:
            time.sleep(self.tracker.step)
        t1 = time.time()
        fired = self.tracker.fired(t0, t1)
        snaps = self.tracker.since(t0, t1)
        # Each alert that went pending, with its longest unbroken pending stretch: how close
        # the lab's noise came to the alert's `for:` (the margin a slower machine eats).
        longest, began = {}, {}
        for t, s in snaps:
            for k in [k for k in began if s.get(k) != "pending"]:
                del began[k]
            for k, st in s.items():
                if st == "pending":
                    began.setdefault(k, t)
                    longest[k] = max(longest.get(k, 0.0), t - began[k])
        pending = {f"{show(k)} {v:.0f} s of {self.alert_for(dict(k)['alertname']):.0f} s"
                   for k, v in longest.items()}
        polls = len(snaps)
        notes = [n for t, n in self.notifications() if t0 <= t <= t1 and n.get("status") == "firing"]
        self.quiet = dict(t_begin=t_settle, t0=t0, t1=t1, fired=sorted(show(k) for k in fired),
                          pending=sorted(pending), notes=len(notes))
        self.run.check("matrix-quiet-5-minutes-no-alert",
                       not fired and not notes and polls >= QUIET_SECONDS / 2,
                       f"{t1 - t0:.0f} s without a fault, {polls} polls of the alerts: firing "
                       f"{self.quiet['fired'] or 'none'}, firing notifications {len(notes)} "
                       f"(pending at some poll, not asserted, with its longest pending stretch of its "
                       f"`for:`: {self.quiet['pending'] or 'none'})")

    def notifications(self):
        with Hook.lock:
            return list(Hook.received)

    def firing_notes(self, t0, t1=float("inf")):
        """The firing notifications that arrived in [t0, t1)."""
        return [n for t, n in self.notifications() if t0 <= t < t1 and n.get("status") == "firing"]

    def check_notifications(self):
        """One notification per culprit: in each fault's window (its injection to the next
        one's), the firing notifications to the culprit receivers."""
        ends = [f.row["t_inj"] for f in self.faults[1:]] + [self.quiet.get("t0", time.time())]
        for f, end in zip(self.faults, ends):
            mine = self.firing_notes(f.row["t_inj"], end)
            culprit = [n for n in mine if n.get("receiver") in CULPRIT_RECEIVERS]
            default = [n for n in mine if n.get("receiver") not in CULPRIT_RECEIVERS]
            firing = lambda n: sorted(show(key_of(a["labels"])) for a in n["alerts"]
                                      if a.get("status") == "firing")
            named = [n for n in culprit if names_culprit(n, f)]
            f.row["notes"] = len(named)
            f.row["notes_default"] = len(default)
            # One naming the culprit. Others to the culprit receivers may go out before it (a
            # port down alone, see `one`), about the fault's hosts only.
            # The firing alerts of each notification must be about the fault's hosts; a
            # notification also carries the group's alerts resolved since its last one (a
            # route grouped by alertname: the previous fault's RdmaPathDown), which are not.
            resolved = sorted({show(key_of(a["labels"])) for n in culprit for a in n["alerts"]
                               if a.get("status") != "firing"})
            ok = len(named) == 1 and all(
                about(key_of(a["labels"])) <= set(f.touched)
                for n in culprit for a in n["alerts"] if a.get("status") == "firing")
            self.run.check(f"matrix-{f.name}-one-notification", ok,
                           f"{len(named)} firing notification(s) naming a culprit (want 1) of "
                           f"{len(culprit)} to the culprit receivers: "
                           + ("; ".join(f"{n['receiver']} {firing(n)}" for n in culprit) or "none")
                           + f" (resolved alerts in them: {resolved or 'none'})"
                           + f"; to the default receiver: {len(default)} "
                           + ("; ".join(f"{firing(n)}" for n in default)))

    def table(self):
        fmt = lambda v: f"{v:.0f}" if v is not None else "-"
        lines = ["", f"FAULT MATRIX (4 hosts, probe/scrape/eval 2 s, for: {self.for_s:.0f} s (pair "
                 f"latency {self.alert_for('RdmaPairLatencyAboveBaseline'):.0f} s); targets: "
                 f"fire <= {FIRE_TARGET:.0f} s, resolve <= {RESOLVE_TARGET:.0f} s)",
                 f"{'fault':<28} {'culprit alerts fired':<52} {'pair alerts left':<18} "
                 f"{'fire s':>6} {'resolve s':>9} {'notif':>5}  other alerts"]
        for f in self.faults:
            r = f.row
            culprits = ", ".join(r["culprits"] + [f"(also {a})" for a in r["allowed"]]
                                 + [f"WRONG {w}" for w in r["wrong"]]
                                 + [f"MISSING {m}" for m in r["missing"]]) or "none"
            lines.append(f"{r['fault']:<28} {culprits:<52} {', '.join(r['pairs_left']) or 'none':<18} "
                         f"{fmt(r['fire_s']):>6} {fmt(r['resolve_s']):>9} "
                         f"{r.get('notes', '-'):>5}  {', '.join(r['other']) or 'none'}")
        q = self.quiet
        if q:
            lines.append(f"{'no fault, ' + str(round(q['t1'] - q['t0'])) + ' s':<28} "
                         f"{', '.join(q['fired']) or 'none':<52} {'none':<18} {'-':>6} {'-':>9} "
                         f"{q['notes']:>5}  pending: {', '.join(q['pending']) or 'none'}")
        fired = [f.row["fire_s"] for f in self.faults if f.row["fire_s"] is not None]
        resolved = [f.row["resolve_s"] for f in self.faults if f.row["resolve_s"] is not None]
        lines.append(f"targets: fired within {FIRE_TARGET:.0f} s in "
                     f"{sum(v <= FIRE_TARGET for v in fired)} of {len(fired)} faults that fired "
                     f"(slowest {max(fired, default=0):.0f} s), resolved within "
                     f"{RESOLVE_TARGET:.0f} s in {sum(v <= RESOLVE_TARGET for v in resolved)} of "
                     f"{len(resolved)} (slowest {max(resolved, default=0):.0f} s)")
        # The matrix's own time (for whether a CI run can afford it): each fault from its
        # settle to its resolution, and the quiet phase with its settle.
        rows = [f.row for f in self.faults if "t_begin" in f.row]
        faults_s = sum(r["t_end"] - r["t_begin"] for r in rows)
        quiet_s = (q["t1"] - q["t_begin"]) if q else 0.0
        lines.append(f"matrix duration: {faults_s + quiet_s:.0f} s ({len(rows)} faults "
                     f"{faults_s:.0f} s: " + ", ".join(
                         f"{r['fault']} {r['t_end'] - r['t_begin']:.0f}" for r in rows)
                     + f"; quiet phase {quiet_s:.0f} s)")
        print("\n".join(lines), flush=True)


def mesh_cli(run, prometheus):
    """`rdmactl mesh --prometheus URL`, text and --json, printed (for the note)."""
    out = {}
    for extra in ([], ["--json"]):
        cmd = [run.rdmactl, "mesh", "--prometheus", prometheus, "--color", "never"] + extra
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        print(f"   $ rdmactl mesh --prometheus URL {' '.join(extra)} (exit {r.returncode})")
        for line in (r.stdout + r.stderr).rstrip().splitlines():
            print(f"   | {line}")
        out[bool(extra)] = r
    return out
