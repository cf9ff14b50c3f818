"""The per-length curve a report draws, and the figure's content (its lines, titles and
shading), read back from the matplotlib figure the report saves."""

import numpy as np
import pytest

import crasplab.reports.length_gen as report
from crasplab.records.job_folder import BinEval, EvalRecord
from crasplab.reports.length_gen import length_curve


def seed_record(first_bin, second_bin):
    """A seed's final evaluation with these accuracies at each length of its two bins."""
    return EvalRecord(
        step=8,
        bins=(
            BinEval(1, 3, float(np.mean(first_bin)), 3, (1, 2, 3), tuple(first_bin)),
            BinEval(4, 5, float(np.mean(second_bin)), 2, (4, 5), tuple(second_bin)),
        ),
    )


def test_the_curve_is_the_mean_and_std_over_seeds_at_every_length_of_every_bin():
    curve = length_curve([seed_record([1, 1, 1], [1.0, 0.5]), seed_record([1, 1, 0.5], [0.0, 0.5])])
    assert curve["lengths"] == [1, 2, 3, 4, 5]
    assert curve["mean"] == [1.0, 1.0, 0.75, 0.5, 0.5]
    assert curve["std"] == [0.0, 0.0, 0.25, 0.5, 0.0]


def test_runs_evaluated_per_bin_only_have_no_curve():
    assert length_curve([EvalRecord.from_dict(dict(step=8, bins=[dict(lo=1, hi=3, accuracy=1.0, n=3)]))]) is None


def test_the_figure_draws_each_tasks_curve_with_the_predictions_line_style(monkeypatch):
    saved = {}
    monkeypatch.setattr(report, "save_figure", lambda figure, path, dpi: saved.update(figure=figure, path=path))
    rows = [
        dict(
            task=task,
            observed=observed,
            predicted=dict(generalizes=generalizes),
            curve=length_curve([seed_record([1, 1, 1], tail)]),
            bins=[dict(lo=1, hi=3, mean=1.0, std=0.0), dict(lo=4, hi=5, mean=float(np.mean(tail)), std=0.0)],
        )
        for task, observed, generalizes, tail in [
            ("UF", "generalizes", True, [1.0, 0.9]),
            ("NF", "does not generalize", False, [0.2, 0.0]),
        ]
    ]
    report.draw_figure(dict(rows=rows, pe="ape", preset="quick", threshold=0.9), "figure.png")
    axes = saved["figure"].axes
    assert [ax.get_title() for ax in axes[:2]] == ["UF: generalizes", "NF: does not generalize"]
    for ax, row, style in zip(axes, rows, ["-", "--"]):
        curve = ax.get_lines()[0]
        assert list(curve.get_xdata()) == [1, 2, 3, 4, 5]
        assert list(curve.get_ydata()) == pytest.approx(row["curve"]["mean"])
        assert curve.get_linestyle() == style
        assert ax.get_lines()[1].get_ydata()[0] == 0.9  # the threshold
        assert ax.patches[0].get_x() == 1 and ax.patches[0].get_width() == 2  # the training lengths, shaded
    assert "solid = predicted to generalize" in " ".join(saved["figure"].texts[0].get_text().split())


ENCODING_NAMES = {"ape": "APE", "nope": "NoPE"}  # as the lab spells them everywhere


@pytest.mark.parametrize("tasks", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("pe, preset", [("ape", "quick"), ("nope", "protocol")])
def test_the_figures_title_is_whole_inside_it_and_above_the_panels_with_any_number_of_tasks(
    tasks, pe, preset, monkeypatch
):
    """The title is longer than a row of one or two panels is wide: it must neither be cut off at
    the figure's edges nor run into the panels' own titles."""
    saved = {}
    monkeypatch.setattr(report, "save_figure", lambda figure, path, dpi: saved.update(figure=figure))
    rows = [
        dict(
            task=f"T{k}",
            observed="generalizes",
            predicted=dict(generalizes=True),
            curve=length_curve([seed_record([1, 1, 1], [1.0, 0.9])]),
            bins=[dict(lo=1, hi=3, mean=1.0, std=0.0), dict(lo=4, hi=5, mean=0.95, std=0.0)],
        )
        for k in range(tasks)
    ]
    report.draw_figure(dict(rows=rows, pe=pe, preset=preset, threshold=0.9), "figure.png")
    figure = saved["figure"]
    figure.tight_layout()  # what save_figure does before it saves
    renderer = figure.canvas.get_renderer()
    title = figure.texts[0]
    box, page = title.get_window_extent(renderer), figure.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
    assert all(box.y0 >= ax.title.get_window_extent(renderer).y1 for ax in figure.axes if ax.get_title())
    assert " ".join(title.get_text().split()).startswith(f"{ {'ape': 'APE', 'nope': 'NoPE'}[pe] } ({preset}): solid")
    assert title.get_text().endswith("dotted = threshold")
