"""A submission's status as the `kperf` command prints it (status, submit --wait)."""

from __future__ import annotations

from typing import Any

from kperf.cli import series


def is_final(d: dict[str, Any]) -> bool:
    """Whether a submission's status can still change: the server says so ("final")."""
    return bool(d.get("final"))


def fmt_num(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{x:+.2f}%" if pct else f"{x:.2f}"


def render_comparison(c: dict[str, Any]) -> list[str]:
    """One comparison's metrics as an aligned plain-text table."""
    lines = [f"  {'metric':<22} {'base':>12} {'head':>12} {'change':>9} {'95% CI':>20} {'q':>8}  verdict"]
    for m in c["metrics"]:
        ci = f"[{m['ci_low_pct']:+.1f}, {m['ci_high_pct']:+.1f}]%" if m["ci_low_pct"] is not None else "n/a"
        q = f"{m['q_value']:.4f}" if m["q_value"] is not None else "n/a"
        lines.append(
            f"  {m['metric']:<22} {fmt_num(m['base_mean']):>12} {fmt_num(m['head_mean']):>12} "
            f"{fmt_num(m['change_pct'], True):>9} {ci:>20} {q:>8}  {m['verdict']}"
        )
    return lines


def render_status(d: dict[str, Any]) -> str:
    lines = [
        f"#{d['id']} {d['branch']} ({(d['head_sha'] or '?')[:12]}) vs {d['base']} ({(d['base_sha'] or '?')[:12]})",
        f"tree {d['tree']}  benchmarks {', '.join(d['benchmarks'])} ({d['grid']})  arches {', '.join(d['arches'])}"
        f"  profile {d.get('profile') or 'each class its own'}",
    ]
    if d.get("series"):
        lines += series.describe(d["series"])
    if d.get("boot_params") or d.get("thp"):
        lines.append(f"boot params: {d.get('boot_params') or '(none)'}  thp: {d.get('thp') or 'kernel default'}")
    lines += [
        f"status: {d['status']}" + (f"  queue position {d['queue_position']}" if d.get("queue_position") else ""),
    ]
    if d.get("verdict"):
        lines.insert(1, f"verdict: {d['verdict']}")
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
    for c in d.get("comparisons", []):
        lines.append("")
        clock = c.get("clock_label") or c.get("clock") or "wall clock"
        lines.append(f"{c['benchmark']} on {c['machine_class']}, {clock} ({c['method']}, alpha {c['alpha']})")
        if c.get("shared_base_boots"):
            lines.append(f"  {c['shared_base_boots']} base boots shared with other submissions of this base kernel")
        lines.extend(render_comparison(c))
        if c.get("table"):
            lines.append("")
            lines.append(c["table"])
    return "\n".join(lines)
