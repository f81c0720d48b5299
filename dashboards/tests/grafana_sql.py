"""What Grafana does with a dashboard's SQL before PostgreSQL sees it, and
running it the way the provisioned data source would.

No Grafana runs here, so its three steps are reproduced from its source
(Grafana 11.6):

- template variables: `templateSrv.replace` with the SQL data sources'
  `interpolateVariable` (packages/grafana-sql/src/datasource/SqlDatasource.ts):
  a single-valued variable is inserted as is with `'` doubled; multi-valued
  or "include All" ones are quoted and joined with commas;
- macros: the PostgreSQL data source's macro engine
  (pkg/tsdb/grafana-postgresql-datasource/macros.go), times in UTC RFC 3339;
- variable options: `ResponseParser.transformMetricFindResponse`: `__text` and
  `__value` columns if both are there, otherwise every value of every column.

Queries run as a role holding only the grants of dashboards/grafana-reader.sql,
in a read-only transaction, so a query that writes, or reads a table the
reader role may not, fails here as it would in production.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from django.db import connection, transaction

DASHBOARDS = Path(__file__).resolve().parent.parent
JSON_DIR = DASHBOARDS / "json"
READER_SQL = DASHBOARDS / "grafana-reader.sql"
READER_ROLE = "kperf_grafana"

# Grafana's variableRegex: $name, [[name:fmt]], ${name.path:fmt}
VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}")
# macros.go: sExpr
MACRO = re.compile(r"\$([_a-zA-Z0-9]+)\(([^\)]*)\)")


def dashboards() -> dict[str, dict[str, Any]]:
    """The generated dashboards by uid, as Grafana's file provider reads them."""
    out = {}
    for path in sorted(JSON_DIR.glob("*.json")):
        board = json.loads(path.read_text())
        out[board["uid"]] = board
    return out


def panel(board: dict[str, Any], title_start: str) -> dict[str, Any]:
    found = [p for p in board["panels"] if p["title"].startswith(title_start)]
    assert len(found) == 1, (title_start, [p["title"] for p in board["panels"]])
    result: dict[str, Any] = found[0]
    return result


def panel_sql(board: dict[str, Any], title_start: str) -> str:
    targets = panel(board, title_start)["targets"]
    assert len(targets) == 1
    sql: str = targets[0]["rawSql"]
    return sql


@dataclass
class Choice:
    """A variable's current value, as Grafana keeps it: text and value."""

    text: str
    value: str


def substitute(sql: str, variables: dict[str, Choice], defined: list[dict[str, Any]]) -> str:
    """templateSrv.replace(sql, scopedVars, interpolateVariable)."""
    models = {v["name"]: v for v in defined}

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        fmt = m.group(3) or m.group(6)
        if name not in variables:
            # Grafana leaves what is not a variable alone: macros are the
            # data source's business, anything else is a typo here.
            assert name.startswith("__"), f"unknown variable ${name} in {sql}"
            return m.group(0)
        choice = variables[name]
        if fmt == "text":
            return choice.text
        if fmt in ("raw",):
            return choice.value
        assert fmt is None, f"format {fmt} is not reproduced here"
        model = models[name]
        if model.get("multi") or model.get("includeAll"):
            return "'" + choice.value.replace("'", "''") + "'"
        return choice.value.replace("'", "''")

    return VARIABLE.sub(one, sql)


def rfc3339nano(t: datetime) -> str:
    """Go's time.RFC3339Nano of t in UTC: trailing zeros of the fraction dropped."""
    t = t.astimezone(timezone.utc)
    frac = f"{t.microsecond * 1000:09d}".rstrip("0")
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def expand_macros(sql: str, start: datetime, end: datetime) -> str:
    """The PostgreSQL data source's macros that kperf's dashboards use."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        args = [a.strip(" ") for a in m.group(2).split(",")]
        if name == "__time":
            return f'{args[0]} AS "time"'
        if name == "__timeEpoch":
            return f'extract(epoch from {args[0]}) as "time"'
        if name == "__timeFilter":
            return f"{args[0]} BETWEEN '{rfc3339nano(start)}' AND '{rfc3339nano(end)}'"
        if name == "__timeFrom":
            return f"'{rfc3339nano(start)}'"
        if name == "__timeTo":
            return f"'{rfc3339nano(end)}'"
        raise AssertionError(f"macro ${name} is not reproduced here (Grafana would say: unknown macro)")

    return MACRO.sub(one, sql)


@dataclass
class Result:
    columns: list[str]
    rows: list[dict[str, Any]]

    def column(self, name: str) -> list[Any]:
        return [r[name] for r in self.rows]


def reader_grants() -> str:
    return READER_SQL.read_text()


def run(sql: str) -> Result:
    """Run one query as the reader role in a read-only transaction; nothing it
    does (the role included) outlives the call."""
    # A role is global to the PostgreSQL server, so each test process uses
    # its own name; it is created and dropped inside this savepoint.
    role = f"{READER_ROLE}_test_{os.getpid()}"
    grants = reader_grants().replace(READER_ROLE, role)
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(grants)
        cur.execute(f"SET LOCAL ROLE {role}")
        cur.execute("SET LOCAL transaction_read_only = on")
        cur.execute(sql)
        columns = [c[0] for c in cur.description]
        rows = [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]
        transaction.set_rollback(True)
    return Result(columns, rows)


def options(result: Result) -> list[Choice]:
    """A variable query's answer as the options Grafana offers."""
    if "__text" in result.columns and "__value" in result.columns:
        found = [Choice(str(r["__text"]), str(r["__value"])) for r in result.rows]
    else:
        found = [Choice(str(v), str(v)) for r in result.rows for v in r.values()]
    seen: set[str] = set()
    unique = []
    for c in found:  # lodash uniqBy(values, 'text')
        if c.text not in seen:
            seen.add(c.text)
            unique.append(c)
    return unique


def variable_options(board: dict[str, Any], name: str, chosen: dict[str, Choice]) -> list[Choice]:
    """Run a variable's query with the variables chosen before it, as Grafana
    does when the dashboard loads or a variable it depends on changes."""
    defined = board["templating"]["list"]
    (model,) = [v for v in defined if v["name"] == name]
    return options(run(substitute(model["query"], chosen, defined)))


def panel_result(
    board: dict[str, Any],
    title_start: str,
    chosen: dict[str, Choice],
    time_range: tuple[datetime, datetime] | None = None,
) -> Result:
    sql = substitute(panel_sql(board, title_start), chosen, board["templating"].get("list", []))
    if time_range is not None:
        sql = expand_macros(sql, *time_range)
    assert "$" not in sql.replace("$$", ""), f"unexpanded variable or macro left in {sql}"
    return run(sql)
