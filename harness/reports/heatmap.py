"""Localisation figures for the HTML report: small PNGs drawn with matplotlib's Agg canvas.

One figure per failing compared buffer, three panels:

1. the 2-D map (``metrics.compare.<name>.map``): bad-element ratio per cell of
   its two axes (batch row x head for attention outputs, row x KV head for a
   cache), cells of ``block`` consecutive indices, 0 % pale yellow to 100 %
   black, grey where nothing was compared (the index ranges and block sizes
   are in the HTML caption);
2. the page strip: bad ratio per cache page (``localisation.page``, caches
   only); more than ``MAX_PAGES`` pages are shown as the worst page of each
   run of pages;
3. a histogram of the map's cells by bad ratio: one tall bar near 0 and a few
   at 100 % is "one head is garbage", a hump in the middle is noise spread
   everywhere.  The metrics keep no per-element errors (only counts, the
   maximum and the five worst elements), so no error-magnitude histogram is
   drawn.

Text: none in the PNG.  ``labels_for`` gives the titles, axis names and tick
labels in CSS pixels and the HTML report lays them over the image as SVG text
(12-13 px at 100% zoom; the image is shown at its own pixel size).

Performance: one ``Figure`` (no pyplot, so no global state and no GUI
backend) is built once per ``FigureRenderer`` and reused: each image only
swaps the data of existing artists, then the canvas is printed to PNG.  The
same data gives the same bytes, and identical panels are rendered once.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["MAX_PAGES", "Drawn", "FigureRenderer", "Label", "Panels", "labels_for", "panels_for"]

MAX_PAGES = 256
HIST_BINS = 20
PNG_LEVEL = 6                 # zlib level of the PNGs


@dataclass(frozen=True)
class Panels:
    """What one figure shows, taken from one buffer's compare metrics."""

    title: str
    ratio: np.ndarray | None          # the 2-D map (NaN: nothing compared)
    axes: tuple[str, str]
    size: tuple[int, int]             # full axis lengths (the map's extent in indices)
    pages: np.ndarray | None          # bad ratio per page (or per run of pages)
    pages_per_bar: int

    def key(self) -> str:
        h = hashlib.sha1(self.title.encode())
        h.update(json.dumps([self.axes, self.size, self.pages_per_bar]).encode())
        for a in (self.ratio, self.pages):
            h.update(b"-" if a is None else a.tobytes() + str(a.shape).encode())
        return h.hexdigest()


def _floats(values: Any) -> np.ndarray:
    """JSON numbers (null, "Infinity" included) as a float array; NaN for anything else."""
    def one(v):
        if isinstance(v, bool) or v is None:
            return math.nan
        if isinstance(v, (int, float)):
            return float(v)
        try:
            return float(v)
        except (TypeError, ValueError):
            return math.nan
    return np.array([one(v) for v in values], dtype=np.float64)


def _pages(values: Sequence[Any]) -> tuple[np.ndarray, int]:
    ratios = _floats(values)
    if len(ratios) <= MAX_PAGES:
        return ratios, 1
    per = math.ceil(len(ratios) / MAX_PAGES)
    padded = np.full(per * math.ceil(len(ratios) / per), np.nan)
    padded[:len(ratios)] = ratios
    blocks = padded.reshape(-1, per)
    with np.errstate(all="ignore"):
        worst = np.where(np.isnan(blocks).all(1), np.nan, np.nanmax(np.nan_to_num(blocks, nan=-1.0), 1))
    return worst, per


def panels_for(name: str, metrics: Mapping[str, Any]) -> Panels | None:
    """The panels of one ``compare.<name>`` metrics entry, or None when it has nothing to draw."""
    m = metrics.get("map")
    ratio = axes = size = None
    if isinstance(m, Mapping) and isinstance(m.get("ratio"), list) and m["ratio"] and m["ratio"][0]:
        rows = [_floats(r) for r in m["ratio"]]
        if len({len(r) for r in rows}) == 1:
            ratio = np.vstack(rows)
            axes = tuple(str(a) for a in (m.get("axes") or ["rows", "columns"])[:2])
            size = tuple(int(s) for s in (m.get("size") or ratio.shape)[:2])
    pages, per = None, 1
    loc = metrics.get("localisation")
    if isinstance(loc, Mapping) and isinstance(loc.get("page"), list) and loc["page"]:
        pages, per = _pages(loc["page"])
    if ratio is None and pages is None:
        return None
    return Panels(str(name), ratio, axes or ("", ""), size or (0, 0), pages, per)


# The layout in CSS pixels (the PNG is drawn at 72 dpi: one image pixel per CSS pixel, shown
# unscaled).  Every text is SVG text laid over the image (``Drawn.labels``), 12-13 px, so it is
# legible at 100% zoom and sharp at any other; the PNG holds only frames, ticks and data.
WIDTH, HEIGHT = 760, 250
TOP, BOTTOM = 34, 200                       # plot area of every panel, from the top
_MAP = (44, 270)                            # x from, x to
_CBAR = (276, 284)
_PAGES = (370, 540)
_HIST = (612, 744)
TITLE_PX, TEXT_PX = 13, 12                  # font sizes (CSS px) the HTML gives the labels
# What the PNG keeps of the canvas (x, y, width, height): the panels with their frames and
# tick marks; the margins hold only text, so leaving them out saves a third of the encoding.
IMAGE_BOX = (_MAP[0] - 2, TOP - 2, _HIST[1] + 2 - (_MAP[0] - 2), BOTTOM + 6 - (TOP - 2))
_TICKS = ((0.0, "0%"), (0.5, "50%"), (1.0, "100%"))


@dataclass(frozen=True)
class Label:
    """One text of a figure, in the figure's CSS pixels; ``anchor`` as SVG ``text-anchor``."""

    text: str
    x: float
    y: float
    role: str                       # "title" | "axis" | "tick"
    anchor: str = "middle"
    vertical: bool = False          # read bottom to top (a y-axis label)


@dataclass(frozen=True)
class Drawn:
    """A figure, ``width`` x ``height`` px: the PNG (no text in it) placed at ``image_box``
    (x, y, width, height) and the labels to lay over it."""

    png: bytes
    width: int
    height: int
    labels: tuple[Label, ...]
    image_box: tuple[int, int, int, int] = IMAGE_BOX


def _rect(x: tuple[int, int]) -> tuple[float, float, float, float]:
    """Figure-fraction axes rectangle of a panel spanning ``x`` (pixels) over the plot rows."""
    return (x[0] / WIDTH, 1 - BOTTOM / HEIGHT, (x[1] - x[0]) / WIDTH, (BOTTOM - TOP) / HEIGHT)


def _y(frac: float) -> float:
    return BOTTOM - frac * (BOTTOM - TOP)


def labels_for(p: Panels) -> tuple[Label, ...]:
    """The titles, axis names and tick labels of ``p``'s visible panels."""
    mid_y = (TOP + BOTTOM) / 2
    out: list[Label] = []
    if p.ratio is not None:
        out.append(Label(f"{p.title}: bad ratio per cell", _MAP[0], TOP - 12, "title", "start"))
        out.append(Label(p.axes[1], sum(_MAP) / 2, BOTTOM + 18, "axis"))
        out.append(Label(p.axes[0], _MAP[0] - 14, mid_y, "axis", vertical=True))
        out += [Label(text, _CBAR[1] + 4, _y(f), "tick", "start") for f, text in _TICKS]
        out.append(Label("map cells by bad ratio", sum(_HIST) / 2, TOP - 12, "title"))
        out += [Label(text, _HIST[0] - 4, _y(f), "tick", "end") for f, text in _TICKS]
        out += [Label(text, _HIST[0] + f * (_HIST[1] - _HIST[0]), BOTTOM + 14, "tick") for f, text in _TICKS]
        out.append(Label("bad ratio", sum(_HIST) / 2, BOTTOM + 34, "axis"))
        out.append(Label("share of cells", _HIST[0] - 44, mid_y, "axis", vertical=True))
    if p.pages is not None:
        out.append(Label("bad ratio per page", sum(_PAGES) / 2, TOP - 12, "title"))
        out += [Label(text, _PAGES[0] - 4, _y(f), "tick", "end") for f, text in _TICKS]
        out.append(Label("page", sum(_PAGES) / 2, BOTTOM + 18, "axis"))
    return tuple(out)


class FigureRenderer:
    """Draws ``Panels`` to PNG bytes, reusing one figure (not thread-safe).

    Everything that does not depend on the data (frames, tick marks, the
    colour bar) is drawn once per panel combination and kept as a pixel
    background; each image restores it and draws only the data artists
    (matplotlib's blitting), then encodes the pixels as PNG.  Axes are in
    unit coordinates, so nothing drawn depends on the data but the data; the
    texts are ``labels_for``'s, laid over the image by the HTML report.
    """

    def __init__(self):
        from PIL import Image                    # matplotlib's own PNG writer uses it too
        self._image_cls = Image
        self.dpi = 72
        self.fig = Figure(figsize=(WIDTH / self.dpi, HEIGHT / self.dpi), dpi=self.dpi, facecolor="white")
        self.canvas = FigureCanvasAgg(self.fig)
        self.cache: dict[str, bytes] = {}
        self.rendered = 0
        self._backgrounds: dict[tuple, Any] = {}
        cmap = colormaps["magma_r"].with_extremes(bad="#c8c8c8")
        fig = self.fig
        self.ax_map = fig.add_axes(_rect(_MAP))
        self.image = self.ax_map.imshow(np.zeros((1, 1)), cmap=cmap, vmin=0.0, vmax=1.0,
                                        aspect="auto", interpolation="nearest",
                                        extent=(0, 1, 1, 0), animated=True)
        self.ax_cbar = fig.add_axes(_rect(_CBAR))
        fig.colorbar(self.image, cax=self.ax_cbar, ticks=[0, 0.5, 1])
        self.ax_pages = fig.add_axes(_rect(_PAGES))
        self.page_bars = self.ax_pages.stairs([0.0], [0.0, 1.0], fill=True, color="#b03a2e",
                                              animated=True)
        self.ax_hist = fig.add_axes(_rect(_HIST))
        self.hist_bars = self.ax_hist.stairs(np.zeros(HIST_BINS), np.linspace(0, 1, HIST_BINS + 1),
                                             fill=True, color="#555555", animated=True)
        for ax in (self.ax_map, self.ax_pages, self.ax_hist):
            ax.set_xlim(0, 1)
        self.ax_map.set_ylim(1, 0)
        self.ax_map.set_xticks([])
        self.ax_map.set_yticks([])
        self.ax_pages.set_ylim(0, 1.02)
        self.ax_pages.set_xticks([])
        self.ax_pages.set_yticks([0, 0.5, 1])
        self.ax_hist.set_ylim(0, 1.02)
        self.ax_hist.set_xticks([0, 0.5, 1])
        self.ax_hist.set_yticks([0, 0.5, 1])
        for ax in (self.ax_cbar, self.ax_pages, self.ax_hist):
            ax.tick_params(labelleft=False, labelright=False, labelbottom=False, length=3)
        self._dynamic_map = (self.image, self.hist_bars)
        self._dynamic_pages = (self.page_bars,)

    def render(self, panels: Panels) -> bytes:
        """The PNG of ``panels`` (the same data gives the same bytes, drawn once)."""
        key = panels.key()
        png = self.cache.get(key)
        if png is None:
            png = self.cache[key] = self._draw(panels)
        return png

    def draw(self, panels: Panels) -> Drawn:
        """The PNG and the labels to lay over it."""
        return Drawn(self.render(panels), WIDTH, HEIGHT, labels_for(panels))

    def _background(self, p: Panels):
        key = (p.ratio is not None, p.pages is not None)
        bg = self._backgrounds.get(key)
        if bg is None:
            for ax in (self.ax_map, self.ax_cbar, self.ax_hist):
                ax.set_visible(key[0])
            self.ax_pages.set_visible(key[1])
            self.canvas.draw()                  # animated artists (the data) are left out
            bg = self._backgrounds[key] = self.canvas.copy_from_bbox(self.fig.bbox)
        return bg

    def _draw(self, p: Panels) -> bytes:
        has_map, has_pages = p.ratio is not None, p.pages is not None
        self.canvas.restore_region(self._background(p))
        dynamic: list = []
        if has_map:
            self.image.set_data(np.ma.masked_invalid(p.ratio))
            finite = p.ratio[np.isfinite(p.ratio)]
            counts, _ = np.histogram(np.clip(finite, 0, 1), bins=HIST_BINS, range=(0.0, 1.0))
            self.hist_bars.set_data(counts / max(1, finite.size))
            dynamic += self._dynamic_map
        if has_pages:
            n = len(p.pages)
            self.page_bars.set_data(np.nan_to_num(p.pages, nan=0.0), np.linspace(0.0, 1.0, n + 1))
            dynamic += self._dynamic_pages
        for artist in dynamic:
            self.fig.draw_artist(artist)
        x, y, w, h = IMAGE_BOX
        rgb = np.asarray(self.canvas.buffer_rgba())[y:y + h, x:x + w, :3]
        buf = io.BytesIO()
        self._image_cls.fromarray(np.ascontiguousarray(rgb)).save(buf, format="PNG", compress_level=PNG_LEVEL)
        self.rendered += 1
        return buf.getvalue()
