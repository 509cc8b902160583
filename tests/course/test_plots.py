"""Plots: a live loss plot that records and redraws; widgets that fall back to a static picture."""

from __future__ import annotations

import base64

import ipywidgets as widgets
import pytest

from dlcourse import plots


def test_plot_losses_draws_one_line_per_curve():
    fig = plots.plot_losses({"sgd": [3, 2, 1], "adam": [3, 1, 0.5]})
    ax = fig.axes[0]
    assert len(ax.lines) == 2 and ax.get_yscale() == "log"
    assert plots.figure_png(fig).startswith(b"\x89PNG")


def test_live_plot_records_outside_ipython():
    live = plots.LiveLossPlot(every=2)
    for loss in (4.0, 3.0, 2.0):
        live.update(loss)
    live.close()
    assert live.curves == {"train": [4.0, 3.0, 2.0]}


@pytest.fixture
def shown(monkeypatch):
    captured = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: captured.append((obj, kw)))
    return captured


def test_interactive_plot_carries_widget_and_png_and_redraws(shown):
    calls = []

    def draw(lr):
        calls.append(lr)
        return plots.plot_losses({"loss": [1.0, lr]})

    slider = widgets.FloatSlider(value=0.5, min=0.1, max=1.0)
    plots.interactive_plot(draw, lr=slider)
    bundle, options = shown[-1]
    assert options == {"raw": True}
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert base64.b64decode(bundle["image/png"]).startswith(b"\x89PNG")
    slider.value = 0.9
    assert calls == [0.5, 0.9]


def test_log_spaced():
    values = plots.log_spaced(1e-4, 1e-1, 4)
    assert values == pytest.approx([1e-4, 1e-3, 1e-2, 1e-1])
