"""Fine-tuning (experiments/finetune.py, crasplab.incontext.finetune*, models.lora, reports.finetune) on a tiny
random-weight Llama checkpoint: the batches' loss mask, a step that lowers the loss, LoRA's
parameter count and starting point, a killed run resuming to the numbers of an uninterrupted one,
flags refused before a run folder is written, and the report's verdicts."""

import json
from pathlib import Path

import jax
import numpy as np
import pytest

from crasplab.verdicts.predictions import predictions_for, write_predictions
from flax import nnx

from experiments import finetune as experiment
from crasplab.models.loading import load_pretrained
from crasplab.models.lora import Frozen, with_lora
from crasplab.models.params import count_params
from crasplab.reports.finetune import summarize
from tests.model_files import write_tiny_llama
from crasplab.incontext import finetune
from crasplab.incontext.finetune_config import FinetuneConfig
from crasplab.incontext.finetune_data import token_batch, training_items
from crasplab.train.steps import init_stack, make_optimizer, make_train_step


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_llama")
    write_tiny_llama(folder)
    return folder


def _batch(pretrained, code="UF", batch_size=4):
    items = training_items(code, seed=0, step=0, batch_size=batch_size, lengths=(2, 5), demonstrations=1, demo_length=3)
    return items, token_batch(pretrained.tokenizer, items, pad_id=pretrained.tokenizer.encode("\n")[-1])


def test_the_loss_mask_covers_exactly_the_answer_line(tiny):
    pretrained = load_pretrained(tiny)
    items, batch = _batch(pretrained, "UB")
    for row, item in enumerate(items):
        targets = batch.targets_BxT[row][batch.loss_mask_BxT[row] == 1].tolist()
        assert pretrained.tokenizer.decode(targets) == " " + item.expected + "\n"
        # The model reads the prompt exactly as greedy decoding encodes it.
        prompt = pretrained.tokenizer.encode(item.prompt)
        assert batch.tokens_BxT[row, : len(prompt)].tolist() == prompt
    assert batch.tokens_BxT.shape[1] % 8 == 0


def _steps(model, batch, count, learning_rate=1e-3):
    config = FinetuneConfig(
        train_lengths=(2, 5), test_bins=((2, 5),), learning_rate=learning_rate, warmup_fraction=0.0, max_steps=100
    )
    optimizer = make_optimizer(config.optimizer_config())
    graphdef, rest, params_S, opt_state_S = init_stack([model], optimizer)
    step = make_train_step(graphdef, rest, optimizer)
    arrays = {name: array[None] for name, array in batch.as_dict().items()}
    losses = []
    for _ in range(count):
        params_S, opt_state_S, loss_S, _ = step(params_S, opt_state_S, arrays)
        losses.append(float(loss_S[0]))
    return losses, nnx.merge(graphdef, jax.tree.map(lambda leaf: leaf[0], params_S), rest)


def test_a_finetuning_step_lowers_the_loss_on_a_fixed_batch(tiny):
    pretrained = load_pretrained(tiny)
    _, batch = _batch(pretrained)
    losses, _ = _steps(pretrained.model, batch, 4)
    assert losses[-1] < losses[0] - 0.1, losses


def test_lora_trains_the_stated_parameters_and_starts_as_the_base_model(tiny):
    pretrained = load_pretrained(tiny)
    config, rank = pretrained.config, 3
    adapted = with_lora(pretrained.model, rank=rank, alpha=6.0, seed=0)
    d, ff, kv = config.d_model, config.d_ff, config.kv_heads * config.head_dim
    shapes = [(d, d), (d, kv), (d, kv), (d, d), (d, ff), (d, ff), (ff, d)]  # q k v o gate up down
    assert count_params(adapted) == config.n_layers * rank * sum(a + b for a, b in shapes)
    _, batch = _batch(pretrained)
    tokens, positions, valid = batch.tokens_BxT, batch.positions_BxT, batch.valid_BxT
    base_logits = pretrained.model(tokens, positions, valid).logits_BxTxV
    np.testing.assert_allclose(adapted(tokens, positions, valid).logits_BxTxV, base_logits, atol=1e-5)
    # An update on the query projection must reach the logits: attention reads q, k and v through
    # their kernels, not through the layers' calls.
    query = adapted.layers[0].attn.q.lora
    query.lora_b[...] = jax.random.normal(jax.random.key(0), query.lora_b.shape)
    assert not np.allclose(adapted(tokens, positions, valid).logits_BxTxV, base_logits, atol=1e-3)

    losses, trained = _steps(with_lora(pretrained.model, rank=rank, alpha=6.0, seed=0), batch, 4, learning_rate=1e-2)
    assert losses[-1] < losses[0]
    frozen_before = jax.tree.leaves(nnx.state(with_lora(pretrained.model, rank, 6.0, 0), Frozen))
    for before, after in zip(frozen_before, jax.tree.leaves(nnx.state(trained, Frozen))):
        np.testing.assert_array_equal(before, after)


FLAGS = [
    "--tasks",
    "UF",
    "NB",
    "--train-lengths",
    "1",
    "3",
    "--test-bins",
    "1-3,4-5",
    "--demonstrations",
    "1",
    "--demo-length",
    "3",
    "--max-steps",
    "7",
    "--batch-size",
    "2",
    "--learning-rate",
    "1e-3",
    "--examples-per-length",
    "2",
    "--eval-batch-size",
    "5",
    "--log-every",
    "2",
    "--checkpoint-every",
    "4",
    "--no-progress",
]


def _files(run):
    """What a run measured, without the timings."""
    answers = [{k: v for k, v in r.items() if k != "seconds"} for r in map(json.loads, (run / "results.jsonl").open())]
    metrics = {
        code: [
            {k: v for k, v in r.items() if k != "elapsed_s"}
            for r in map(json.loads, (run / code / "seed0" / "metrics.jsonl").open())
        ]
        for code in ("UF", "NB")
    }
    with np.load(run / "NB" / "seed0" / "model.npz") as weights:
        arrays = {name: weights[name] for name in weights.files if name.startswith("leaf")}
    return sorted(answers, key=str), metrics, arrays


def test_a_killed_run_resumes_to_the_numbers_of_an_uninterrupted_one(tiny, tmp_path, monkeypatch):
    flags = FLAGS + ["--model", str(tiny)]
    experiment.main(flags + ["--out", str(tmp_path / "whole")])
    whole = _files(tmp_path / "whole")

    real_batch, calls = finetune.token_batch, []

    def killed_in_step_7_of_nb(*args):  # after NB's checkpoint at step 4 and its records at steps 2, 4, 6
        calls.append(args[1][0].task)
        if calls.count("NB") == 7:
            raise KeyboardInterrupt
        return real_batch(*args)

    monkeypatch.setattr(finetune, "token_batch", killed_in_step_7_of_nb)
    with pytest.raises(SystemExit, match="^130$"):  # Ctrl-C: one line, exit 130 (crasplab.errors)
        experiment.main(flags + ["--out", str(tmp_path / "resumed")])
    nb = tmp_path / "resumed" / "NB" / "seed0"
    assert (nb / "checkpoint.npz").exists() and not (nb / "result.json").exists()
    assert [r["step"] for r in map(json.loads, (nb / "metrics.jsonl").open())] == [2, 4, 6]
    monkeypatch.setattr(finetune, "token_batch", real_batch)
    experiment.main(flags + ["--out", str(tmp_path / "resumed")])
    resumed = _files(tmp_path / "resumed")
    assert resumed[:2] == whole[:2]
    assert resumed[2].keys() == whole[2].keys()
    for name in whole[2]:
        np.testing.assert_array_equal(resumed[2][name], whole[2][name])
    assert not (nb / "checkpoint.npz").exists()  # the optimizer state goes once the task is done
    summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert summary["answered"] == {"before": 20, "after": 20} and summary["planned"] == 20
    assert {row["task"]: row["training"]["steps"] for row in summary["rows"]} == {"UF": 7, "NB": 7}

    with pytest.raises(SystemExit, match="different settings \\(finetune.max_steps: "):
        experiment.main(flags + ["--max-steps", "8", "--out", str(tmp_path / "resumed")])


@pytest.mark.parametrize(
    "flags, message",
    [
        # The quick preset's bins 1-6 / 7-9 / 10-12 move to 1-60 / 61-90 / 91-120.
        (
            ["--tasks", "UF", "--train-lengths", "1", "60"],
            "test lengths 53-120: task UF \\(alphabet of 52\\) accepts lengths 1 to 52",
        ),
        (["--tasks", "NRFirst", "--train-lengths", "1", "6"], "task NRFirst .* accepts lengths 3 or more"),
        (["--test-bins", "2-6,7-9"], "must equal train_lengths"),
        (["--test-bins", "1-6,5-9"], "test bin 5-9 starts at or below 6"),
        (["--method", "lora", "--lora-alpha", "-1"], "lora_alpha must be > 0"),
    ],
)
def test_bad_settings_are_refused_before_the_model_or_the_folder(tmp_path, flags, message):
    with pytest.raises(SystemExit, match=message):
        experiment.main(flags + ["--model", str(tmp_path / "absent"), "--out", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()


def test_training_lengths_alone_move_the_presets_test_bins_with_them():
    args = experiment.build_parser().parse_args(["--preset", "quick", "--train-lengths", "1", "8"])
    # The quick preset's bins are 1-6 / 7-9 / 10-12.
    assert experiment.settings_from(args).finetune.test_bins == ((1, 8), (9, 12), (13, 16))


def test_prompts_beyond_the_models_context_are_refused_before_the_folder(tiny, tmp_path):
    # The tiny Llama (512 positions) reads text byte by byte: NF strings of 200 symbols and their copy do not fit.
    with pytest.raises(SystemExit, match="exceed the context of 512 positions .* lower --train-lengths or --test-bins"):
        experiment.main(
            [
                "--model",
                str(tiny),
                "--tasks",
                "NF",
                "--train-lengths",
                "1",
                "3",
                "--test-bins",
                "1-3,4-200",
                "--out",
                str(tmp_path / "run"),
            ]
        )
    assert not (tmp_path / "run").exists()


def test_a_file_that_is_not_a_model_is_refused_before_the_folder(tmp_path):
    (tmp_path / "notes.gguf").write_text("not a model")
    with pytest.raises(SystemExit, match="notes.gguf"):
        experiment.main(["--model", str(tmp_path / "notes.gguf"), "--out", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()
    with pytest.raises(SystemExit):
        experiment.main(["--tasks", "XX"])


def _write_run(folder: Path, accuracy: dict[tuple[str, str, int], float], n: int = 20):
    settings = FinetuneConfig(train_lengths=(1, 2), test_bins=((1, 2), (3, 4)), examples_per_length=n).to_dict()
    config = dict(
        model="m",
        architecture="gguf/llama",
        preset="quick",
        tasks=["UF", "UB"],
        seed=0,
        threshold=0.9,
        finetune=settings,
    )
    (folder / "config.json").write_text(json.dumps(config))
    records = [
        dict(
            task=task,
            stage=stage,
            length=length,
            index=i,
            expected="ab",
            output="ab" if i < round(p * n) else "ba",
            correct=i < round(p * n),
            seconds=0.1,
        )
        for (task, stage, length), p in accuracy.items()
        for i in range(n)
    ]
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_predictions(folder, predictions_for("ape", config["tasks"]))


def test_the_report_keeps_did_not_fit_apart_and_measures_the_gaps(tmp_path):
    accuracy = {
        ("UF", "before", 1): 0.9,
        ("UF", "before", 2): 0.9,
        ("UF", "before", 3): 0.8,
        ("UF", "before", 4): 0.8,
        ("UB", "before", 1): 0.0,
        ("UB", "before", 2): 0.0,
        ("UB", "before", 3): 0.0,
        ("UB", "before", 4): 0.0,
        ("UF", "after", 1): 1.0,
        ("UF", "after", 2): 1.0,
        ("UF", "after", 3): 0.2,
        ("UF", "after", 4): 0.0,
        ("UB", "after", 1): 1.0,
        ("UB", "after", 2): 0.9,
        ("UB", "after", 3): 0.1,
        ("UB", "after", 4): 0.1,
    }
    _write_run(tmp_path, accuracy)
    summary = summarize(tmp_path)
    rows = {row["task"]: row for row in summary["rows"]}
    assert rows["UF"]["observed"] == "fails" and rows["UF"]["agrees"] is False
    assert rows["UB"]["observed"] == "did not fit" and rows["UB"]["agrees"] is None
    assert rows["UB"]["after"][0]["accuracy"] == pytest.approx(0.95)
    (gap,) = summary["gaps"]
    assert gap["name"] == "UF - UB"
    assert gap["before"]["beyond"]["gap"] == pytest.approx(0.8) and gap["before"]["beyond"]["low"] > 0
    assert gap["after"]["beyond"]["low"] < 0 < gap["after"]["beyond"]["high"]
    assert summary["answered"] == {"before": 160, "after": 160} and summary["planned"] == 160
    # Before and after are the same prompts: UF loses 28 of its 32 right answers beyond training
    # (16 + 16 -> 4 + 0, all among them), UB gains 4; the gap's change is paired, one family of one.
    assert (rows["UF"]["change_beyond"]["gained"], rows["UF"]["change_beyond"]["lost"]) == (0, 28)
    assert rows["UF"]["change_beyond"]["p"] < 1e-6 and rows["UB"]["change_beyond"]["gained"] == 4
    assert gap["change"]["gap"] == pytest.approx(-0.8) and gap["change"]["high"] < 0
    assert gap["change"]["corrected"] == "below 0 after correction"


def test_help_explains_every_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        experiment.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert all(f"--{name.replace('_', '-')}" in text for name in experiment.CONFIG_FLAGS)
