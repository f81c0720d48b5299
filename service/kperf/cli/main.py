"""`kperf`: the users' command line (login, submit, status, list, compare, changepoints).

login/submit/status/list talk to the REST API only, so they work against any
kperf service. compare and changepoints run kperf's statistics locally on a
JSON file (docs/statistics.md has the formats) and need no server.
Settings come from ~/.config/kperf/config.json (written by `kperf login`),
overridden by KPERF_SERVER and KPERF_TOKEN.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from kperf.cli import addresses, mail, mmtests, progress, runners, series, track, triage
from kperf.cli.client import Client, CliError, client_from_config, config_path, load_config
from kperf.cli.status import is_final, render_status


def cmd_login(args: argparse.Namespace) -> int:
    cfg = load_config()
    server = args.server or cfg.get("server") or "http://127.0.0.1:8000"
    if args.token:
        token = args.token
        Client(server, token).call("GET", "/benchmarks")  # proves the token works
    else:
        user = args.user or input("user: ")
        password = sys.stdin.readline().rstrip("\n") if args.password_stdin else getpass.getpass("password: ")
        token = Client(server, None).call("POST", "/auth/token", {"username": user, "password": password})["token"]
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"server": server, "token": token}, fh)
    print(f"logged in to {server}; token saved in {path}")
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    client = client_from_config()
    try:
        head = series.head_fields(args)
    except series.MboxError as e:
        raise CliError(str(e)) from None
    body = {
        "tree": args.tree or "",
        **head,
        "base": args.base,
        "benchmarks": args.bench or ["spawn"],
        "arches": args.arch or ["x86_64"],
    }
    grids = list(dict.fromkeys(args.grid or ["quick"]))
    # One grid as `grid`, which every server takes; several as `grids` (docs/submitting.md, "Several grids").
    if len(grids) == 1:
        body["grid"] = grids[0]
    else:
        body["grids"] = grids
    if args.min_effect is not None:
        body["min_effect_pct"] = args.min_effect
    if args.boot_params:
        body["boot_params"] = args.boot_params
    if args.thp:
        body["thp"] = args.thp
    if args.profile:
        body["profile"] = args.profile
    sub = client.call("POST", "/submissions", body)
    # With --wait --json standard output is the JSON alone (for jq).
    print(
        f"submission {sub['id']}: {client.server}/submissions/{sub['id']}",
        file=sys.stderr if args.json and args.wait else sys.stdout,
    )
    if args.wait:
        return progress.follow(client, sub["id"], args.json)
    return 0


def watch(client: Client, sub_id: int, as_json: bool) -> int:
    last = ""
    while True:
        d = client.call("GET", f"/submissions/{sub_id}")
        text = render_status(d)
        if text != last and not as_json:
            print(text, flush=True)
            print("-" * 40, flush=True)
            last = text
        if is_final(d):
            if as_json:
                print(json.dumps(d, indent=2))
            return 0 if d["status"] == "done" else 1
        time.sleep(5)


def cmd_status(args: argparse.Namespace) -> int:
    client = client_from_config()
    if args.watch:
        return watch(client, args.id, args.json)
    d = client.call("GET", f"/submissions/{args.id}")
    print(json.dumps(d, indent=2) if args.json else render_status(d, args.all))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    client = client_from_config()
    for s in client.call("GET", f"/submissions?limit={args.limit}"):
        print(
            f"#{s['id']:<5} {s['status']:<10} {s['branch']} vs {s['base']}  {', '.join(s['benchmarks'])}  {s['tree']}"
        )
    return 0


def cmd_noise(args: argparse.Namespace) -> int:
    client = client_from_config()
    params = {"machine_class": args.machine_class, "boots": args.boots, "iterations": args.iterations}
    if args.clock:
        params["clock"] = args.clock
    d = client.call("GET", f"/noise?{urlencode(params)}")
    if args.json:
        print(json.dumps(d, indent=2))
        return 0
    clock = d.get("clock", "wall")
    if not d["metrics"]:
        print(
            f"no history on {args.machine_class} with the {clock} clock yet: "
            "noise is learned from finished boots of earlier kernels"
        )
        return 0
    print(f"{args.machine_class}, {clock} clock")
    design = f"{args.boots}x{args.iterations}"
    # The three noise components (docs/statistics.md): between builds, between boots, within a boot.
    print(
        f"{'metric':<28} {'kernels':>7} {'boots':>6} {'build':>8} {'boot':>8} {'iter':>8}"
        f"  {'detectable at ' + design:<20}  drift/commit  window"
    )
    for m in d["metrics"]:
        unit = "%" if m["log_scale"] else ""
        scale = 100.0 if m["log_scale"] else 1.0
        # The wander per commit in units of one commit's noise (sqrt of the rate):
        # "-" where no tracked branch has measured the metric.
        drift = "-" if m.get("drift_rate") is None else f"{m['drift_rate'] ** 0.5:.3f}"
        window = "-" if m.get("change_point_window") is None else str(m["change_point_window"])
        detectable = f"{m['min_detectable_pct']:.2f}%"
        build_sd = m.get("between_build_sd")
        build = "-" if build_sd is None else f"{build_sd * scale:.3f}{unit}"
        boot, within = m["between_boot_sd"] * scale, m["within_boot_sd"] * scale
        print(
            f"{m['metric']:<28} {m['kernels']:>7} {m['boots']:>6} {build:>8} {boot:>7.3f}{unit:1}"
            f"{within:>7.3f}{unit:1}  {detectable:<20}  {drift:>12}  {window:>6}"
        )
    return 0


def _read_doc(path: str) -> Any:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror}") from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise CliError(f"{'standard input' if path == '-' else path} is not JSON: {e}") from None


def cmd_compare(args: argparse.Namespace) -> int:
    from kperf.stats import jsonio, summary

    doc = _read_doc(args.file)
    try:
        inputs, results, out = jsonio.run_compare(doc, args.benchmark)
    except jsonio.FormatError as e:
        raise CliError(f"{args.file}: {e}") from None
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(summary.format_table(inputs, results, args.base_name, args.head_name))
    return 0


def cmd_changepoints(args: argparse.Namespace) -> int:
    from kperf.stats import jsonio

    doc = _read_doc(args.file)
    try:
        out = jsonio.run_changepoints(doc)
    except jsonio.FormatError as e:
        raise CliError(f"{args.file}: {e}") from None
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for name, res in out["metrics"].items():
        cps = res["change_points"]
        print(f"{name}: {len(cps)} change point{'s' if len(cps) != 1 else ''}")
        for cp in cps:
            print(
                f"  at {cp['index']} ({cp['commit']}): {cp['direction']} {cp['change_pct']:+.2f}%"
                f"  p={cp['p_value']:.3g}  seen at {cp['detected_at']}"
            )
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kperf", description="Submit kernel branches to kperf and read verdicts.")
    sub = p.add_subparsers(dest="command", required=True)
    _add_login(sub)
    _add_submit(sub)
    _add_reading(sub)
    addresses.add_parsers(sub)
    mmtests.add_parsers(sub)
    track.add_parsers(sub)
    runners.add_parsers(sub)
    triage.add_parsers(sub)
    mail.add_parsers(sub)
    return p


def _add_login(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    login = sub.add_parser("login", help="get an API token and save it")
    login.add_argument("--server", help="e.g. http://127.0.0.1:8000")
    login.add_argument("--user")
    login.add_argument("--token", help="use an existing token instead of a password")
    login.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    login.set_defaults(func=cmd_login)


def _add_submit(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("submit", help="compare a branch, or a patch series applied on it, against a base")
    s.add_argument(
        "--tree", help="git URL: https://, or what else the service allows (a series: default, the service's tree)"
    )
    series.add_arguments(s)
    s.add_argument("--base", required=True, help="branch, tag or sha to compare against")
    s.add_argument("--bench", action="append", help="benchmark (repeat for more; 'all' for every one)")
    s.add_argument(
        "--grid",
        action="append",
        help="parameter grid: quick (default), full, ... (repeat for more: each benchmark runs those it has, "
        "a comparison per grid; docs/benchmarks.md)",
    )
    s.add_argument(
        "--min-effect",
        type=float,
        metavar="PCT",
        help="practical threshold in percent: a smaller change is shown, never called a regression "
        "(default: 0.5 on the instruction clock, 3 on the wall clock)",
    )
    s.add_argument("--arch", action="append", help="x86_64 or arm64 (repeat for both)")
    s.add_argument(
        "--boot-params",
        metavar="WORDS",
        help='kernel command line words added last to every boot, e.g. "mitigations=off nosmt"',
    )
    s.add_argument(
        "--thp",
        metavar="MODE",
        help="transparent huge pages for every boot: always, madvise or never (default: the kernel's)",
    )
    s.add_argument(
        "--profile",
        metavar="NAME",
        help="kernel configuration profile of both sides: tiny, mm or distro (default: each machine class's own)",
    )
    s.add_argument(
        "--wait",
        action="store_true",
        help="follow the submission with a progress bar until it finishes; "
        "exit 0: no regression, 1: regression, 2: failed, 3: stopped waiting (the server did not answer)",
    )
    s.add_argument(
        "--json", action="store_true", help="with --wait: print the final result as JSON (progress on stderr)"
    )
    s.set_defaults(func=cmd_submit)


def _add_reading(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Reading results: status, list, noise, and the offline compare and changepoints."""
    st = sub.add_parser("status", help="show a submission: builds, progress, verdicts")
    st.add_argument("id", type=int)
    st.add_argument("--watch", action="store_true", help="refresh until it finishes")
    st.add_argument("--json", action="store_true")
    st.add_argument("--all", action="store_true", help="every metric's row, the notes and the tables, not one screen")
    st.set_defaults(func=cmd_status)

    ls = sub.add_parser("list", help="recent submissions")
    ls.add_argument("--limit", type=int, default=20)
    ls.set_defaults(func=cmd_list)

    cmp_ = sub.add_parser("compare", help="A/B-compare base and head samples from a JSON file (offline)")
    cmp_.add_argument("file", help="JSON file, or - for standard input")
    cmp_.add_argument("--json", action="store_true", help="print verdicts as JSON instead of the mmtests-style table")
    cmp_.add_argument("--base-name", default="base", help="column title for the base kernel")
    cmp_.add_argument("--head-name", default="head", help="column title for the head kernel")
    cmp_.add_argument(
        "--benchmark",
        metavar="NAME",
        help="the benchmark the samples are of (spawn, aim9, pft, pagealloc): picks the between-build part "
        "the project measured for it (default: the file's shape.benchmark, else the largest measured for any)",
    )
    cmp_.set_defaults(func=cmd_compare)

    cp = sub.add_parser("changepoints", help="find change points in per-commit series from a JSON file (offline)")
    cp.add_argument("file", help="JSON file, or - for standard input")
    cp.add_argument("--json", action="store_true", help="print change points as JSON")
    cp.set_defaults(func=cmd_changepoints)

    nz = sub.add_parser("noise", help="per-metric noise learned on a machine class, and the change K x N detects")
    nz.add_argument("--machine-class", required=True)
    nz.add_argument("--boots", type=int, default=4, help="boots per side (K)")
    nz.add_argument("--iterations", type=int, default=3, help="iterations per boot (N)")
    nz.add_argument(
        "--clock", choices=["instructions", "wall"], help="which clock's history (default: the machine class's)"
    )
    nz.add_argument("--json", action="store_true")
    nz.set_defaults(func=cmd_noise)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as e:
        print(f"kperf: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`kperf status 7 | head`): stop quietly, as a
        # Unix tool killed by SIGPIPE does, and keep the interpreter's final
        # flush from raising again (Python's docs, "Note on SIGPIPE").
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
