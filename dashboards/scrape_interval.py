"""How often Prometheus must scrape rdmad for the pingmesh rules (dashboards/pingmesh.toml):
the limit, and Prometheus durations in seconds. Used by tests/dashboards-check and
tests/kubernetes-check on the configurations this tree ships."""
import re
import tomllib
from pathlib import Path

MESH = tomllib.loads((Path(__file__).resolve().parent / "pingmesh.toml").read_text())


def limit_seconds():
    """The longest scrape interval that leaves min_scrapes_per_window scrapes in a window."""
    return MESH["window_seconds"] / MESH["min_scrapes_per_window"]


def duration_seconds(text):
    """A Prometheus duration ("10s", "1m30s") in seconds; ValueError for anything else."""
    parts = re.findall(r"([0-9]+)(ms|s|m|h|d)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    unit = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(int(n) * unit[u] for n, u in parts)


def values_of(text, key):
    """Every `key: value` of a YAML text (a file, or the examples in a Markdown page), in
    order, comments left out."""
    return re.findall(rf"(?m)^\s*{key}:\s*([^\s#]+)", text)


def too_long(values):
    """The values (durations) over the limit, or unparseable, with the reason."""
    out = []
    for v in values:
        try:
            if duration_seconds(v) > limit_seconds():
                out.append(f"{v} (over {limit_seconds():g} s: pingmesh.toml's window_seconds / "
                           "min_scrapes_per_window)")
        except ValueError as e:
            out.append(str(e))
    return out
