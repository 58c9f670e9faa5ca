"""Line charts drawn on the server as inline SVG (the pages run no script: their Content-Security-Policy forbids
it, and nothing is imported at request time but this module): `line_chart` turns series of (x, y) points into a
`Chart`, plain numbers and labels that templates/chart.jinja draws as <svg> elements (autoescaped like every
value; colours come from the stylesheet's classes, so light and dark mode both read).

A chart is bounded whatever the data: at most MAX_POINTS points a series (evenly thinned, the first and last
kept), MAX_SERIES series and MAX_MARKS vertical marks; non-finite values are dropped. Each series' points are also
listed in a table under the chart (the `title` of each point too), so the numbers are readable without a mouse.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

WIDTH, HEIGHT = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 12, 36  # margins, px
MAX_POINTS = 500
MAX_SERIES = 8
MAX_MARKS = 100
TICKS = 5


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    px: float  # where it is drawn
    py: float
    label: str  # the point's title: its series, name, x and y as text
    name: str = ""  # what the point is (a policy version), when the series names its points


@dataclass(frozen=True)
class Series:
    name: str
    points: list[Point]
    css: str  # s0..s7: the stylesheet's colour of the series

    @property
    def path(self) -> str:
        """The polyline's points attribute."""
        return " ".join(f"{p.px:.1f},{p.py:.1f}" for p in self.points)


@dataclass(frozen=True)
class Mark:
    px: float
    label: str


@dataclass(frozen=True)
class Chart:
    title: str
    x_label: str
    y_label: str
    series: list[Series]
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    top: int = TOP
    plot_w: int = WIDTH - LEFT - RIGHT
    plot_h: int = HEIGHT - TOP - BOTTOM

    @property
    def empty(self) -> bool:
        return not any(s.points for s in self.series)


def number(v: float) -> str:
    """A tick or point value as short text: whole numbers plain, others to 3 significant digits."""
    if float(v).is_integer() and abs(v) < 1e9:
        return str(int(v))
    return f"{v:.3g}"


def _finite(points: Iterable[tuple]) -> list[tuple[float, float, str]]:
    """(x, y, name) of each point (x, y) or (x, y, name) whose x and y are finite numbers."""
    out = []
    for p in points:
        try:
            x, y = float(p[0]), float(p[1])
        except (TypeError, ValueError, IndexError):
            continue
        if math.isfinite(x) and math.isfinite(y):
            out.append((x, y, str(p[2])[:80] if len(p) > 2 and p[2] is not None else ""))
    return out


def thin(points: Sequence, n: int = MAX_POINTS) -> list:
    """At most `n` of `points`, evenly spaced, the first and last kept."""
    if len(points) <= n:
        return list(points)
    step = (len(points) - 1) / (n - 1)
    return [points[round(i * step)] for i in range(n)]


def _ticks(lo: float, hi: float, n: int = TICKS) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / (n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    out, v = [], first
    while v <= hi + step * 1e-9 and len(out) < 2 * n:
        out.append(round(v, 12))
        v += step
    return out


def line_chart(title: str, series: dict[str, Iterable[tuple]], *, x_label: str, y_label: str,
               marks: Iterable[tuple[float, str]] = (), y_range: tuple[float, float] | None = None) -> Chart:
    """A chart of `series` ({name: [(x, y) or (x, y, point name), ...]}, drawn in x order), with vertical `marks`
    [(x, label)] (an increment, a checkpoint) and, when given, a fixed y range (a rate: 0..1)."""
    kept = {str(name)[:80]: thin(sorted(_finite(pts))) for name, pts in list(series.items())[:MAX_SERIES]}
    marks = [(float(x), str(label)[:80]) for x, label in marks if _finite([(x, 0)])][:MAX_MARKS]
    xs = [p[0] for pts in kept.values() for p in pts] + [x for x, _ in marks]
    ys = [p[1] for pts in kept.values() for p in pts]
    if not xs or not ys:
        return Chart(title, x_label, y_label, [Series(n, [], f"s{i}") for i, n in enumerate(kept)])
    x0, x1 = min(xs), max(xs)
    y0, y1 = y_range or (min(ys), max(ys))
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        y0, y1 = y0 - (abs(y0) or 1) * 0.1, y1 + (abs(y1) or 1) * 0.1
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return TOP + (1 - (y - y0) / (y1 - y0)) * ph

    drawn = [Series(name, [Point(x, y, px(x), py(y), f"{name}{' ' + n if n else ''}: {x_label} {number(x)}, "
                                                     f"{y_label} {number(y)}", n)
                           for x, y, n in pts], f"s{i}") for i, (name, pts) in enumerate(kept.items())]
    return Chart(title, x_label, y_label, drawn,
                 x_ticks=[(px(v), number(v)) for v in _ticks(x0, x1)],
                 y_ticks=[(py(v), number(v)) for v in _ticks(y0, y1)],
                 marks=[Mark(px(x), label) for x, label in marks])
