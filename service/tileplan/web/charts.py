"""The browser view's charts: geometry of horizontal bar charts, drawn as inline SVG by `templates/charts.html`.

Server-side and script-free (the pages' CSP forbids scripts): each chart is a list of shapes with a <title> per
bar, which browsers show as a tooltip. Four kinds, all horizontal bars with a label column on the left:
- `cycles_per_layer`: each layer's cycles, the plan's bar over the baseline's (a request or a model);
- `speedup_per_layer`: baseline cycles / plan cycles per layer, on a log scale around 1x;
- `cycle_breakdown`: where a plan's cycles go, compute / DMA beyond compute / stalls, stacked;
- `buffer_fill`: how full each on-chip level is, per tensor, as a share of its capacity.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

WIDTH = 720
LABEL_W = 170  # the label column
RIGHT_PAD = 70  # room for the value printed after a bar
ROW_H = 22
TOP = 8
AXIS_H = 26


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    w: float
    h: float
    cls: str
    tip: str = ""
    href: str = ""


@dataclass(frozen=True)
class Text:
    x: float
    y: float
    text: str
    anchor: str = "start"  # start | middle | end
    cls: str = ""
    href: str = ""


@dataclass(frozen=True)
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    cls: str = "grid"


@dataclass
class Chart:
    """What `templates/charts.html` draws: an <svg> of `width` x `height` with a title and a description (for
    screen readers), shapes, and a legend of (css class, label)."""

    kind: str
    title: str
    desc: str
    width: float = WIDTH
    height: float = 0.0
    rects: list[Rect] = field(default_factory=list)
    texts: list[Text] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)


def nice_ticks(hi: float, count: int = 5) -> list[float]:
    """0 and round steps (1, 2 or 5 x 10^k) up to at least `hi`."""
    if hi <= 0:
        return [0.0, 1.0]
    raw = hi / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    n = math.ceil(hi / step - 1e-9)
    return [i * step for i in range(n + 1)]


def short(x: float) -> str:
    """1234567 -> 1.23M, 2048 -> 2.05k, 0.5 -> 0.5."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def _label(text: str, width: int = 24) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def _axis(chart: Chart, ticks: list[float], scale: float, y: float, fmt: Callable[[float], str] = short) -> None:
    for t in ticks:
        x = LABEL_W + t * scale
        chart.lines.append(Line(x, TOP, x, y))
        chart.texts.append(Text(x, y + 16, fmt(t), "middle", "tick"))


def cycles_per_layer(rows: list[tuple[str, float, float | None, str]], plan_mapper: str,
                     baseline_mapper: str | None) -> Chart:
    """rows: (layer name, plan cycles, baseline cycles or None, link). Each layer: the plan's bar above the
    baseline's, on one linear scale (cycles of one occurrence of the layer)."""
    chart = Chart("cycles", "Cycles per layer",
                  f"Cycles of each layer: {plan_mapper}'s plan" + (f" and the {baseline_mapper} baseline" if
                                                                    baseline_mapper else ""))
    hi = max([c for _, c, _, _ in rows] + [b for _, _, b, _ in rows if b is not None] + [1.0])
    ticks = nice_ticks(hi)
    scale = (WIDTH - LABEL_W - RIGHT_PAD) / ticks[-1]
    bar = (ROW_H - 6) / (2 if baseline_mapper else 1)
    y = TOP
    for name, cycles, base, href in rows:
        chart.texts.append(Text(LABEL_W - 8, y + ROW_H / 2 + 4, _label(name), "end", "label", href))
        chart.rects.append(Rect(LABEL_W, y + 3, max(cycles * scale, 1), bar, "plan",
                                f"{name}: {cycles:,.0f} cycles ({plan_mapper})", href))
        chart.texts.append(Text(LABEL_W + cycles * scale + 4, y + 3 + bar - 3, short(cycles), "start", "value"))
        if baseline_mapper and base is not None:
            chart.rects.append(Rect(LABEL_W, y + 3 + bar, max(base * scale, 1), bar, "base",
                                    f"{name}: {base:,.0f} cycles ({baseline_mapper})", href))
        y += ROW_H
    _axis(chart, ticks, scale, y)
    chart.height = y + AXIS_H
    chart.legend = [("plan", f"plan ({plan_mapper})")] + ([("base", f"baseline ({baseline_mapper})")]
                                                          if baseline_mapper else [])
    return chart


def speedup_per_layer(rows: list[tuple[str, float, str]], baseline_mapper: str) -> Chart:
    """rows: (layer name, speed-up, link). Bars from 1x, right when the plan is faster, left when slower, on a
    log2 scale so 2x and 0.5x are as long."""
    chart = Chart("speedup", f"Speed-up over {baseline_mapper} per layer",
                  f"{baseline_mapper} cycles divided by the plan's cycles, per layer; right of 1x the plan is faster")
    logs = [math.log2(s) for _, s, _ in rows if s > 0]
    lo, hi = min(logs + [-1.0]), max(logs + [1.0])
    lo, hi = math.floor(lo), math.ceil(hi)
    span = WIDTH - LABEL_W - RIGHT_PAD
    scale = span / (hi - lo)
    zero = LABEL_W - lo * scale
    y = TOP
    for name, s, href in rows:
        chart.texts.append(Text(LABEL_W - 8, y + ROW_H / 2 + 4, _label(name), "end", "label", href))
        v = math.log2(s) if s > 0 else lo
        x0, x1 = sorted((zero, zero + v * scale))
        cls = "good" if s > 1.0005 else "bad" if s < 0.9995 else "even"
        chart.rects.append(Rect(x0, y + 4, max(x1 - x0, 1), ROW_H - 8, cls, f"{name}: {s:.2f}x", href))
        chart.texts.append(Text(max(x1, zero) + 4, y + ROW_H / 2 + 4, f"{s:.2f}\u00d7", "start", "value"))
        y += ROW_H
    for k in range(lo, hi + 1):
        x = zero + k * scale
        chart.lines.append(Line(x, TOP, x, y, "axis" if k == 0 else "grid"))
        chart.texts.append(Text(x, y + 16, f"{2.0 ** k:g}\u00d7", "middle", "tick"))
    chart.height = y + AXIS_H
    chart.legend = [("good", "faster than the baseline"), ("bad", "slower")]
    return chart


BREAKDOWN = (("compute", "compute"), ("dma", "DMA beyond compute"), ("stall", "stalls"))


def cycle_breakdown(items: list[tuple[str, dict[str, float]]]) -> Chart:
    """items: (label, {"compute", "dma", "stall"} cycles). One stacked bar per item, on one scale."""
    chart = Chart("breakdown", "Where the cycles go",
                  "Each plan's cycles split into compute, data movement not hidden behind compute, and stalls")
    hi = max([sum(parts.values()) for _, parts in items] + [1.0])
    ticks = nice_ticks(hi)
    scale = (WIDTH - LABEL_W - RIGHT_PAD) / ticks[-1]
    y = TOP
    for label, parts in items:
        chart.texts.append(Text(LABEL_W - 8, y + ROW_H / 2 + 4, _label(label), "end", "label"))
        x = float(LABEL_W)
        total = sum(parts.values())
        for key, name in BREAKDOWN:
            v = parts.get(key, 0.0)
            if v <= 0:
                continue
            share = v / total if total else 0.0
            chart.rects.append(Rect(x, y + 3, max(v * scale, 1), ROW_H - 6, key,
                                    f"{label}: {name} {v:,.0f} cycles ({share:.0%})"))
            x += v * scale
        chart.texts.append(Text(x + 4, y + ROW_H / 2 + 4, short(total), "start", "value"))
        y += ROW_H
    _axis(chart, ticks, scale, y)
    chart.height = y + AXIS_H
    chart.legend = [(key, name) for key, name in BREAKDOWN]
    return chart


TENSOR_LABELS = {"W": "weights", "I": "inputs", "O": "outputs"}


def buffer_fill(levels: list[tuple[str, float, dict[str, float]]]) -> Chart:
    """levels: (label, capacity in bytes, {tensor: bytes held}). One stacked bar per level, as a share of its
    capacity (0-100%)."""
    chart = Chart("fill", "Buffer fill per level",
                  "Bytes each on-chip level holds, per tensor (double-buffered tiles count twice), as a share of its "
                  "capacity")
    scale = (WIDTH - LABEL_W - RIGHT_PAD) / 1.0
    y = TOP
    for label, capacity, held in levels:
        chart.texts.append(Text(LABEL_W - 8, y + ROW_H / 2 + 4, _label(label), "end", "label"))
        x = float(LABEL_W)
        for t in ("W", "I", "O"):
            b = held.get(t, 0.0)
            if b <= 0 or capacity <= 0:
                continue
            share = b / capacity
            chart.rects.append(Rect(x, y + 3, max(min(share, 1.0) * scale, 1), ROW_H - 6, f"t{t}",
                                    f"{label}: {TENSOR_LABELS[t]} {b:,.0f} B of {capacity:,.0f} B ({share:.1%})"))
            x += min(share, 1.0) * scale
        total = sum(held.values()) / capacity if capacity else 0.0
        chart.texts.append(Text(x + 4, y + ROW_H / 2 + 4, f"{total:.0%}", "start", "value"))
        y += ROW_H
    _axis(chart, [0.0, 0.25, 0.5, 0.75, 1.0], scale, y, lambda t: f"{t:.0%}")
    chart.height = y + AXIS_H
    chart.legend = [(f"t{t}", TENSOR_LABELS[t]) for t in ("W", "I", "O")]
    return chart
