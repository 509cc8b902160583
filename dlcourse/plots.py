"""Plots and widgets shared by the lectures.

Figures are built as standalone ``matplotlib.figure.Figure`` objects (no pyplot state, so nothing is
drawn twice) and shown as PNG images with :func:`show`, which looks the same in JupyterLab, Colab, a
headless test run and a notebook viewer on the web, whatever matplotlib backend is active.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable, Mapping, Sequence

from matplotlib.figure import Figure


def plot_losses(
    curves: Mapping[str, Sequence[float]], log: bool = True, title: str = "training loss", ax=None
):
    """Draw one line per named loss curve (log scale by default) and return the figure."""
    if ax is None:
        fig = Figure(figsize=(6, 3.5))
        ax = fig.subplots()
    else:
        fig = ax.figure
    for name, values in curves.items():
        ax.plot(range(len(values)), values, label=name)
    if log and any(v > 0 for values in curves.values() for v in values):
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    if len(curves) > 1:
        ax.legend()
    fig.tight_layout()
    return fig


def show(fig) -> None:
    """Display a figure as a PNG image (in a notebook), whatever matplotlib backend is active."""
    from IPython.display import Image, display

    display(Image(figure_png(fig)))


def figure_png(fig) -> bytes:
    """The figure as PNG bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return buffer.getvalue()


class LiveLossPlot:
    """A loss curve that redraws in place while a model trains.

    ``plot.update(loss)`` after each step; the figure refreshes every ``every`` steps through an
    IPython display handle, which works in JupyterLab, classic Notebook and Colab alike. Outside
    IPython it just records the values. Call ``plot.close()`` at the end for the final picture.
    """

    def __init__(self, title: str = "training loss", every: int = 10, log: bool = True):
        self.title, self.every, self.log = title, every, log
        self.curves: dict[str, list[float]] = {}
        self._handle = None

    def update(self, loss: float, name: str = "train") -> None:
        self.curves.setdefault(name, []).append(float(loss))
        if len(self.curves[name]) % self.every == 0:
            self._draw()

    def _draw(self) -> None:
        try:
            from IPython import get_ipython
            from IPython.display import Image, display
        except ImportError:
            return
        if get_ipython() is None:
            return
        image = Image(figure_png(plot_losses(self.curves, log=self.log, title=self.title)))
        if self._handle is None:
            self._handle = display(image, display_id=True)
        else:
            self._handle.update(image)

    def close(self) -> None:
        self._draw()


def interactive_plot(draw: Callable[..., object], **controls) -> None:
    """Show ipywidgets ``controls`` that call ``draw(**values)`` and redraw its figure when moved.

    ``draw`` returns a matplotlib figure (a ``matplotlib.figure.Figure``, e.g. from :func:`plot_losses`).
    The display carries two representations: the live widget
    and a PNG of the figure for the current values. A frontend with a widget manager (JupyterLab,
    Notebook 7, Colab) shows the widget; one without (a headless run, a notebook viewer on the web)
    shows the static picture instead of a blank box. Without ipywidgets it shows the picture alone.
    """
    from IPython.display import Image, display

    defaults = {name: _initial_value(control) for name, control in controls.items()}
    png = figure_png(draw(**defaults))
    try:
        import ipywidgets as widgets
    except ImportError:
        display(Image(png))
        return

    output = widgets.Output()
    with output:
        display(Image(png))

    def redraw(_change=None):
        values = {name: control.value for name, control in controls.items()}
        png = figure_png(draw(**values))
        output.clear_output(wait=True)
        with output:
            display(Image(png))

    for control in controls.values():
        control.observe(redraw, names="value")
    box = widgets.VBox([*controls.values(), output])
    bundle = box._repr_mimebundle_() or {}
    bundle["image/png"] = base64.b64encode(png).decode("ascii")
    display(bundle, raw=True)


def _initial_value(control):
    return getattr(control, "value", control)


def log_spaced(low: float, high: float, count: int) -> list[float]:
    """``count`` values evenly spaced on a log scale between ``low`` and ``high``, for slider options."""
    step = (math.log10(high) - math.log10(low)) / max(1, count - 1)
    return [10 ** (math.log10(low) + i * step) for i in range(count)]
