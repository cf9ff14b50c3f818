"""Write every table of the README and of the result pages in docs/ from the kept runs in
evidence/, so that no number in them is typed or pasted by hand.

    python experiments/calibration/results_pages.py            # rewrite the generated blocks of PAGES
    python experiments/calibration/results_pages.py --check    # list the pages whose blocks are stale

Each page keeps its prose; only the blocks between `<!-- BEGIN generated NAME ... -->` and
`<!-- END generated NAME -->` are written (crasplab.reports.results_pages). The blocks:

    findings                 the README's one table: per encoding, the counted verdicts that agree with
                             the prediction, by kind of prediction, over the current recipe's runs
    headline                 the current recipe's runs side by side (protocol_table.headline)
    paper beside the lab     the paper's figure numbers beside the lab's (protocol_table.paper_table)
    run FOLDER               one protocol run's own table (protocol_table.table), FOLDER in protocol_table.RUNS
    quick runs               the three quick runs of the default command (readme_table)
    in-context gaps          the pretrained models' pooled gaps beside the paper's pattern
                             (crasplab.reports.in_context.families_markdown)
    fine-tuning              the quick fine-tuning run, before and after (crasplab.reports.finetune.markdown_table)
    fine-tuning seeds        the power preset's runs, one per seed (crasplab.reports.finetune.seeds_table)
    mechanism claims         each kept pretrained mechanism run's reading of the paper's claims
                             (crasplab.reports.mechanism.claims_markdown)
    lorem                    the lorem runs of each model, directions pooled (crasplab.reports.realistic)

tests/test_results_pages.py fails when a committed page differs from what this writes.
"""

from __future__ import annotations

import argparse
import sys
from functools import cache
from pathlib import Path

from crasp.position_encodings import encoding
from crasplab.records.files import write_text
from crasplab.reports import finetune, in_context, mechanism, realistic
from crasplab.reports.results_pages import fill, stale_pages

ROOT = Path(__file__).resolve().parents[2]
# Run as a script from anywhere, it imports its sibling scripts by the names the tests use.
sys.path.insert(0, str(ROOT))
from experiments.calibration import protocol_table, readme_table  # noqa: E402

COMMAND = "python experiments/calibration/results_pages.py"
# Every page with generated blocks, relative to the repository root.
PAGES = (
    "README.md",
    "docs/results.md",
    "docs/protocol-runs.md",
    "docs/paper-scale.md",
    "docs/protocol-history.md",
    "docs/one-seed.md",
    "docs/pretrained.md",
    "docs/finetuning.md",
    "docs/mechanism.md",
    "docs/realistic.md",
)
IN_CONTEXT_RUNS = ("smollm2", "gemma3-270m")  # evidence/pretrained/<model>, in the table's column order
FINETUNE_RUN = ROOT / "evidence" / "finetune" / "quick-run"
MECHANISM_RUNS = ("smollm2", "smollm2-matched", "smollm2-retrieval-short", "gemma3-270m")  # evidence/mechanism/
LOREM_RUNS = ("lorem-smollm2", "lorem-gemma3-270m")  # evidence/realistic/
FINETUNE_SEED_RUNS = tuple(ROOT / "evidence" / "finetune" / f"smollm2-power-seed{seed}" for seed in range(3))
# The README's findings link each encoding to its section of the per-run tables (docs/protocol-runs.md).
RUNS_PAGE = "docs/protocol-runs.md"


@cache
def _current() -> dict:
    return protocol_table.committed_runs(protocol_table.CURRENT_RUNS)


def findings() -> str:
    """Per encoding: what its prediction rests on, the counted verdicts that agree, split by the
    prediction's kind (the "does not generalize" ones named), and where its runs' tables are; then
    the scale. Over the current recipe's runs, as the headline counts them."""
    current = _current()
    tallies = protocol_table.tally(protocol_table.headline_cells(current))
    lines = [
        '| encoding | prediction from | counted verdicts that agree | on "generalizes" | on "does not generalize" '
        "| kept runs |",
        "|---|---|---|---|---|---|",
    ]
    for pe, name in protocol_table.ENCODINGS.items():
        counted, position = tallies[pe], encoding(pe)
        theorem = position.prediction_theorem
        source = f"{theorem.fragment} ({theorem.source})" if position.theorem else position.caveat()
        agree, judged = counted.count()
        no_agree, no_judged = counted.count(False)
        named = f": {', '.join(counted.counted[False])}" if no_judged else ""
        no = f"{no_agree} of {no_judged}{named}" if no_judged else "none counted"
        runs = sum(summary["pe"] == pe for summary, _ in current.values())
        lines.append(
            f"| {name} | {source} | **{agree} of {judged}** | {'{} of {}'.format(*counted.count(True))} | {no} "
            f"| [{runs} runs]({RUNS_PAGE}#{name.lower()}) |"
        )
    return "\n".join(lines) + "\n\n" + protocol_table.scale_line(current)


def run_table(folder: str) -> str:
    if folder not in protocol_table.RUNS:
        raise KeyError(f"evidence/{folder} is not a protocol run of protocol_table.RUNS")
    summary, settings = protocol_table.committed_runs((folder,))[folder]
    return protocol_table.table(summary, settings)


def quick_runs() -> str:
    summaries = readme_table.committed_summaries()
    return readme_table.table(summaries) + "\n\n" + readme_table.agreement_line(summaries)


def in_context_gaps() -> str:
    runs = [ROOT / "evidence" / "pretrained" / model for model in IN_CONTEXT_RUNS]
    return in_context.families_markdown([in_context.summarize(run) for run in runs])


def fine_tuning() -> str:
    return finetune.markdown_table(finetune.summarize(FINETUNE_RUN))


def fine_tuning_seeds() -> str:
    return finetune.seeds_table([finetune.summarize(run) for run in FINETUNE_SEED_RUNS])


def mechanism_claims() -> str:
    return mechanism.claims_markdown(
        {run: mechanism.summarize(ROOT / "evidence" / "mechanism" / run) for run in MECHANISM_RUNS}
    )


def lorem() -> str:
    return realistic.lorem_models_table(
        [realistic.summarize_lorem(ROOT / "evidence" / "realistic" / run) for run in LOREM_RUNS]
    )


def render(name: str) -> str:
    """The text of the generated block called `name`; KeyError for a name no block has."""
    if name.startswith("run "):
        return run_table(name.removeprefix("run "))
    blocks = {
        "findings": findings,
        "headline": lambda: protocol_table.headline(_current()),
        "paper beside the lab": lambda: protocol_table.paper_table(_current()),
        "quick runs": quick_runs,
        "in-context gaps": in_context_gaps,
        "fine-tuning": fine_tuning,
        "fine-tuning seeds": fine_tuning_seeds,
        "mechanism claims": mechanism_claims,
        "lorem": lorem,
    }
    if name not in blocks:
        raise KeyError(f"known: {', '.join(blocks)}, run FOLDER")
    return blocks[name]()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; list the stale pages, exit 1 if any")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_pages(ROOT, PAGES, render, COMMAND)
        for page in stale:
            print(f"{page}: its generated blocks differ from the kept runs; run {COMMAND}")
        return 1 if stale else 0
    for page in PAGES:
        path = ROOT / page
        text = path.read_text()
        filled = fill(text, render, COMMAND, page)
        if filled != text:
            write_text(path, filled)
            print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
