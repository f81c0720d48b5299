"""Pictures of results as SVG documents: data in, an SVG string out.

Drawn on the server so that a page needs no JavaScript and no Grafana to
show them, and kept free of Django so the drawing can be tested on plain
data (kperf.core.web.plot_data gathers the data; docs/plots.md says what is
drawn). Every sample is one `<circle class="pt">` with data attributes
(side, boot, iteration; the commit on a series) so tests and a reader's
own tools can count and find them; every text is escaped.

One picture, one clock: the callers pass the samples of one comparison or
one series, which never mixes clocks, and the clock is written on the axis.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from html import escape

Boots = list[list[float]]  # per boot, its iterations' values

SIDE_COLOURS = {"base": "#1f5fa8", "head": "#d9730d"}
VERDICT_COLOURS = {
    "regression": "#b00020",
    "improvement": "#1b7f3b",
    "no-change": "#555555",
    "inconclusive": "#8a6d00",
    "error": "#6a1b9a",
}
DIRECTION_COLOURS = {"regression": "#b00020", "improvement": "#1b7f3b"}
STYLE = (
    "text{font:11px sans-serif;fill:#222}.title{font-weight:bold;font-size:12px}"
    ".grid{stroke:#e4e4e4}.axis{stroke:#888}.pt{fill-opacity:.7}"
)


@dataclass
class MetricPlot:
    """One metric of a comparison: its samples per side and what was concluded."""

    metric: str
    unit: str
    higher_is_better: bool
    clock: str  # the clock's label, e.g. "wall clock"
    verdict: str
    base: Boots
    head: Boots
    base_estimate: float | None = None
    head_estimate: float | None = None
    change_pct: float | None = None  # signed: negative is worse
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    min_effect_pct: float = 0.0


@dataclass
class ShapeStep:
    """One value of the parameter a benchmark sweeps (spawn's extra VMAs)."""

    x: int
    metric: str
    verdict: str
    base: Boots
    head: Boots
    base_estimate: float | None = None
    head_estimate: float | None = None
    change_pct: float | None = None


@dataclass
class ShapePlot:
    title: str
    x_label: str
    unit: str
    higher_is_better: bool
    clock: str
    steps: list[ShapeStep]


@dataclass
class SeriesCommit:
    sha: str
    position: int
    subject: str
    boots: Boots
    bisection_step: int = 0  # its number among the commits bisection added; 0: not one


@dataclass
class SeriesChange:
    commit: int  # index of the first commit after the change in SeriesPlot.commits
    previous: int | None  # index of the last measured commit before it
    direction: str
    change_pct: float
    untested_between: int  # 0: the commit is the culprit


@dataclass
class SeriesPlot:
    title: str
    metric: str
    unit: str
    higher_is_better: bool
    clock: str
    commits: list[SeriesCommit]
    changes: list[SeriesChange] = field(default_factory=list)


# Characters XML 1.0 does not allow at all, escaped or not: one in a commit
# subject would make the whole picture invalid.
_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _e(value: object) -> str:
    return escape(_NOT_XML.sub("\ufffd", str(value)), quote=True)


def _c(v: float) -> str:
    """A coordinate: a tenth of a pixel is finer than any screen shows."""
    return f"{v:.1f}"


def fmt(v: float) -> str:
    """A value as an axis or label shows it: four significant digits, k and M for large ones."""
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.4g}M"
    if a >= 1e4:
        return f"{v / 1e3:.4g}k"
    return f"{v:.4g}"


def _finite(boots: Boots) -> list[float]:
    return [v for boot in boots for v in boot if math.isfinite(v)]


def _better(higher_is_better: bool) -> str:
    return "higher is better" if higher_is_better else "lower is better"


@dataclass
class Scale:
    """Data lo..hi onto pixels a..b, linear or logarithmic (positive data only)."""

    lo: float
    hi: float
    a: float
    b: float
    log: bool = False

    def __call__(self, v: float) -> float:
        if self.log:
            t = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            t = (v - self.lo) / (self.hi - self.lo)
        return self.a + t * (self.b - self.a)

    def ticks(self, n: int = 5) -> list[float]:
        if self.log:
            out = []
            for k in range(math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi)) + 1):
                out += [m * 10.0**k for m in (1, 2, 5) if self.lo <= m * 10.0**k <= self.hi]
            return out
        raw = (self.hi - self.lo) / n
        mag = 10.0 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
        first = math.ceil(self.lo / step)
        return [i * step for i in range(first, math.floor(self.hi / step) + 1)]


def value_scale(values: Iterable[float], a: float, b: float, allow_log: bool = False) -> Scale:
    """A padded scale over the values; logarithmic (when allowed) once they span
    more than a factor of four, so a relative change looks the same at every level."""
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return Scale(0.0, 1.0, a, b)
    lo, hi = min(vals), max(vals)
    if allow_log and lo > 0 and hi / lo > 4:
        return Scale(lo / 1.15, hi * 1.15, a, b, log=True)
    if lo == hi:
        # Identical samples: a band around them, not a division by zero.
        pad = abs(lo) * 0.05 or 1.0
        return Scale(lo - pad, hi + pad, a, b)
    pad = (hi - lo) * 0.08
    return Scale(lo - pad, hi + pad, a, b)


def _open(width: int, height: int, kind: str, label: str, attrs: dict[str, object]) -> list[str]:
    extra = "".join(f' data-{k}="{_e(v)}"' for k, v in attrs.items())
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="kperf-plot" data-kind="{kind}"{extra} '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
        f"<title>{_e(label)}</title>",
        f"<style>{STYLE}</style>",
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
    ]


def _text(x: float, y: float, s: str, cls: str = "", anchor: str = "start", fill: str = "", extra: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    f = f' style="fill:{fill}"' if fill else ""
    return f'<text x="{_c(x)}" y="{_c(y)}" text-anchor="{anchor}"{c}{f}{extra}>{_e(s)}</text>'


def _y_axis(y: Scale, left: float, right: float, label: str) -> list[str]:
    out = [f'<g class="y-axis" data-label="{_e(label)}">']
    for t in y.ticks():
        py = y(t)
        out.append(f'<line class="grid" x1="{_c(left)}" x2="{_c(right)}" y1="{_c(py)}" y2="{_c(py)}"/>')
        out.append(_text(left - 4, py + 4, fmt(t), anchor="end"))
    mid = (y.a + y.b) / 2
    out.append(
        f'<text class="axis-label" x="14" y="{_c(mid)}" text-anchor="middle" '
        f'transform="rotate(-90 14 {_c(mid)})">{_e(label)}</text>'
    )
    out.append(f'<line class="axis" x1="{_c(left)}" x2="{_c(left)}" y1="{_c(y.a)}" y2="{_c(y.b)}"/>')
    out.append("</g>")
    return out


def _point(x: float, y: float, colour: str, r: float, tip: str, attrs: dict[str, object]) -> str:
    data = "".join(f' data-{k}="{_e(v)}"' for k, v in attrs.items())
    return (
        f'<circle class="pt"{data} cx="{_c(x)}" cy="{_c(y)}" r="{r}" fill="{colour}"><title>{_e(tip)}</title></circle>'
    )


def _side_points(
    boots: Boots, side: str, left: float, width: float, y: Scale, unit: str, extra: dict[str, object] | None = None
) -> list[str]:
    """A side's samples: boots side by side across `width`, iterations spread inside each boot's slot."""
    out = []
    slot = width / max(1, len(boots))
    for b, boot in enumerate(boots):
        for i, v in enumerate(boot):
            if not math.isfinite(v):
                continue
            spread = ((i + 0.5) / len(boot) - 0.5) * 0.6 * slot
            x = left + (b + 0.5) * slot + spread
            tip = f"{side} boot {b + 1} iteration {i + 1}: {fmt(v)} {unit}"
            attrs: dict[str, object] = {"side": side, "boot": b + 1, "iter": i + 1, **(extra or {})}
            out.append(_point(x, y(v), SIDE_COLOURS[side], 3, tip, attrs))
    return out


def _empty(out: list[str], width: int, height: int, why: str) -> str:
    out.append(_text(width / 2, height / 2, why, cls="empty", anchor="middle"))
    out.append("</svg>")
    return "\n".join(out)


def _pct(v: float) -> str:
    return f"{v:+.2f}%"


def metric_svg(m: MetricPlot) -> str:
    """Base and head samples per boot and iteration, each side's estimate, and
    beside them the change's interval against the practical threshold, with the verdict."""
    width, height = 660, 280
    top, bottom, left, right = 40.0, 230.0, 70.0, 430.0
    out = _open(width, height, "metric", f"{m.metric}: {m.verdict}", {"metric": m.metric, "verdict": m.verdict})
    colour = VERDICT_COLOURS.get(m.verdict, "#222")
    out.append(_text(left, 18, m.metric, cls="title"))
    out.append(_text(width - 10, 18, m.verdict, cls="verdict", anchor="end", fill=colour))
    values = _finite(m.base) + _finite(m.head)
    if not values:
        return _empty(out, width, height, "no samples")
    estimates = [e for e in (m.base_estimate, m.head_estimate) if e is not None]
    y = value_scale(values + estimates, bottom, top)
    out += _y_axis(y, left, right, f"{m.unit}, {_better(m.higher_is_better)}")
    half = (right - left) / 2
    for n, (side, boots, est) in enumerate((("base", m.base, m.base_estimate), ("head", m.head, m.head_estimate))):
        x0 = left + n * half
        out += _side_points(boots, side, x0, half, y, m.unit)
        if est is not None and math.isfinite(est):
            py = _c(y(est))
            out.append(
                f'<line class="estimate" data-side="{side}" x1="{_c(x0 + 4)}" x2="{_c(x0 + half - 4)}" '
                f'y1="{py}" y2="{py}" stroke="{SIDE_COLOURS[side]}" stroke-dasharray="5 3"/>'
            )
        label = f"{side}: {len(boots)} boot{'s' if len(boots) != 1 else ''}"
        out.append(_text(x0 + half / 2, bottom + 16, label, anchor="middle", fill=SIDE_COLOURS[side]))
    out.append(f'<line class="axis" x1="{_c(left + half)}" x2="{_c(left + half)}" y1="{top}" y2="{bottom}"/>')
    out.append(_text(left, height - 10, f"{m.clock} · dashed: each side's estimate"))
    out += _interval(m, 470.0, width - 14.0, top, bottom, colour)
    out.append("</svg>")
    return "\n".join(out)


def _interval(m: MetricPlot, left: float, right: float, top: float, bottom: float, colour: str) -> list[str]:
    """The change with its interval on a percent axis; the shaded band is the
    practical threshold, inside which nothing is called a regression."""
    thr = abs(m.min_effect_pct)
    known = [v for v in (m.change_pct, m.ci_low_pct, m.ci_high_pct) if v is not None and math.isfinite(v)]
    x = value_scale([*known, -thr, thr, 0.0], left, right)
    mid = (top + bottom) / 2
    out = ['<g class="interval-panel">']
    out.append(
        f'<rect class="threshold" x="{_c(x(-thr))}" y="{top}" width="{_c(x(thr) - x(-thr))}" '
        f'height="{bottom - top}" fill="#eeeeee"/>'
    )
    out.append(f'<line class="axis" x1="{_c(x(0))}" x2="{_c(x(0))}" y1="{top}" y2="{bottom}"/>')
    for t in x.ticks(3):
        out.append(_text(x(t), bottom + 16, f"{t:g}%", anchor="middle"))
    out.append(_text((left + right) / 2, bottom + 30, "change, negative is worse", anchor="middle"))
    if m.ci_low_pct is not None and m.ci_high_pct is not None and math.isfinite(m.ci_low_pct + m.ci_high_pct):
        lo, hi = x(m.ci_low_pct), x(m.ci_high_pct)
        out.append(
            f'<g class="interval" data-low="{m.ci_low_pct:.4g}" data-high="{m.ci_high_pct:.4g}" stroke="{colour}" '
            f'stroke-width="2"><line x1="{_c(lo)}" x2="{_c(hi)}" y1="{mid}" y2="{mid}"/>'
            f'<line x1="{_c(lo)}" x2="{_c(lo)}" y1="{mid - 6}" y2="{mid + 6}"/>'
            f'<line x1="{_c(hi)}" x2="{_c(hi)}" y1="{mid - 6}" y2="{mid + 6}"/></g>'
        )
        label = f"95% CI [{_pct(m.ci_low_pct)}, {_pct(m.ci_high_pct)}]"
        out.append(_text((left + right) / 2, mid + 24, label, anchor="middle"))
    else:
        out.append(_text((left + right) / 2, mid + 24, "no interval", anchor="middle"))
    if m.change_pct is not None and math.isfinite(m.change_pct):
        out.append(
            f'<circle class="change" data-change="{m.change_pct:.4g}" cx="{_c(x(m.change_pct))}" cy="{mid}" '
            f'r="4" fill="{colour}"/>'
        )
        out.append(
            _text((left + right) / 2, mid - 14, f"{_pct(m.change_pct)} {m.verdict}", anchor="middle", fill=colour)
        )
    out.append(_text((left + right) / 2, top - 6, f"threshold ±{thr:g}%", anchor="middle"))
    out.append("</g>")
    return out


def shape_svg(s: ShapePlot) -> str:
    """One quantity against the parameter a benchmark sweeps, base and head:
    every sample, a line through each side's estimates, and each step's change
    and verdict above it (seed 003's forks/s against extra VMAs)."""
    width, height = 660, 340
    top, bottom, left, right = 56.0, 280.0, 70.0, 640.0
    out = _open(width, height, "shape", s.title, {"unit": s.unit, "clock": s.clock})
    out.append(_text(left, 18, s.title, cls="title"))
    steps = sorted(s.steps, key=lambda st: st.x)
    values = [v for st in steps for v in _finite(st.base) + _finite(st.head)]
    if not values:
        return _empty(out, width, height, "no samples")
    y = value_scale(values, bottom, top, allow_log=True)
    scale_note = ", log scale" if y.log else ""
    out += _y_axis(y, left, right, f"{s.unit}, {_better(s.higher_is_better)}{scale_note}")
    slot = (right - left) / len(steps)
    lines: dict[str, list[str]] = {"base": [], "head": []}
    for n, st in enumerate(steps):
        centre = left + (n + 0.5) * slot
        for k, (side, boots, est) in enumerate(
            (("base", st.base, st.base_estimate), ("head", st.head, st.head_estimate))
        ):
            x0 = centre - slot * 0.4 + k * slot * 0.4
            out += _side_points(boots, side, x0, slot * 0.4, y, s.unit, {"x": st.x, "metric": st.metric})
            if est is not None and math.isfinite(est) and (est > 0 or not y.log):
                lines[side].append(f"{_c(centre)},{_c(y(est))}")
        out.append(_text(centre, bottom + 16, str(st.x), anchor="middle"))
        if st.change_pct is not None and math.isfinite(st.change_pct):
            colour = VERDICT_COLOURS.get(st.verdict, "#222")
            attrs = f' data-x="{st.x}" data-verdict="{_e(st.verdict)}"'
            out.append(
                _text(
                    centre, top - 8, _pct(st.change_pct), cls="step-change", anchor="middle", fill=colour, extra=attrs
                )
            )
    for side, pts in lines.items():
        if pts:
            out.append(
                f'<polyline class="line" data-side="{side}" points="{" ".join(pts)}" fill="none" '
                f'stroke="{SIDE_COLOURS[side]}" stroke-width="1.5"/>'
            )
    out.append(_text((left + right) / 2, bottom + 32, s.x_label, anchor="middle"))
    out.append(_legend(left, height - 10, s.clock))
    out.append("</svg>")
    return "\n".join(out)


def _legend(x: float, y: float, clock: str) -> str:
    return (
        f'<g class="legend"><circle cx="{_c(x + 4)}" cy="{_c(y - 4)}" r="4" fill="{SIDE_COLOURS["base"]}"/>'
        + _text(x + 12, y, "base")
        + f'<circle cx="{_c(x + 54)}" cy="{_c(y - 4)}" r="4" fill="{SIDE_COLOURS["head"]}"/>'
        + _text(x + 62, y, f"head · lines through each side's estimates · {clock}")
        + "</g>"
    )


def series_svg(s: SeriesPlot) -> str:
    """A tracked branch's series of one metric: every sample per commit in
    branch order, the level per commit, each change point (a line between the
    last commit before it and the first after, shaded over commits not measured
    between), the commits bisection measured (numbered), and the culprit."""
    width, height = 900, 320
    top, bottom, left, right = 56.0, 250.0, 70.0, 880.0
    out = _open(width, height, "series", s.title, {"metric": s.metric, "clock": s.clock})
    out.append(_text(left, 18, s.title, cls="title"))
    values = [v for c in s.commits for v in _finite(c.boots)]
    if not values:
        return _empty(out, width, height, "no measured commits")
    y = value_scale(values, bottom, top)
    out += _y_axis(y, left, right, f"{s.unit}, {_better(s.higher_is_better)}")
    n = len(s.commits)
    slot = (right - left) / n
    r = 3 if n <= 60 else 2 if n <= 200 else 1.2

    def cx(i: float) -> float:
        return left + (i + 0.5) * slot

    for ch in s.changes:
        out += _change_marks(ch, s.commits, cx, slot, top, bottom)
    level: list[str] = []
    for i, c in enumerate(s.commits):
        for b, boot in enumerate(c.boots):
            for k, v in enumerate(boot):
                if not math.isfinite(v):
                    continue
                jitter = (((b * len(boot) + k) + 0.5) / max(1, len(c.boots) * len(boot)) - 0.5) * 0.6 * slot
                tip = f"#{c.position} {c.sha[:12]} boot {b + 1} iteration {k + 1}: {fmt(v)} {s.unit}"
                attrs: dict[str, object] = {"sha": c.sha, "position": c.position, "boot": b + 1, "iter": k + 1}
                out.append(_point(cx(i) + jitter, y(v), SIDE_COLOURS["base"], r, tip, attrs))
        means = [sum(f) / len(f) for f in ([v for v in boot if math.isfinite(v)] for boot in c.boots) if f]
        if means:
            level.append(f"{_c(cx(i))},{_c(y(sum(means) / len(means)))}")
        if c.bisection_step:
            out.append(
                f'<g class="bisect-step" data-sha="{_e(c.sha)}" data-step="{c.bisection_step}">'
                f'<path d="M{_c(cx(i))},{_c(bottom + 4)} l-5,9 h10 z" fill="#6a3d9a"/>'
                + _text(cx(i), bottom + 24, str(c.bisection_step), anchor="middle", fill="#6a3d9a")
                + f"<title>bisection step {c.bisection_step}: {_e(c.sha[:12])} {_e(c.subject)}</title></g>"
            )
    if len(level) > 1:
        out.append(f'<polyline class="level" points="{" ".join(level)}" fill="none" stroke="#222" stroke-width="1"/>')
    every = max(1, math.ceil(n / 10))
    for i, c in enumerate(s.commits):
        if i % every == 0 or i == n - 1:
            out.append(_text(cx(i), bottom + 38, f"#{c.position}", anchor="middle"))
    out.append(
        _text(
            left,
            height - 8,
            f"{s.clock} · x: measured commits in first-parent order (#position) · line: level per commit · "
            "triangles: bisection steps, in order",
        )
    )
    out.append("</svg>")
    return "\n".join(out)


def _change_marks(
    ch: SeriesChange, commits: list[SeriesCommit], cx: Callable[[float], float], slot: float, top: float, bottom: float
) -> list[str]:
    colour = DIRECTION_COLOURS.get(ch.direction, "#222")
    c = commits[ch.commit]
    before = ch.previous if ch.previous is not None else ch.commit - 1
    at = (cx(before) + cx(ch.commit)) / 2 if before >= 0 else cx(ch.commit) - slot / 2
    out = [
        f'<g class="change-point" data-sha="{_e(c.sha)}" data-direction="{_e(ch.direction)}" '
        f'data-change="{ch.change_pct:.4g}" data-untested="{ch.untested_between}">'
    ]
    if ch.untested_between and ch.previous is not None:
        x0, x1 = cx(ch.previous), cx(ch.commit)
        out.append(
            f'<rect class="untested" x="{_c(x0)}" y="{top}" width="{_c(x1 - x0)}" height="{bottom - top}" '
            'fill="#fff3c4"/>'
        )
        out.append(_text((x0 + x1) / 2, bottom - 4, f"{ch.untested_between} untested", anchor="middle"))
    out.append(f'<line x1="{_c(at)}" x2="{_c(at)}" y1="{top}" y2="{bottom}" stroke="{colour}" stroke-dasharray="4 3"/>')
    out.append(_text(at, top - 22, f"{_pct(ch.change_pct)} {ch.direction}", anchor="middle", fill=colour))
    if ch.untested_between == 0:
        x = cx(ch.commit)
        out.append(
            f'<g class="culprit" data-sha="{_e(c.sha)}"><path d="M{_c(x)},{_c(top - 2)} l-6,-10 h12 z" '
            f'fill="{colour}"/><title>culprit: {_e(c.sha[:12])} {_e(c.subject)}</title></g>'
        )
        out.append(_text(x, top - 34, f"culprit {c.sha[:12]}", anchor="middle", fill=colour))
    out.append("</g>")
    return out
