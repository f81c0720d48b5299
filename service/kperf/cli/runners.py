"""`kperf runners`: the runners, their state and calibrations; staff release or quarantine one."""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import quote

from kperf.cli.client import client_from_config


def render_runners(runners: list[dict[str, Any]]) -> str:
    if not runners:
        return "no runner is registered"
    lines = [f"{'runner':<16} {'machine class':<18} {'state':<12} {'since':<17} {'last calibration':<26} heartbeat"]
    for r in runners:
        cal = f"{(r['last_calibration'] or '')[:16]} {r['last_calibration_result'] or ''}".strip() or "never"
        lines.append(
            f"{r['name']:<16} {r['machine_class']:<18} {r['health']:<12} {(r['since'] or '')[:16]:<17} "
            f"{cal:<26} {(r['last_heartbeat'] or 'never')[:19]}"
        )
        if r.get("reason"):
            lines.append(f"  why: {r['reason']}")
    return "\n".join(lines)


def render_checks(d: dict[str, Any]) -> str:
    lines = [render_runners([d])]
    series = d.get("series") or {}
    if series.get("rows"):
        lines.append("calibrations (median per metric):")
        lines.append("  " + " ".join(f"{h:>16}" for h in ["when", "result", *series["metrics"]]))
        for row in series["rows"]:
            values = [f"{v:.4g}" if v is not None else "" for v in row["values"]]
            lines.append("  " + " ".join(f"{c:>16}" for c in [row["created"][:16], row["result"], *values]))
    lines.append("history:")
    for e in d.get("events", []):
        who = f" by {e['by']}" if e["by"] else ""
        what = e["kind"] + (f" {e['result']}" if e["result"] else "")
        detail = "; ".join(x for x in (e["reason"], e["note"]) if x)
        lines.append(f"  {e['created'][:19]} {what}{who}" + (f": {detail}" if detail else ""))
    return "\n".join(lines)


def cmd_runners(args: argparse.Namespace) -> int:
    client = client_from_config()
    action = getattr(args, "action", None)
    if action in ("release", "quarantine"):
        body: dict[str, Any] = {"note": args.note}
        if action == "release":
            body["relearn"] = args.relearn
        d = client.call("POST", f"/runners/{quote(args.name, safe='')}/{action}", body)
        if args.json:
            print(json.dumps(d, indent=2))
        elif not d["changed"]:
            print(f"runner {d['name']} was already {d['health']}: nothing changed")
        else:
            print(render_runners([d]))
        return 0
    if action == "checks":
        d = client.call("GET", f"/runners/{quote(args.name, safe='')}/checks")
        print(json.dumps(d, indent=2) if args.json else render_checks(d))
        return 0
    runners = client.call("GET", "/runners")
    print(json.dumps(runners, indent=2) if args.json else render_runners(runners))
    return 0


def add_parsers(sub: Any) -> None:
    rn = sub.add_parser("runners", help="the lab's runners: state, why quarantined and since when, calibrations")
    rn.add_argument("--json", action="store_true")
    rn.set_defaults(func=cmd_runners, action=None)
    actions = rn.add_subparsers(dest="action")
    rel = actions.add_parser("release", help="(staff) put a quarantined runner back to work")
    rel.add_argument("name")
    rel.add_argument("--note", required=True, help="what was fixed; kept in the runner's history")
    rel.add_argument(
        "--relearn", action="store_true", help="the runner changed for good: start its calibration series again"
    )
    rel.add_argument("--json", action="store_true")
    q = actions.add_parser("quarantine", help="(staff) take a runner out of work until released")
    q.add_argument("name")
    q.add_argument("--note", required=True, help="why; kept in the runner's history")
    q.add_argument("--json", action="store_true")
    ch = actions.add_parser("checks", help="one runner's calibrations, quarantines and releases")
    ch.add_argument("name")
    ch.add_argument("--json", action="store_true")
