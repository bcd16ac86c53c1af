"""A load run's figures (answers/s, TTFT and total latency percentiles, errors by code, the LLM server's use) and
its plot (stdlib SVG: answers completed per second and latency over the run)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from html import escape
from pathlib import Path
from typing import Any

from concurrency.stats import percentile
from devtools.loadtest.driver import Run

__all__ = ["progress_line", "summary", "write_svg"]


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {f"p{p}": round(percentile(ordered, p) * 1000, 1) for p in (50, 95, 99)} | {"n": len(ordered)}


def summary(run: Run, *, llm_capacity: int = 0) -> dict[str, Any]:
    """The run as JSON-ready figures (latencies in milliseconds)."""
    ok = [r for r in run.results if r.outcome == "ok"]
    config = asdict(run.config)
    config["questions"] = len(run.config.questions)
    figures: dict[str, Any] = {
        "config": config,
        "started_at": run.started_at,
        "elapsed_s": round(run.elapsed, 2),
        "asked": len(run.results),
        "completed": len(ok),
        "answers_per_s": round(len(ok) / run.elapsed, 3) if run.elapsed else 0.0,
        "cached": sum(1 for r in ok if r.cached),
        "ttft_ms": _percentiles([r.ttft for r in ok if r.ttft is not None]),
        "total_ms": _percentiles([r.total for r in ok if r.total is not None]),
        "errors": dict(Counter(r.outcome for r in run.results if r.outcome != "ok")),
        "degraded": sum(1 for r in ok if r.degraded),
        "skipped": dict(Counter(kind for r in ok for kind in r.skipped)),
    }
    if run.metrics:
        running = [m.running for m in run.metrics]
        waiting = [m.waiting for m in run.metrics]
        llm: dict[str, Any] = {
            "samples": len(run.metrics),
            "running_mean": round(sum(running) / len(running), 2),
            "running_max": max(running),
            "waiting_mean": round(sum(waiting) / len(waiting), 2),
            "waiting_max": max(waiting),
        }
        if llm_capacity:
            llm["utilisation"] = round(sum(running) / len(running) / llm_capacity, 3)
        figures["llm_server"] = llm
    return figures


def progress_line(run: Run) -> str:
    ok = sum(1 for r in run.results if r.outcome == "ok")
    errors = len(run.results) - ok
    totals = sorted(r.total for r in run.results if r.outcome == "ok" and r.total is not None)
    p50 = percentile(totals, 50) * 1000 if totals else 0.0
    llm = ""
    if run.metrics:
        last = run.metrics[-1]
        llm = f"  llm running {last.running:g} waiting {last.waiting:g}"
    return (
        f"{run.elapsed:6.1f} s  answered {ok}  errors {errors}  in flight {run.in_flight}  total p50 {p50:.0f} ms{llm}"
    )


def _polyline(
    points: list[tuple[float, float]], x0: float, y0: float, w: float, h: float, xmax: float, ymax: float
) -> str:
    if not points or xmax <= 0 or ymax <= 0:
        return ""
    coords = " ".join(f"{x0 + w * x / xmax:.1f},{y0 + h - h * y / ymax:.1f}" for x, y in points)
    return coords


def write_svg(run: Run, path: Path, *, title: str = "") -> None:
    """Answers completed per second, and each answer's total latency, over the run."""
    width, height, pad = 760, 360, 50
    plot_w, plot_h = width - 2 * pad, (height - 3 * pad) / 2
    horizon = max(run.elapsed, 1.0)
    ok = [r for r in run.results if r.outcome == "ok" and r.total is not None]
    per_second: Counter[int] = Counter(int(r.started + (r.total or 0.0)) for r in ok)
    rate = [(float(s) + 0.5, float(per_second.get(s, 0))) for s in range(int(horizon) + 1)]
    rate_max = max([y for _, y in rate] + [1.0])
    latency = sorted((r.started + (r.total or 0.0), (r.total or 0.0)) for r in ok)
    latency_max = max([y for _, y in latency] + [0.001])
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{pad}" y="20" font-size="14">{escape(title or "load test")}</text>',
    ]
    panels = (
        ("answers completed per second", rate, rate_max, pad + 10, "#1f77b4", True),
        (
            "total latency of each answer (s), by completion time",
            latency,
            latency_max,
            2 * pad + plot_h,
            "#d62728",
            False,
        ),
    )
    for label, points, ymax, top, colour, line in panels:
        parts.append(
            f'<rect x="{pad}" y="{top:.0f}" width="{plot_w}" height="{plot_h:.0f}" fill="none" stroke="#999"/>'
        )
        parts.append(f'<text x="{pad}" y="{top - 4:.0f}">{escape(label)} (max {ymax:.1f})</text>')
        if line:
            coords = _polyline(points, pad, top, plot_w, plot_h, horizon, ymax)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}"/>')
        else:
            for x, y in points:
                cx, cy = pad + plot_w * x / horizon, top + plot_h - plot_h * y / ymax
                parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="1.6" fill="{colour}"/>')
    parts.append(f'<text x="{pad + plot_w - 120}" y="{height - 8}">seconds into the run (0-{horizon:.0f})</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts), encoding="utf-8")
