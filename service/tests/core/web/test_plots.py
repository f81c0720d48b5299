"""The SVG drawing on plain data: no database, no Django (kperf.core.web.plots)."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from kperf.core.web import plots

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    """The document as an XML parser reads it: fails on anything not well formed."""
    return ET.fromstring(svg)


def points(root: ET.Element, **attrs: str) -> list[ET.Element]:
    return [
        c
        for c in root.iter(f"{SVG}circle")
        if "pt" in c.get("class", "").split() and all(c.get(f"data-{k}") == v for k, v in attrs.items())
    ]


def metric(**changes: object) -> plots.MetricPlot:
    fields: dict[str, object] = {
        "metric": "spawn-vmas-0",
        "unit": "forks/s",
        "higher_is_better": True,
        "clock": "wall clock",
        "verdict": "regression",
        "base": [[1000.0, 1001.0, 1002.0], [990.0, 991.0, 992.0]],
        "head": [[500.0, 501.0, 502.0], [505.0, 506.0, 507.0], [498.0, 499.0, 500.0]],
        "base_estimate": 996.0,
        "head_estimate": 502.0,
        "change_pct": -49.6,
        "ci_low_pct": -50.1,
        "ci_high_pct": -49.0,
        "min_effect_pct": 3.0,
    }
    return plots.MetricPlot(**(fields | changes))  # type: ignore[arg-type]


def test_a_metric_draws_one_point_per_sample_with_its_side_boot_and_iteration() -> None:
    root = parse(plots.metric_svg(metric()))
    assert len(points(root)) == 15
    assert len(points(root, side="base")) == 6 and len(points(root, side="head")) == 9
    assert len(points(root, side="head", boot="3")) == 3
    (one,) = points(root, side="base", boot="2", iter="3")
    assert one.findtext(f"{SVG}title") == "base boot 2 iteration 3: 992 forks/s"


def test_a_metric_shows_its_interval_verdict_unit_direction_and_clock() -> None:
    svg = plots.metric_svg(metric())
    root = parse(svg)
    assert root.get("data-verdict") == "regression"
    (interval,) = [g for g in root.iter(f"{SVG}g") if g.get("class") == "interval"]
    assert (interval.get("data-low"), interval.get("data-high")) == ("-50.1", "-49")
    assert "95% CI [-50.10%, -49.00%]" in svg and "-49.60% regression" in svg
    assert "forks/s, higher is better" in svg and "wall clock" in svg
    assert "threshold ±3%" in svg
    assert [e.get("data-side") for e in root.iter(f"{SVG}line") if e.get("class") == "estimate"] == ["base", "head"]
    lower = plots.metric_svg(metric(higher_is_better=False, unit="usec"))
    assert "usec, lower is better" in lower


def test_names_are_escaped_in_text_and_attributes() -> None:
    evil = 'x"><script>alert(1)</script>&'
    svg = plots.metric_svg(metric(metric=evil, unit="<b>", verdict='no"pe'))
    root = parse(svg)
    assert "<script>" not in svg
    assert root.get("data-metric") == evil and root.get("data-verdict") == 'no"pe'
    assert root.findtext(f"{SVG}title") == f'{evil}: no"pe'
    series = plots.series_svg(
        plots.SeriesPlot(
            title="<t>",
            metric="m&m",
            unit="u",
            higher_is_better=True,
            clock="wall clock",
            commits=[plots.SeriesCommit(sha="a" * 40, position=1, subject="<img src=x>", boots=[[1.0]])],
            changes=[plots.SeriesChange(0, None, "regression", -5.0, 0)],
        )
    )
    assert "<img" not in series and "&lt;img src=x&gt;" in series
    parse(series)


def test_characters_xml_forbids_do_not_break_the_picture() -> None:
    """A commit subject with an escape or a NUL (git allows both) still gives a valid SVG."""
    series = plots.series_svg(
        plots.SeriesPlot(
            title="t\x1b[31m",
            metric="m",
            unit="u",
            higher_is_better=True,
            clock="wall clock",
            commits=[plots.SeriesCommit(sha="a" * 40, position=1, subject="fix\x00 \x1b[1mbold", boots=[[1.0]])],
        )
    )
    root = parse(series)  # raises on any character XML 1.0 forbids
    assert "\x1b" not in series and "\x00" not in series
    assert len(points(root)) == 1


def test_no_samples_draws_an_empty_picture_that_says_so() -> None:
    for svg in (
        plots.metric_svg(metric(base=[], head=[[]], base_estimate=None, head_estimate=None, change_pct=None)),
        plots.shape_svg(plots.ShapePlot("spawn", "extra VMAs", "forks/s", True, "wall clock", [])),
        plots.series_svg(plots.SeriesPlot("s", "m", "u", True, "wall clock", [])),
    ):
        root = parse(svg)
        assert points(root) == []
        assert [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "empty"] in (
            ["no samples"],
            ["no measured commits"],
        )


def test_identical_samples_and_missing_interval_still_draw() -> None:
    svg = plots.metric_svg(
        metric(
            base=[[7.0, 7.0]], head=[[7.0, 7.0]], ci_low_pct=None, ci_high_pct=None, change_pct=0.0, verdict="no-change"
        )
    )
    root = parse(svg)
    assert len(points(root)) == 4
    assert all(math.isfinite(float(c.get("cy", "nan"))) for c in points(root))
    assert "no interval" in svg


def test_values_that_are_not_numbers_are_left_out() -> None:
    root = parse(plots.metric_svg(metric(base=[[1.0, math.nan, 2.0]], head=[[math.inf, 3.0]])))
    assert len(points(root)) == 3


def seed_003() -> plots.ShapePlot:
    """The cover letter of seed 003: forks per ten seconds against extra VMAs."""
    vmas = [0, 100, 200, 400, 800, 1600, 3200, 6400]
    base = [112326, 75469, 54529, 34619, 20750, 11355, 6115, 3183]
    head = [116505, 85971, 67121, 46080, 29722, 16665, 9050, 4805]
    return plots.ShapePlot(
        title="spawn on a test machine",
        x_label="extra VMAs",
        unit="forks/s",
        higher_is_better=True,
        clock="wall clock",
        steps=[
            plots.ShapeStep(
                x=x,
                metric=f"spawn-vmas-{x}",
                verdict="improvement",
                base=[[b * 0.99, b * 1.01]] * 2,
                head=[[h * 0.99, h * 1.01]] * 2,
                base_estimate=float(b),
                head_estimate=float(h),
                change_pct=(h / b - 1) * 100,
            )
            for x, b, h in zip(vmas, base, head, strict=True)
        ],
    )


def test_the_spawn_shape_is_one_picture_of_both_sides_against_extra_vmas() -> None:
    svg = plots.shape_svg(seed_003())
    root = parse(svg)
    assert len(points(root)) == 8 * 2 * 4
    assert len(points(root, side="head", x="6400", metric="spawn-vmas-6400")) == 4
    lines = {e.get("data-side"): e.get("points", "") for e in root.iter(f"{SVG}polyline")}
    assert set(lines) == {"base", "head"} and all(len(p.split()) == 8 for p in lines.values())
    # 112326 to 3183 is a factor of 35: a log scale, said on the axis.
    assert "forks/s, higher is better, log scale" in svg
    changes = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "step-change"]
    assert changes[0] == "+3.72%" and changes[-1] == "+50.96%"
    # Head is above base at every step: smaller y on screen.
    base_y = [float(p.split(",")[1]) for p in lines["base"].split()]
    head_y = [float(p.split(",")[1]) for p in lines["head"].split()]
    assert all(h < b for h, b in zip(head_y, base_y, strict=True))


def series(changes: list[plots.SeriesChange], steps: dict[int, int]) -> plots.SeriesPlot:
    return plots.SeriesPlot(
        title="spawn-vmas-0 on master",
        metric="spawn-vmas-0",
        unit="forks/s",
        higher_is_better=True,
        clock="instruction clock",
        commits=[
            plots.SeriesCommit(
                sha=f"{i:040x}",
                position=10 + i * 2,
                subject=f"step {i}",
                boots=[[1000.0 - 100 * (i >= 6), 1001.0], [999.0]],
                bisection_step=steps.get(i, 0),
            )
            for i in range(10)
        ],
        changes=changes,
    )


def test_a_series_draws_every_sample_its_change_points_bisection_steps_and_culprit() -> None:
    svg = plots.series_svg(series([plots.SeriesChange(6, 5, "regression", -10.0, 0)], {5: 2, 6: 1}))
    root = parse(svg)
    assert len(points(root)) == 30
    assert len(points(root, sha=f"{6:040x}")) == 3
    (cp,) = [g for g in root.iter(f"{SVG}g") if g.get("class") == "change-point"]
    assert cp.get("data-sha") == f"{6:040x}" and cp.get("data-direction") == "regression"
    (culprit,) = [g for g in root.iter(f"{SVG}g") if g.get("class") == "culprit"]
    assert culprit.get("data-sha") == f"{6:040x}"
    steps = {g.get("data-sha"): g.get("data-step") for g in root.iter(f"{SVG}g") if g.get("class") == "bisect-step"}
    assert steps == {f"{5:040x}": "2", f"{6:040x}": "1"}
    assert "instruction clock" in svg and "-10.00% regression" in svg


@pytest.mark.parametrize("untested", [1, 3])
def test_a_change_not_yet_on_one_commit_has_no_culprit_and_shades_the_range(untested: int) -> None:
    svg = plots.series_svg(series([plots.SeriesChange(6, 4, "regression", -10.0, untested)], {}))
    root = parse(svg)
    assert [g for g in root.iter(f"{SVG}g") if g.get("class") == "culprit"] == []
    assert [r for r in root.iter(f"{SVG}rect") if r.get("class") == "untested"]
    assert f"{untested} untested" in svg


def test_ticks_are_round_and_inside_the_range() -> None:
    s = plots.Scale(3.2, 97.0, 0, 100)
    assert s.ticks() == [20.0, 40.0, 60.0, 80.0]
    log = plots.value_scale([3183, 116505], 0, 100, allow_log=True)
    assert log.log and {1e4, 1e5} <= set(log.ticks())
    assert plots.fmt(112326) == "112.3k" and plots.fmt(0.5) == "0.5"
