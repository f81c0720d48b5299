"""A submission's status as the `kperf` command prints it (status, submit --wait).

The finding comes first (issue 41): the verdict, each flagged metric with its
change and interval, then per comparison how many metrics were not flagged,
and what is running. That fits one screen: at most MAX_LINES lines of at most
WIDTH characters; `--all` adds every metric's row, the notes whole and the
mmtests-style tables.
"""

from __future__ import annotations

import textwrap
from typing import Any

from kperf.cli import series


def is_final(d: dict[str, Any]) -> bool:
    """Whether a submission's status can still change: the server says so ("final")."""
    return bool(d.get("final"))


MAX_LINES = 40
WIDTH = 100
FLAGGED = ("regression", "improvement")


def fmt_num(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{x:+.2f}%" if pct else f"{x:.2f}"


def render_comparison(c: dict[str, Any]) -> list[str]:
    """One comparison's metrics as an aligned plain-text table."""
    lines = [f"  {'metric':<22} {'base':>11} {'head':>11} {'change':>9} {'95% CI':>18} {'q':>7}  verdict"]
    for m in c["metrics"]:
        ci = f"[{m['ci_low_pct']:+.1f}, {m['ci_high_pct']:+.1f}]%" if m["ci_low_pct"] is not None else "n/a"
        q = f"{m['q_value']:.4f}" if m["q_value"] is not None else "n/a"
        lines.append(
            f"  {m['metric']:<22} {fmt_num(m['base_mean']):>11} {fmt_num(m['head_mean']):>11} "
            f"{fmt_num(m['change_pct'], True):>9} {ci:>18} {q:>7}  {m['verdict']}"
        )
    return lines


def _interval(m: dict[str, Any]) -> str:
    if m.get("ci_low_pct") is None or m.get("ci_high_pct") is None:
        return "no interval"
    return f"[{m['ci_low_pct']:+.2f}%, {m['ci_high_pct']:+.2f}%]"


def bench(d: dict[str, Any], c: dict[str, Any]) -> str:
    """A comparison's benchmark, with its grid when the submission asked for several."""
    several = len(d.get("grids") or []) > 1
    return f"{c['benchmark']} ({c['grid']} grid)" if several and c.get("grid") else str(c["benchmark"])


def summary(d: dict[str, Any], everything: bool = False) -> list[str]:
    """The finding: each flagged metric with change and interval, then the others counted per comparison."""
    flagged = [
        f"  {m['verdict']:<11} {m['metric']} ({bench(d, c)} on {c['machine_class']}): "
        f"{fmt_num(m['change_pct'], True)} {_interval(m)}"
        for c in d.get("comparisons", [])
        for m in c["metrics"]
        if m["verdict"] in FLAGGED
    ]
    lines = []
    if flagged:
        shown = flagged if everything else flagged[:FLAGGED_AT_MOST]
        lines += ["flagged (change, 95% interval; negative is worse):", *shown]
        if len(flagged) > len(shown):
            lines.append(f"  ... and {len(flagged) - len(shown)} more flagged (--all lists them)")
    counted = []
    for c in d.get("comparisons", []):
        counts: dict[str, int] = {}
        for m in c["metrics"]:
            if m["verdict"] not in FLAGGED:
                counts[m["verdict"]] = counts.get(m["verdict"], 0) + 1
        if counts:
            said = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))
            counted.append(f"  {bench(d, c)} on {c['machine_class']}: {said}")
    if counted:
        lines += ["not flagged" + ("" if everything else " (--all names them)") + ":", *counted]
    return lines


# Flagged metrics listed by default; the line budget keeps room for the rest.
FLAGGED_AT_MOST = 20


def _fit(lines: list[str], width: int = WIDTH) -> list[str]:
    """Every line at most `width` characters: prose wrapped, indented like its first line."""
    out = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()))
        out += textwrap.wrap(
            line, width, initial_indent="", subsequent_indent=indent + "  ", break_on_hyphens=False
        ) or [line[:width]]
    return out


def render_status(d: dict[str, Any], everything: bool = False) -> str:
    """The submission as `kperf status` prints it; `everything` is --all."""
    lines = [
        f"#{d['id']} {d['branch']} ({(d['head_sha'] or '?')[:12]}) vs {d['base']} ({(d['base_sha'] or '?')[:12]})",
    ]
    if d.get("verdict"):
        lines.append(f"verdict: {d['verdict']}")
    lines += summary(d, everything)
    lines += [
        f"tree {d['tree']}  benchmarks {', '.join(d['benchmarks'])} ({', '.join(d.get('grids') or [d['grid']])})"
        f"  arches {', '.join(d['arches'])}"
        f"  profile {d.get('profile') or 'each class its own'}",
    ]
    if d.get("series"):
        lines += series.describe(d["series"])
    if d.get("boot_params") or d.get("thp"):
        lines.append(f"boot params: {d.get('boot_params') or '(none)'}  thp: {d.get('thp') or 'kernel default'}")
    lines += [
        f"status: {d['status']}" + (f"  queue position {d['queue_position']}" if d.get("queue_position") else ""),
    ]
    if d.get("waiting_for"):
        lines.append(f"  {d['waiting_for']}")
    # When the verdict will come (kperf.core.lab.eta); a server without it sends neither.
    if d.get("eta"):
        lines.append(f"  {d['eta']['line']}")
    elif d.get("eta_reason") and not is_final(d):
        lines.append(f"  no estimate of the verdict's time: {d['eta_reason']}")
    if d.get("error"):
        lines.append(f"error: {d['error']}")
    # The page's and the mail's sentences (a server without them sends none).
    lines.extend(d.get("rerun_notes", []))
    for b in d.get("builds", []):
        extra = f" {b['phase']} {b['progress']}".rstrip() if b["status"] == "building" else ""
        lines.append(f"  build {b['side']:4} {b['sha'][:12]} {b['arch']}: {b['status']}{extra}")
    prog = d.get("progress", {})
    if d.get("jobs"):
        lines.append(
            "  boots: base {}/{}, head {}/{}".format(
                prog["base"]["boots_done"],
                prog["base"]["boots_total"],
                prog["head"]["boots_done"],
                prog["head"]["boots_total"],
            )
        )
        running = [j for j in d["jobs"] if j["status"] == "leased"]
        for j in running:
            lines.append(f"  job {j['id']} ({j['side']}) on {j['runner']}: {j['phase']} {j['progress']}")
    lines = _fit(lines)
    if not everything:
        # One screen: what is left over is behind --all.
        if len(lines) > MAX_LINES:
            lines = [
                *lines[: MAX_LINES - 1],
                f"... {len(lines) - MAX_LINES + 1} more lines: kperf status {d['id']} --all",
            ]
        elif d.get("comparisons"):
            lines.append(f"every metric: kperf status {d['id']} --all")
        return "\n".join(lines)
    for c in d.get("comparisons", []):
        lines.append("")
        clock = c.get("clock_label") or c.get("clock") or "wall clock"
        head = [f"{bench(d, c)} on {c['machine_class']}, {clock} ({c['method']}, alpha {c['alpha']})"]
        if c.get("shared_base_boots"):
            head.append(f"  {c['shared_base_boots']} base boots shared with other submissions of this base kernel")
        lines.extend(_fit(head + render_comparison(c)))
        if c.get("table"):
            lines.append("")
            lines.append(c["table"])
    return "\n".join(lines)
