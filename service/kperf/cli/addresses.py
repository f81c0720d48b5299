"""`kperf addresses`: the addresses your results may be mailed to besides yours (docs/submitting.md).

kperf addresses list
kperf addresses confirm linux-foo@example.org   (kperf mails it a link to follow)
kperf addresses remove linux-foo@example.org
"""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import quote

from kperf.cli.client import client_from_config


def _client() -> Any:
    return client_from_config()


def cmd_list(args: argparse.Namespace) -> int:
    rows = _client().call("GET", "/addresses")
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        until = f"  (link works until {r['expires'][:16].replace('T', ' ')})" if r["state"] == "pending" else ""
        print(f"{r['state']:<10} {r['address']}{until}")
    if not rows:
        print("no addresses: `kperf addresses confirm ADDR` asks kperf to confirm one")
    return 0


def cmd_confirm(args: argparse.Namespace) -> int:
    d = _client().call("POST", "/addresses", {"address": args.address})
    if args.json:
        print(json.dumps(d, indent=2))
        return 0
    print(
        {
            "own": f"{d['address']} is your own address: kperf mails it without asking",
            "allowed": f"{d['address']} is allowed by this service for everyone: no confirmation needed",
            "confirmed": f"{d['address']} is confirmed already",
        }.get(
            d["state"],
            f"{'kperf mailed' if d['mailed'] else 'kperf already mailed'} {d['address']} a link; once it is followed "
            f"(before {str(d['expires'])[:16].replace('T', ' ')}), --reply-to may name it",
        )
    )
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    _client().call("DELETE", f"/addresses/{quote(args.address, safe='@')}")
    print(f"{args.address} forgotten")
    return 0


def add_parsers(sub: Any) -> None:
    a = sub.add_parser("addresses", help="addresses your results may be mailed to (--reply-to), and confirming one")
    what = a.add_subparsers(dest="what", required=True)
    ls = what.add_parser("list", help="the addresses you asked about, and where each stands")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_list)
    c = what.add_parser("confirm", help="ask kperf to mail ADDR a link; once followed, --reply-to may name ADDR")
    c.add_argument("address", metavar="ADDR")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_confirm)
    r = what.add_parser("remove", help="forget ADDR: submissions may no longer name it")
    r.add_argument("address", metavar="ADDR")
    r.set_defaults(func=cmd_remove)
