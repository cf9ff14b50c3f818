"""The README's and the result pages' tables are what experiments/calibration/results_pages.py writes
from the kept runs: a rerun copied into evidence/ without rewriting the pages, or a number typed or
pasted by hand, fails here. Reads evidence/ only; trains nothing."""

import pytest

from crasplab.reports.results_pages import PageError, begin_marker, block_names, fill
from experiments.calibration import protocol_table, results_pages

ROOT = results_pages.ROOT
COMMAND = results_pages.COMMAND


def page_blocks() -> dict[str, list[str]]:
    return {page: block_names((ROOT / page).read_text(), page) for page in results_pages.PAGES}


@pytest.mark.parametrize("page", results_pages.PAGES)
def test_every_committed_page_is_what_the_command_writes(page):
    text = (ROOT / page).read_text()
    assert block_names(text, page), f"{page} has no generated block: leave it out of PAGES"
    assert fill(text, results_pages.render, COMMAND, page) == text, f"{page} differs from the kept runs: run {COMMAND}"


def test_every_table_is_on_exactly_one_page():
    """Each protocol run's own table, the headline, the paper beside the lab, the quick runs, the
    in-context gaps and the README's findings are each written once: none is left out, none kept twice."""
    names = [name for blocks in page_blocks().values() for name in blocks]
    expected = {f"run {run}" for run in protocol_table.RUNS} | {
        "findings",
        "headline",
        "paper beside the lab",
        "quick runs",
        "in-context gaps",
        "fine-tuning",
        "fine-tuning seeds",
        "mechanism claims",
        "lorem",
    }
    assert sorted(names) == sorted(expected)
    assert "findings" in page_blocks()["README.md"]


def test_a_changed_number_in_a_block_is_rewritten():
    """fill rewrites a block from the renderer, so a hand edit inside a block is stale; the prose
    around blocks is kept as written."""
    page = "docs/one-seed.md"
    text = (ROOT / page).read_text()
    committed = results_pages.render("quick runs")
    edited = text.replace(committed, committed.replace("APE 8 of 9", "APE 9 of 9"), 1)
    assert edited != text
    assert fill(edited, results_pages.render, COMMAND, page) == text
    prose = text.replace("Wall time: APE 13.9 min", "Wall time: APE 14.0 min", 1)
    assert fill(prose, results_pages.render, COMMAND, page) == prose


def test_fill_writes_markers_and_keeps_the_prose():
    text = f"before\n{begin_marker('a', 'old command')}\nstale\n<!-- END generated a -->\nafter\n"
    filled = fill(text, {"a": "new\ntable"}.__getitem__, "cmd", "page.md")
    assert filled == f"before\n{begin_marker('a', 'cmd')}\n\nnew\ntable\n\n<!-- END generated a -->\nafter\n"
    assert fill(filled, {"a": "new\ntable"}.__getitem__, "cmd", "page.md") == filled


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (f"{begin_marker('a', 'c')}\nbody\n", r"page.md:1: block 'a' has no <!-- END generated a -->"),
        ("x\n<!-- END generated a -->\n", r"page.md:2: .* closes no open block"),
        (f"{begin_marker('a', 'c')}\n<!-- END generated b -->\n", r"page.md:2: .*open: '<!-- END generated a -->'"),
        (f"{begin_marker('a', 'c')}\n{begin_marker('b', 'c')}\n", r"page.md:2: a block begins inside block 'a'"),
        (
            f"{begin_marker('nothing', 'c')}\n<!-- END generated nothing -->\n",
            r"page.md:1: no generated block is named",
        ),
    ],
)
def test_a_broken_page_is_refused_with_its_line(text, error):
    with pytest.raises(PageError, match=error):
        fill(text, {"a": "x", "b": "y"}.__getitem__, "c", "page.md")


def test_an_unknown_run_block_is_refused():
    with pytest.raises(KeyError, match="not a protocol run"):
        results_pages.render("run protocol-that-never-ran")


def test_the_findings_split_the_count_by_the_kind_of_prediction():
    """Per encoding, the agreeing and counted verdicts of the two kinds sum to the headline's count,
    and each "does not generalize" bin counted is named in the README's row."""
    cells = protocol_table.headline_cells(protocol_table.committed_runs(protocol_table.CURRENT_RUNS))
    tallies = protocol_table.tally(cells)
    findings = results_pages.findings()
    counted_line = protocol_table.count_lines(cells)[0]
    for pe, name in protocol_table.ENCODINGS.items():
        counts = tallies[pe]
        (yes_agree, yes), (no_agree, no) = counts.count(True), counts.count(False)
        assert counts.count() == (yes_agree + no_agree, yes + no)
        assert f"{name} {yes_agree + no_agree} of {yes + no}" in counted_line
        row = next(line for line in findings.splitlines() if line.startswith(f"| {name} |"))
        assert f"**{yes_agree + no_agree} of {yes + no}** | {yes_agree} of {yes} |" in row
        assert all(where in row for where in counts.counted[False])


def test_tally_counts_a_bin_under_its_prediction_and_leaves_out_what_cannot_test_it():
    """A counted bin goes to its row's kind of prediction; a "does not generalize" bin that a
    bounded program passes is left out with that reason; "mixed" (agrees None) counts neither way."""

    def row(generalizes, bins):
        return {"generalizes": generalizes, "bins": bins}

    def b(lo, verdict, agrees, discriminates=True):
        return {"lo": lo, "hi": lo + 9, "verdict": verdict, "agrees": agrees, "discriminates": discriminates}

    cells = {
        "ape": {
            ("UF", 2, "paper's", 40): row(True, [b(21, "generalizes", True), b(31, "mixed", None)]),
            ("NF", 2, "paper's", 40): row(False, [b(21, "fails", None, discriminates=False)]),
            ("NF", 2, "repeat-break", 40): row(False, [b(21, "generalizes", False)]),
        }
    }
    counts = protocol_table.tally(cells)["ape"]
    assert counts.count(True) == (1, 1)
    assert counts.count(False) == (0, 1)
    assert counts.counted[False] == ["NF 21-30 (repeat-break)"]
    assert dict(counts.left_out) == {"a bounded program passes": ["NF 21-30"]}
    assert protocol_table.tally(cells)["rope"].count() == (0, 0)
