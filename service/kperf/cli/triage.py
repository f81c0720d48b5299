"""`kperf triage`: say what a regression is, and list regressions by state (wired into kperf.cli.main).

kperf triage submission 12 expected -m "the series trades fork speed for memory"
kperf triage changepoint 5 fixed --commit 1a2b3c4d -m "reverted"
kperf triage submission 12              (its state and history)
kperf triage list --state new
"""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import urlencode

from kperf.cli.client import CliError, client_from_config

STATES = ("confirmed", "expected", "invalid", "fixed", "wont-fix")


def render_triage(d: dict[str, Any]) -> str:
    fixed = f" by {d['fixed_by']}" if d["fixed_by"] else ""
    lines = [f"triage {d['id']}: {d['state']}{fixed}  {d['title']}"]
    if d["note"]:
        lines.append(f"  note: {d['note']}")
    if d["kind"] == "change-point" and d["change_point"] is None:
        lines.append("  (re-analysis no longer finds this change point)")
    lines.append("history:")
    for e in d["history"]:
        change = f"{e['from_state']} -> {e['to_state']}" if e["from_state"] else e["to_state"]
        commit = f" ({e['fixed_by']})" if e["fixed_by"] else ""
        note = f": {e['note']}" if e["note"] else ""
        lines.append(f"  {e['at'][:16].replace('T', ' ')}  {e['by'] or 'kperf'} via {e['via']}  {change}{commit}{note}")
    return "\n".join(lines)


def _client() -> Any:
    client = client_from_config()
    # The service records the change as made from the command line.
    client.session.headers["User-Agent"] = "kperf-cli"
    return client


def cmd_triage_one(args: argparse.Namespace) -> int:
    client = _client()
    path = f"/submissions/{args.id}/triage" if args.what == "submission" else f"/change-points/{args.id}/triage"
    if args.state is None:
        if args.message or args.commit:
            raise CliError("-m and --commit go with a state: kperf triage ... ID STATE -m NOTE")
        d = client.call("GET", path)
    else:
        d = client.call("POST", path, {"state": args.state, "note": args.message or "", "fixed_by": args.commit or ""})
    print(json.dumps(d, indent=2) if args.json else render_triage(d))
    return 0


def cmd_triage_list(args: argparse.Namespace) -> int:
    client = _client()
    query = {k: v for k, v in (("state", args.state), ("kind", args.kind), ("limit", args.limit)) if v}
    rows = client.call("GET", "/regressions" + (f"?{urlencode(query)}" if query else ""))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for d in rows:
        target = f"submission {d['submission']}" if d["kind"] == "submission" else f"changepoint {d['change_point']}"
        fixed = f" {d['fixed_by'][:12]}" if d["fixed_by"] else ""
        print(f"{d['state']:<10} {target:<16} {d['title']}{fixed}")
    if not rows:
        print("no regressions" + (f" in state {args.state}" if args.state else ""))
    return 0


def add_parsers(sub: Any) -> None:
    t = sub.add_parser("triage", help="say what a regression is (expected, fixed, ...), or list regressions")
    kinds = t.add_subparsers(dest="what", required=True)
    for what, help_ in (
        ("submission", "a finished submission's regressions"),
        ("changepoint", "a tracked branch's regression change point (ids: kperf branches ID --json)"),
    ):
        p = kinds.add_parser(what, help=help_)
        p.add_argument("id", type=int)
        p.add_argument("state", nargs="?", help=f"one of {', '.join(STATES)}; leave out to show the triage")
        p.add_argument("-m", "--message", help="why (kept in the history)")
        p.add_argument("--commit", help="with fixed: the sha of the commit that fixed it")
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=cmd_triage_one)
    ls = kinds.add_parser("list", help="regressions you may read, newest first")
    ls.add_argument("--state", help=f"new or {', '.join(STATES)} (comma-separated for several)")
    ls.add_argument("--kind", choices=["submission", "change-point"])
    ls.add_argument("--limit", type=int, default=50)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_triage_list)
