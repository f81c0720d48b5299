"""`kperf track`: follow a branch, list tracked branches, show one (wired into kperf.cli.main)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kperf.cli.client import client_from_config


def render_branch(d: dict[str, Any]) -> str:
    state = "paused" if not d["enabled"] else "polling"
    lines = [
        f"branch {d['id']}: {d['branch']} of {d['tree']} ({state})",
        f"  benchmarks {', '.join(d['benchmarks'])} ({d['grid']}), {', '.join(d['arches'])}; "
        f"head {(d['head_sha'] or 'not fetched yet')[:12]}, last polled {d['last_polled'] or 'never'}",
    ]
    if d.get("last_error"):
        lines.append(f"  last poll failed: {d['last_error']}")
    cps = d.get("change_points", [])
    if cps:
        lines.append("change points:")
        for cp in cps:
            where = (
                cp["sha"][:12]
                if not cp["untested_between"]
                else (f"{(cp['previous_sha'] or '')[:12]}..{cp['sha'][:12]} ({cp['untested_between']} untested)")
            )
            triage = f" [{cp['triage']}]" if cp.get("triage") else ""
            lines.append(
                f"  #{cp.get('id', '?'):<4} {cp['metric']:<24} {cp['change_pct']:+8.2f}% {cp['direction']:<11} "
                f"at {where} on {cp['machine_class']} p={cp['p_value']:.2g}{triage}  {cp['subject']}"
            )
    elif "change_points" in d:
        lines.append("no change points in the measured commits")
    for c in d.get("commits", []):
        gap = f" (+{c['untested_before']} untested before)" if c["untested_before"] else ""
        err = f": {c['error']}" if c["error"] else ""
        lines.append(
            f"  {c['sha'][:12]} {c['status']:<9} boots {c['boots_done']}/{c['boots_total']}{gap} {c['subject']}{err}"
        )
    return "\n".join(lines)


def cmd_track(args: argparse.Namespace) -> int:
    client = client_from_config()
    body = {
        "tree": args.tree,
        "branch": args.branch,
        "benchmarks": args.bench or ["spawn"],
        "grid": args.grid,
        "arches": args.arch or ["x86_64"],
        "boots": args.boots,
        "max_commits": args.max_commits,
        "backfill": args.backfill,
        "notify": args.notify or [],
        "bisect": not args.no_bisect,
    }
    if args.min_effect is not None:
        body["min_effect_pct"] = args.min_effect
    if args.profile:
        body["profile"] = args.profile
    d = client.call("POST", "/branches", body)
    print(f"tracking branch {d['id']}: {client.server}/branches/{d['id']}")
    return 0


def cmd_branches(args: argparse.Namespace) -> int:
    client = client_from_config()
    if args.id is None:
        for b in client.call("GET", "/branches"):
            print(
                f"#{b['id']:<4} {'polling' if b['enabled'] else 'paused':<8} {b['branch']}  "
                f"{', '.join(b['benchmarks'])}  {(b['head_sha'] or '-')[:12]}  {b['tree']}"
            )
        return 0
    if args.pause or args.resume:
        client.call("PATCH", f"/branches/{args.id}", {"enabled": bool(args.resume)})
    if args.poll:
        client.call("POST", f"/branches/{args.id}/poll")
    d = client.call("GET", f"/branches/{args.id}")
    print(json.dumps(d, indent=2) if args.json else render_branch(d))
    return 0


def add_parsers(sub: Any) -> None:
    t = sub.add_parser("track", help="follow a branch: measure every commit it moves to, find change points")
    t.add_argument("tree", help="git URL (https://; git://, ssh:// or a local path where the service allows them)")
    t.add_argument("branch", help="the branch to follow")
    t.add_argument("--bench", action="append", help="benchmark (repeat for more; 'all' for every one)")
    t.add_argument("--grid", default="quick", help="parameter grid: quick or full")
    t.add_argument(
        "--min-effect",
        type=float,
        metavar="PCT",
        help="practical threshold in percent for change points (default: the clock's, see docs/statistics.md)",
    )
    t.add_argument("--arch", action="append", help="x86_64 or arm64 (repeat for both)")
    t.add_argument(
        "--profile",
        metavar="NAME",
        help="kernel configuration profile of its commits: tiny, mm or distro; measured on the machine classes "
        "of that profile (default: every class, each with its own)",
    )
    t.add_argument("--boots", type=int, default=0, help="boots per commit (default: the grid's)")
    t.add_argument("--max-commits", type=int, default=16, help="most commits measured per move of the branch")
    t.add_argument("--backfill", type=int, default=0, help="also measure this many commits before the current head")
    t.add_argument("--notify", action="append", help="also mail this address about regressions (repeat for more)")
    t.add_argument(
        "--no-bisect", action="store_true", help="do not measure the unmeasured commits inside a change's range"
    )
    t.set_defaults(func=cmd_track)

    b = sub.add_parser("branches", help="tracked branches, or one of them with its commits and change points")
    b.add_argument("id", type=int, nargs="?")
    b.add_argument("--json", action="store_true")
    b.add_argument("--poll", action="store_true", help="fetch the tree now")
    b.add_argument("--pause", action="store_true", help="stop polling (measurements are kept)")
    b.add_argument("--resume", action="store_true", help="poll again")
    b.set_defaults(func=cmd_branches)
