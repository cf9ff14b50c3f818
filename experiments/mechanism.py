"""Which attention heads copy forward and which backward, and what removing them does (the
retrieval/copying paper's section 4.4): induction heads should carry forward copying and right
retrieval, anti-induction heads backward copying and left retrieval.

    python experiments/mechanism.py --model smollm2                            # about 12 minutes on 2 CPU cores
    python experiments/mechanism.py --run runs/length_gen/ape-quick --task UF  # a from-scratch model, under a minute
    python experiments/mechanism.py --report-only runs/mechanism/smollm2

1. Scores for every (layer, head) (models.analysis): on `--sequences` random sequences per period
   (`--periods`), each a block of T distinct tokens repeated twice, the attention from a query p
   in the second copy to p - T + 1 (induction), p - T - 1 (anti-induction), p - 1 (previous
   token), p - T (first occurrence) and position 0 (first position / BOS). Tokens: a pretrained
   model's word tokens (a space then letters, no special tokens), after its BOS when its tokenizer
   adds one; a from-scratch model's task symbols, after <bos> and with <sep> between the copies as
   in its copying strings (the offsets then grow by one: the earlier occurrence is at p - T - 1).
2. Ablations: the top k heads of each score in `--ablate`, for each k of `--k`, and `--draws`
   random controls of k heads drawn from the heads no ablated score puts in its top k; then, for
   each ablated score and k, `--draws` controls of each set in `--controls`, matched to its heads
   (crasplab.incontext.controls: heads of the same layers; heads of the same ranks under the other
   scores). A removed head outputs its mean over a reference batch (`--ablation mean`: the
   evaluated prompts of a pretrained model, the training-length test strings of a from-scratch
   one) or zeros (`--ablation zero`).
3. Accuracy, teacher-forced exact match of the whole answer (equal to greedy exact match for the
   answer's own tokenization; the unablated model is also decoded greedily on `--greedy-check`
   strings per cell, and disagreements are reported): a pretrained model on the few-shot prompts
   of experiments/pretrained.py (`--tasks`, `--lengths`, `--n`); a from-scratch model of
   experiments/length_gen.py on the test strings of each of its length bins (the strings its
   training evaluated, `--examples-per-length` per input length).

The default pretrained run without matched controls (`--controls` with no set; tasks UF UB UR UL
at length 5, 32 prompts each; 100 sequences for each of the periods 5, 10, 20; the top k = 4 and
16 heads of four scores and 2 random draws per k: 13 conditions x 128 prompts) took 12 minutes on
2 shared CPU cores (8.4 minutes of CPU time); the two matched sets add 32 conditions.
Length 5 because SmolLM2-135M is most accurate on short inputs (at length 10 its UR accuracy is
near 0, leaving nothing for an ablation to remove). A from-scratch model (8 heads: k = 1 and 2) takes
under a minute.

The run folder (default runs/mechanism/<model name>, or runs/mechanism/<run name>-<task>) holds
config.json, scores.json, ablations.jsonl (one record per ablation, k, draw and task, with each
string's verdict in order, rewritten atomically after each), summary.json, report.md and the
figures scores.png and ablations.png.
Running the same command again continues where an interrupted run stopped; the seed fixes the
sequences, the prompts and the random draws.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from crasp.tasks import BOS_ID, NUM_SPECIALS, SEP_ID, TASK_CODES
from crasplab.cli.arguments import (
    DistinctValues,
    HelpFormatter,
    add_batch_size_flag,
    add_list_flag,
    add_model_flag,
    add_prompt_flags,
    add_run_folder_flags,
    add_seed_flag,
    at_least,
    run_from_flags,
    settings_from_flags,
)
from crasplab.cli.experiment import Report
from crasplab.incontext.controls import CONTROL_SETS, matched_plan
from crasplab.incontext.formal_prompts import Demonstrations, cell_items
from crasplab.incontext.greedy import answer_lines
from crasplab.models.memory import check_prompt_count
from crasplab.incontext.settings import ABLATIONS, MechanismSettings
from crasplab.models.analysis import (
    SCORES,
    AnswerBatch,
    ablation,
    ablation_plan,
    answer_exact,
    head_scores,
    reference_means,
)
from crasplab.models.loading import NAMED_MODELS, load_with_tokenizer
from crasplab.records.files import read_jsonl, write_json, write_jsonl
from crasplab.reports.mechanism import ABLATIONS_FILE, SCORES_FILE, read_scores, report_markdown, write_report
from crasplab.records.run_folder import RunFolderError, open_run_folder
from crasplab.records.settings import SettingsError
from crasplab.train.allocator import restart_with_huge_page_blocks
from crasplab.train.checkpoint import CheckpointError, count_saved_leaves
from crasplab.train.evaluate import build_eval_sets, greedy_disagreements
from crasplab.train.runs import read_job
from crasplab.records.job_folder import JobFolder
from crasplab.train.trained import TrainedModelError, job_folders, load_trained_model

PRETRAINED_DEFAULTS = MechanismSettings()
# Word tokens ("Ġthe" decodes to " the"); a vocabulary with too few of them (a byte-level toy)
# falls back to single letters.
WORD_TOKEN = re.compile(r" [A-Za-z]+")
LETTER_TOKEN = re.compile(r" ?[A-Za-z]+")


@dataclass(frozen=True)
class Cell:
    """The strings of one task at one length (pretrained) or in one length bin (from scratch)."""

    task: str
    label: str
    batch: AnswerBatch
    # (model, exact_N) -> (strings checked, greedy verdicts that differ from exact_N)
    greedy_check: Callable[[object, np.ndarray], tuple[int, int]]


@dataclass(frozen=True)
class Subject:
    """A model under analysis, with what it is evaluated on."""

    model: object
    description: dict  # recorded in config.json
    default_out: Path
    candidates_C: np.ndarray  # token ids of the score sequences
    prefix: tuple[int, ...]
    separator: tuple[int, ...]  # between the two copies
    cells: list[Cell]
    reference: list[AnswerBatch]  # the batch whose head outputs mean ablation uses


# The demonstrations of experiments/pretrained.py's defaults: with the same tasks, lengths, count
# and seed, the same prompts.
DEMONSTRATIONS = Demonstrations()


def pretrained_subject(settings: MechanismSettings) -> Subject:
    pretrained = load_with_tokenizer(settings.model)
    tokenizer = pretrained.tokenizer
    newline_id = tokenizer.encode("\n")[-1]
    cells = []
    for code in settings.tasks:
        for length in settings.lengths:
            items = cell_items(code, length, settings.n, settings.seed, *DEMONSTRATIONS.for_task(code))
            prompt_ids = tokenizer.encode_batch([item.prompt for item in items])
            answer_ids = [
                e.ids
                for e in tokenizer.backend.encode_batch(
                    [f" {item.expected}\n" for item in items], add_special_tokens=False
                )
            ]

            def greedy_check(model, exact_N, items=items):
                checked = items[: settings.greedy_check]
                if not checked:
                    return 0, 0
                outputs = answer_lines(
                    pretrained, [i.prompt for i in checked], [i.expected for i in checked], newline_id, len(checked)
                )
                return len(checked), sum((o == i.expected) != bool(e) for o, i, e in zip(outputs, checked, exact_N))

            cells.append(
                Cell(
                    code, f"length {length}", AnswerBatch.from_prompts(prompt_ids, answer_ids, newline_id), greedy_check
                )
            )
    special = tokenizer.special_ids
    texts = {
        i: tokenizer.decode([i])
        for i in range(min(pretrained.config.vocab_size, tokenizer.backend.get_vocab_size()))
        if i not in special
    }
    candidates = [i for i, text in texts.items() if WORD_TOKEN.fullmatch(text)]
    if len(candidates) < max(settings.periods):
        candidates = [i for i, text in texts.items() if LETTER_TOKEN.fullmatch(text)]
    prefix = (tokenizer.bos_id,) if tokenizer.add_bos and tokenizer.bos_id is not None else ()
    description = dict(
        kind="pretrained",
        model_path=str(pretrained.path),
        architecture=pretrained.architecture,
        demonstrations={code: list(DEMONSTRATIONS.for_task(code)) for code in settings.tasks},
    )
    return Subject(
        pretrained.model,
        description,
        Path("runs/mechanism") / Path(settings.model).stem,
        np.array(candidates),
        prefix,
        (),
        cells,
        [cell.batch for cell in cells],
    )


def check_layers_in_checkpoint(folder: Path) -> None:
    """Refuse a job.json that claims more blocks than the job's checkpoint holds arrays: the model is
    built from job.json before the checkpoint is read, and a hand-edited n_layers of 10^8 would never
    finish building. (A smaller wrong count fails when the checkpoint is read: CheckpointError.)"""
    files = JobFolder(folder)
    if not (files.job_file.is_file() and files.checkpoint_file.is_file()):
        return  # load_trained_model says what is missing
    n_layers = read_job(folder).model.n_layers
    arrays = count_saved_leaves(files.checkpoint_file)
    if n_layers > arrays:
        raise TrainedModelError(
            f"{files.job_file} says the model has {n_layers} layers, but {files.checkpoint_file.name} "
            f"holds {arrays} arrays in all, fewer than one per layer; the job folder was edited "
            "or mixed with another run's: train the job again"
        )


def trained_subject(settings: MechanismSettings) -> tuple[Subject, MechanismSettings]:
    """The model of one task of a from-scratch run, and the settings with the test strings per length resolved."""
    try:
        by_seed = {folder.name: folder for folder in job_folders(Path(settings.run), settings.task)}
        if f"seed{settings.train_seed}" not in by_seed:
            raise TrainedModelError(
                f"{settings.run} trained {settings.task} with {', '.join(by_seed)}, not "
                f"seed{settings.train_seed}; choose one of those with --train-seed"
            )
        folder = by_seed[f"seed{settings.train_seed}"]
        check_layers_in_checkpoint(folder)
        trained = load_trained_model(folder)
    except (TrainedModelError, CheckpointError, SettingsError) as error:
        raise RunFolderError(str(error)) from None
    examples = settings.examples_per_length or trained.job.train.eval_examples_per_length
    settings = settings.replace(examples_per_length=examples)
    setup, seed = trained.setup, trained.job.seed
    eval_sets = build_eval_sets(trained.task, seed, setup.bins, examples, setup.max_positions, setup.score_eos)

    def cell(eval_set):
        batch = eval_set.batch
        return Cell(
            settings.task,
            f"{eval_set.lo}-{eval_set.hi}",
            AnswerBatch(batch.tokens_BxT, batch.positions_BxT, batch.valid_BxT, batch.loss_mask_BxT > 0),
            lambda model, exact_N: (
                min(settings.greedy_check, len(exact_N)),
                greedy_disagreements(model, eval_set, exact_N, settings.greedy_check),
            ),
        )

    cells = [cell(eval_set) for eval_set in eval_sets]
    # What training measured on the same strings at this checkpoint: the unablated model must match it.
    result_file = JobFolder(folder).result_file
    same_strings = examples == trained.job.train.eval_examples_per_length and result_file.is_file()
    recorded = JobFolder(folder).read_result().bins if same_strings else ()
    description = dict(
        kind="from-scratch",
        job_folder=str(folder),
        checkpoint_step=trained.step,
        train_range=list(trained.setup.train_range),
        recorded_accuracy={f"{b.lo}-{b.hi}": b.accuracy for b in recorded},
    )
    subject = Subject(
        trained.model,
        description,
        Path("runs/mechanism") / f"{Path(settings.run).name}-{settings.task}",
        np.arange(NUM_SPECIALS, len(trained.task.vocab)),
        (BOS_ID,),
        (SEP_ID,),
        cells,
        [cells[0].batch],
    )
    return subject, settings


def check_against_model(settings: MechanismSettings, subject: Subject) -> None:
    """Refuse settings the loaded model cannot serve, before the run folder is written."""
    config = subject.model.config
    heads = config.n_layers * config.n_heads
    if max(settings.k) > heads:
        raise SettingsError(
            f"--k {max(settings.k)} is more heads than the model has ({config.n_layers} layers x "
            f"{config.n_heads} heads = {heads}); give k from 1 to {heads}"
        )
    if max(settings.periods) > len(subject.candidates_C):
        raise SettingsError(
            f"--periods {max(settings.periods)} needs that many distinct tokens; the model's vocabulary "
            f"offers {len(subject.candidates_C)}; give periods up to {len(subject.candidates_C)}"
        )
    # A model with a learned position table (APE) has no position past it; any other model's
    # context is where its training (and, on this machine, its memory) ends.
    limit = (
        f"position table has {config.max_positions} rows"
        if config.position_scheme.learned_table
        else f"context is {config.max_positions} positions"
    )
    fixed = len(subject.prefix) + len(subject.separator)
    if fixed + 2 * max(settings.periods) > config.max_positions:
        raise SettingsError(
            f"--periods {max(settings.periods)} makes {fixed + 2 * max(settings.periods)}-token "
            f"sequences; the model's {limit}; give periods up to {(config.max_positions - fixed) // 2}"
        )
    for cell in subject.cells:
        longest = int(cell.batch.mask_NxT.sum(axis=1).max())
        if longest > config.max_positions:
            raise SettingsError(
                f"the {cell.task} prompts at {cell.label} take up to {longest} tokens with their "
                f"answers; the model's {limit}; lower --lengths"
            )


def scores_of(settings: MechanismSettings, subject: Subject, out: Path) -> dict:
    """The run's scores: read back when an earlier run wrote them, else measured and written."""
    if (out / SCORES_FILE).exists():
        return read_scores(out)
    bar = tqdm(total=settings.sequences * len(settings.periods), desc="scores", unit="seq")
    scores = head_scores(
        subject.model,
        subject.candidates_C,
        list(settings.periods),
        settings.sequences,
        settings.seed,
        subject.prefix,
        subject.separator,
        settings.batch_size,
        progress=bar.update,
    )
    bar.close()
    write_json(out / SCORES_FILE, {name: score.as_json() for name, score in scores.items()})
    return read_scores(out)


def subject_of(settings: MechanismSettings) -> tuple[Subject, MechanismSettings]:
    """The model under analysis and the settings resolved for it."""
    if settings.run is not None:
        return trained_subject(settings)
    return pretrained_subject(settings), settings


def default_out(settings: MechanismSettings) -> Path:
    if settings.run is not None:
        return Path("runs/mechanism") / f"{Path(settings.run).name}-{settings.task}"
    return Path("runs/mechanism") / Path(settings.model).stem


def run(settings: MechanismSettings, out: Path) -> None:
    """Score every head, then run every ablation the run folder lacks, saving after each."""
    check_prompt_count(settings.sequences * len(settings.periods), "--sequences")
    if settings.run is None:
        check_prompt_count(len(settings.tasks) * len(settings.lengths) * settings.n, "--n")
    started = time.perf_counter()
    subject, settings = subject_of(settings)
    check_against_model(settings, subject)
    print(f"loaded the model in {time.perf_counter() - started:.1f} s; run folder {out}")
    model_config = subject.model.config
    open_run_folder(
        out,
        {
            **subject.description,
            **settings.to_dict(),
            "position": model_config.position,
            "n_layers": model_config.n_layers,
            "n_heads": model_config.n_heads,
            "candidates": len(subject.candidates_C),
            "prefix": list(subject.prefix),
            "separator": list(subject.separator),
            "cells": [[cell.task, cell.label] for cell in subject.cells],
        },
        may_change=settings.RESULTS_UNCHANGED,
    )
    scores = scores_of(settings, subject, out)
    means = {name: np.array(scores[name]["mean"]) for name in SCORES}
    ablate, k_grid = list(settings.ablate), list(settings.k)
    plan = ablation_plan(means, ablate, k_grid, settings.draws, settings.seed) + matched_plan(
        means, ablate, k_grid, list(settings.controls), settings.draws, settings.seed
    )
    records = read_jsonl(out / ABLATIONS_FILE)
    done = {(r["ablation"], r["k"], r["draw"], r["task"], r.get("matches")) for r in records}
    tasks = list(dict.fromkeys(cell.task for cell in subject.cells))
    pending = [(a, task) for a in plan for task in tasks if (a.name, a.k, a.draw, task, a.matches) not in done]
    means = None
    if settings.ablation == "mean" and pending:
        means = reference_means(subject.model, subject.reference, settings.batch_size)
    for condition, task in tqdm(pending, desc="ablations", unit="unit"):
        unit_started = time.perf_counter()
        record = dict(
            ablation=condition.name,
            k=condition.k,
            draw=condition.draw,
            task=task,
            heads=None if condition.heads is None else [list(h) for h in condition.heads],
            eligible=condition.eligible,
            cells=[],
        )
        if condition.matches is not None:
            record["matches"] = condition.matches
        if condition.heads is not None:
            interventions = ablation(condition.heads, means, subject.model.config)
            for cell in (c for c in subject.cells if c.task == task):
                exact_N = answer_exact(subject.model, cell.batch, interventions, settings.batch_size)
                # Each string's verdict, in the cell's order: the same strings under two conditions
                # make pairs, which paired tests (McNemar) compare.
                verdicts = "".join("1" if right else "0" for right in exact_N)
                result = dict(cell=cell.label, correct=int(exact_N.sum()), total=len(exact_N), exact=verdicts)
                if condition.name == "none":
                    result["greedy_checked"], result["greedy_disagreements"] = cell.greedy_check(subject.model, exact_N)
                record["cells"].append(result)
        record["seconds"] = round(time.perf_counter() - unit_started, 2)
        records.append(record)
        write_jsonl(out / ABLATIONS_FILE, records)
    print(
        f"wall time {time.perf_counter() - started:.1f} s"
        if pending
        else "nothing left to evaluate; rebuilding the report"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    subject = parser.add_argument_group("the model (one of --model and --run)")
    add_model_flag(subject, None, NAMED_MODELS, " (None: smollm2, unless --run)")
    subject.add_argument(
        "--run", type=Path, default=None, help="a run folder of experiments/length_gen.py: analyse its model of --task"
    )
    subject.add_argument(
        "--task",
        choices=TASK_CODES,
        metavar="CODE",
        default="UF",
        help="with --run: the task whose model is analysed and evaluated",
    )
    subject.add_argument("--train-seed", type=at_least(0), default=0, help="with --run: the seed of the model")
    subject.add_argument(
        "--examples-per-length",
        type=at_least(1),
        default=None,
        help="with --run: test strings per input length (None: as many as its training evaluated)",
    )
    add_prompt_flags(
        parser.add_argument_group("pretrained models: the few-shot prompts of experiments/pretrained.py"),
        PRETRAINED_DEFAULTS,
    )
    analysis = parser.add_argument_group("scores and ablations")
    add_list_flag(
        analysis,
        "--periods",
        PRETRAINED_DEFAULTS.periods,
        "periods of the repeated random sequences",
        type=at_least(2),
        metavar="T",
    )
    analysis.add_argument(
        "--sequences", type=at_least(2), default=PRETRAINED_DEFAULTS.sequences, help="random sequences per period"
    )
    add_list_flag(
        analysis,
        "--ablate",
        PRETRAINED_DEFAULTS.ablate,
        f"scores whose top heads are removed; any of {', '.join(SCORES)}",
        choices=SCORES,
        metavar="SCORE",
    )
    add_list_flag(
        analysis,
        "--k",
        None,
        "numbers of heads removed (None: 4 16 for a pretrained model, 1 2 from scratch)",
        type=at_least(1),
        metavar="K",
    )
    analysis.add_argument(
        "--draws",
        type=at_least(0),
        default=PRETRAINED_DEFAULTS.draws,
        help="random-head controls per k, and controls of each matched set per ablated score and k",
    )
    analysis.add_argument(
        "--controls",
        nargs="*",
        action=DistinctValues,
        default=list(PRETRAINED_DEFAULTS.controls),
        choices=CONTROL_SETS,
        metavar="SET",
        help="controls matched to each ablated score's heads: same-layers (a head of each ablated head's layer), "
        "same-ranks (a head near each in its ranks under the other scores); the flag alone: none",
    )
    analysis.add_argument(
        "--ablation",
        choices=ABLATIONS,
        default=PRETRAINED_DEFAULTS.ablation,
        help="what a removed head outputs: its mean over the reference batch, or zeros",
    )
    analysis.add_argument(
        "--greedy-check",
        type=at_least(0),
        default=PRETRAINED_DEFAULTS.greedy_check,
        help="strings per cell also decoded greedily (unablated model) to cross-check teacher forcing",
    )
    add_seed_flag(parser, PRETRAINED_DEFAULTS.seed, "the sequences, prompts and random draws")
    add_batch_size_flag(parser, PRETRAINED_DEFAULTS.batch_size, "strings per forward pass")
    add_run_folder_flags(
        parser,
        "runs/mechanism/<model name> or runs/mechanism/<run name>-<task>",
        "summary.json, report.md and the figures",
    )
    return parser


def settings_from(args: argparse.Namespace) -> MechanismSettings:
    """The settings of a pretrained model's analysis (--model), or of a from-scratch model's (--run):
    the flags of the other kind of model are None."""
    if args.run is None:
        return settings_from_flags(
            MechanismSettings,
            args,
            model=args.model or PRETRAINED_DEFAULTS.model,
            k=tuple(sorted(args.k or (4, 16))),
            run=None,
            task=None,
            train_seed=None,
            examples_per_length=None,
        )
    return settings_from_flags(
        MechanismSettings,
        args,
        model=None,
        tasks=None,
        lengths=None,
        n=None,
        run=str(args.run),
        k=tuple(sorted(args.k or (1, 2))),
    )


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.run is not None and args.model is not None:
        parser.error("give --model (a pretrained model) or --run (a from-scratch run), not both")
    run_from_flags(args, settings_from, default_out, run, Report(write_report, report_markdown))


if __name__ == "__main__":
    restart_with_huge_page_blocks()
    sys.exit(main())
