#!/usr/bin/env python3
"""Runs every dashboard panel's PromQL against a live Prometheus (owns the panel checks of
tests/live-prometheus, which starts Prometheus and the lab and then calls this).

    dashboards/live_check.py --prometheus http://127.0.0.1:PORT --start UNIX --end UNIX
                             --scrape-interval 2

Template variables are substituted the way Grafana does: each query variable is resolved
from Prometheus in dashboard order (multi-value -> `(a|b)`, nothing -> `.*`), $__interval is
the query step, $__rate_interval is max($__interval + scrape interval, 4 x scrape interval),
$__range the whole window. Each target runs as a range query over [start, end]; a panel is
"ok" when one of its targets returns at least one sample. Panels in
dashboards/live-allowlist.txt must be EMPTY (a listed panel with data is a stale entry and
fails). The panels in MUST_MOVE (packet rates, the rxe error panels, probe runs) must also be
above zero somewhere: all-zero data there fails (the lab runs traffic and qp-errors). Also
checks that Prometheus loaded every rule of dashboards/rules/ without error.
Prints one line per panel and "N passed, M failed"; exits 1 on any failure.
"""
import argparse
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

DASH = Path(__file__).resolve().parent


def api(base, path, params):
    data = urllib.parse.urlencode(params, doseq=True).encode()
    req = urllib.request.Request(base + path, data=data, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            body = json.loads(r.read())
    except urllib.error.HTTPError as e:  # Prometheus says why in the body
        raise RuntimeError(f"{path}: HTTP {e.code}: {e.read().decode(errors='replace')[:300]}")
    if body.get("status") != "success":
        raise RuntimeError(body.get("error", body))
    return body["data"]


def get(base, path):
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return json.loads(r.read())["data"]


def load_allowlist():
    allow = {}
    for line in (DASH / "live-allowlist.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, reason = line.partition(" | ")
        if not sep or not reason.strip():
            raise SystemExit(f"live-allowlist.txt: no reason in {line!r}")
        allow[key.strip()] = reason.strip()
    return allow


def substitute(expr, values):
    # Longest names first so $device does not eat $device_x; ${x} and $x forms.
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    return expr


def resolve_vars(base, board, builtins, start, end):
    values = dict(builtins)
    notes = []
    for v in board["templating"]["list"]:
        if v["type"] == "datasource":
            values[v["name"]] = "prometheus"
            continue
        if v["type"] != "query":
            continue
        q = substitute(v["definition"], values)
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q.strip(), re.S)
        if not m:
            raise SystemExit(f"{board['uid']}: cannot run variable query {q!r}")
        series = api(base, "/api/v1/series", {"match[]": m.group(1), "start": start, "end": end})
        found = sorted({s[m.group(2)] for s in series if m.group(2) in s})
        if found:
            # Regex-escaped, then escaped again for the PromQL string literal (as Grafana does).
            values[v["name"]] = "(" + "|".join(re.escape(x).replace("\\", "\\\\")
                                               for x in found) + ")"
        else:
            values[v["name"]] = v.get("allValue") or ".*"
            notes.append(f"${v['name']} has no values")
        notes.append(f"${v['name']}={values[v['name']]}")
    return values, notes


# Panels that must show movement (a value above zero somewhere), not just series: all-zero
# data there means the lab's traffic, its qp-errors experiment or the counters behind the
# panel did not reach Prometheus. tests/live-prometheus fails when the traffic or the
# experiment fails, so each reason below holds in every passing run.
MUST_MOVE = {
    "rdma-fleet/Packet rate": "ib_write_bw rxe_b -> rxe_a",
    "rdma-fleet/Top talkers (packets/s)": "ib_write_bw rxe_b -> rxe_a",
    "rdma-fleet/Error events per port": "qp-errors on rxe0 (RNR and transport retries)",
    "rdma-errors/RNR retries exhausted [error]":
        "qp-errors part rnr: retry_rnr_exceeded_err on rxe0",
    "rdma-errors/RNR NAKs [warning]": "qp-errors part rnr: send_rnr_err/rcvd_rnr_err on rxe0",
    "rdma-errors/Transport retries exhausted [error]":
        "qp-errors part retry_exc: retry_exceeded_err on rxe0",
    "rdma-errors/Packet loss and retransmission [warning]":
        "qp-errors part retry_exc: completer_retry_err on rxe0",
    "rdma-errors/rxe: error counters": "qp-errors on rxe0",
    "rdma-probes/Successful probe runs": "rdmad probes every 2 s",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--start", type=float, required=True)
    ap.add_argument("--end", type=float, required=True)
    ap.add_argument("--scrape-interval", type=float, default=2.0)
    a = ap.parse_args()
    base = a.prometheus.rstrip("/")
    step = 5
    rng = int(a.end - a.start)
    builtins = {"__interval": f"{step}s", "__interval_ms": str(step * 1000),
                "__rate_interval": f"{int(max(step + a.scrape_interval, 4 * a.scrape_interval))}s",
                "__range": f"{rng}s", "__range_s": str(rng)}
    allow = load_allowlist()
    known = set(get(base, "/api/v1/label/__name__/values"))
    passed = failed = 0
    seen_keys = set()
    unknown_total = set()
    for path in sorted(DASH.glob("*.json")):
        board = json.loads(path.read_text())
        values, notes = resolve_vars(base, board, builtins, a.start, a.end)
        print(f"== {board['uid']} ({board['title']}): " + ", ".join(notes))
        for panel in board["panels"]:
            if not panel.get("targets"):
                continue
            key = f"{board['uid']}/{panel['title']}"
            seen_keys.add(key)
            samples, series, peak, errors, names = 0, 0, None, [], set()
            for t in panel["targets"]:
                expr = substitute(t["expr"], values)
                names |= {n for n in re.findall(r"\b(rdma_[a-z0-9_]+|up)\b",
                                                re.sub(r'"[^"]*"', '""', expr))}
                try:
                    res = api(base, "/api/v1/query_range",
                              {"query": expr, "start": a.start, "end": a.end, "step": step})
                except Exception as e:  # a PromQL error fails the panel
                    errors.append(str(e))
                    continue
                for s in res["result"]:
                    series += 1
                    samples += len(s["values"])
                    for _, v in s["values"]:
                        try:
                            f = float(v)
                        except ValueError:
                            continue
                        if f == f and (peak is None or f > peak):
                            peak = f
            unknown = {n for n in names if n not in known and not n.startswith("rdma:")}
            unknown_total |= unknown
            has_data = samples > 0 and not errors
            # Data from the lab's own series: a panel made of recording rules only (rdma:...,
            # no rdma_ name) counts its data; one whose every rdma_ name is unknown here has
            # only constants (`or vector(0)`), which is no data from this lab.
            real_data = has_data and (not names or len(unknown) < len(names))
            detail = (f"{series} series, {samples} samples, max {peak:.6g}" if has_data
                      else "; ".join(errors) or "no data")
            if key in allow:
                if real_data:
                    failed += 1
                    print(f"STALE-ALLOW {key}: has data now ({detail}): remove it from "
                          "dashboards/live-allowlist.txt")
                else:
                    passed += 1
                    print(f"EMPTY (allowed) {key}: {allow[key]}")
            elif key in MUST_MOVE and has_data and not (peak or 0) > 0:
                failed += 1
                print(f"FLAT {key}: {detail}: all zero, expected movement from {MUST_MOVE[key]}")
            elif real_data:
                passed += 1
                print(f"ok {key}: {detail}")
            else:
                failed += 1
                why = detail if not has_data else "every metric name is unknown"
                print(f"EMPTY {key}: {why}; unknown names: {', '.join(sorted(unknown)) or '-'}")
    for key in sorted(set(allow) - seen_keys):
        failed += 1
        print(f"STALE-ALLOW {key}: no such panel")
    for key in sorted(set(MUST_MOVE) - seen_keys):
        failed += 1
        print(f"STALE-MUST-MOVE {key}: no such panel (dashboards/live_check.py MUST_MOVE)")
    for key in sorted(set(MUST_MOVE) & set(allow)):
        failed += 1
        print(f"CONTRADICTION {key}: must move, yet on dashboards/live-allowlist.txt")
    # The rules loaded and evaluate without error.
    groups = get(base, "/api/v1/rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    bad = [r.get("name") + ": " + str(r.get("lastError")) for r in rules if r.get("health") != "ok"]
    want = (DASH / "rules/rdma.rules.yml").read_text().count("- record:") + \
        (DASH / "rules/rdma.rules.yml").read_text().count("- alert:")
    if bad or len(rules) != want:
        failed += 1
        print(f"RULES FAILED: {len(rules)} of {want} rules loaded; unhealthy: {bad}")
    else:
        passed += 1
        print(f"ok rules: all {len(rules)} rules of dashboards/rules/rdma.rules.yml loaded and healthy")
    firing = [f"{al['labels'].get('alertname')}({al['labels'].get('device', '')})"
              for al in get(base, "/api/v1/alerts")["alerts"]]
    print(f"alerts pending/firing at the end: {', '.join(sorted(set(firing))) or 'none'}")
    print(f"metric names used by the dashboards but absent in this lab (other drivers): "
          f"{len(unknown_total)}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
