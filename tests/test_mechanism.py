"""experiments/mechanism.py and models.analysis: the scores find a head built to attend to the
previous token, ablation removes exactly a head's output, random controls avoid the targeted heads,
a resumed run equals an uninterrupted one, and bad input is refused before anything is written."""

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments import mechanism
from crasplab.models import ModelConfig, Transformer, set_params
from crasplab.models.analysis import SCORES, ablation, ablation_plan, head_scores, score_edges, top_heads
from crasplab.train.config import PRESETS, RunSettings
from crasplab.train.data import sequence_length
from crasplab.train.loop import Job
from crasp.tasks import get_task
from tests.tiny import ROOT, STYLES, random_tokens, tiny_model
from tests.model_files import write_tiny_llama

POSITIONS, VOCAB, D = 16, 8, 32


def previous_token_model() -> Transformer:
    """One GPT-2 layer, 2 heads of 16 dims, with one-hot embeddings: position p in dim p, token v in
    dim 16 + v. After the LayerNorm (centered, scaled) a one-hot dim holds a > 0 and the others -b.
    Head 0: q copies the position dims, k shifts them one dim up, so q(p) . k(s) gains a^2 exactly
    when s = p - 1 and loses about 2ab otherwise: with the scale 3 the previous token gets all but
    e^-30 of the weight. Head 1: a constant query (bias) against a key reading dim 0 (position 0)."""
    config = ModelConfig(vocab_size=VOCAB, d_model=D, n_layers=1, n_heads=2, d_ff=4, max_positions=POSITIONS)
    model = Transformer(config, rngs=nnx.Rngs(0))
    q_DxW, k_DxW, q_bias_W = np.zeros((D, D)), np.zeros((D, D)), np.zeros(D)
    for dim in range(POSITIONS):
        q_DxW[dim, dim] = 3.0
        if dim + 1 < POSITIONS:
            k_DxW[dim, dim + 1] = 3.0
    q_bias_W[16], k_DxW[0, 16] = 5.0, 5.0
    set_params(
        model,
        {
            "embed.embedding": np.eye(VOCAB, D, k=POSITIONS),
            "pos_embed.embedding": np.eye(POSITIONS, D),
            "layers.0.attn.q.kernel": q_DxW,
            "layers.0.attn.q.bias": q_bias_W,
            "layers.0.attn.k.kernel": k_DxW,
            "layers.0.attn.k.bias": np.zeros(D),
        },
    )
    return model


def test_a_head_built_to_read_the_previous_token_scores_highest_on_that_score():
    scores = head_scores(previous_token_model(), np.arange(VOCAB), periods=[3, 5, 7], n=20, seed=0)
    assert top_heads(scores["previous_token"].mean_LxH, 1) == [(0, 0)]
    assert scores["previous_token"].mean_LxH[0, 0] > 0.99 > 0.05 > scores["previous_token"].mean_LxH[0, 1]
    assert top_heads(scores["first_position"].mean_LxH, 1) == [(0, 1)]
    assert scores["first_position"].mean_LxH[0, 1] > 0.99
    assert scores["induction"].mean_LxH.max() < 0.05  # neither head looks at the earlier occurrence
    assert scores["previous_token"].period_means_PxLxH.shape == (3, 1, 2)


def test_score_edges_point_at_the_earlier_occurrence_and_its_neighbours():
    tokens = [9, 1, 2, 3, 0, 1, 2, 3]  # prefix 9, block 1 2 3, separator 0, block again
    edges = score_edges(prefix_length=1, period=3, separator_length=1)
    queries, keys = edges["first_occurrence"]
    assert [tokens[q] for q in queries] == [tokens[k] for k in keys] == [1, 2, 3]
    assert [tokens[k] for k in edges["induction"][1]] == [2, 3, 0]
    assert [tokens[k] for k in edges["anti_induction"][1]] == [1, 2]  # queries 2 and 3
    assert list(edges["previous_token"][1]) == [4, 5, 6] and list(edges["first_position"][1]) == [0, 0, 0]


def test_zero_ablating_a_head_equals_removing_its_output_and_no_ablation_changes_nothing():
    model = tiny_model(**STYLES["llama_rope_gqa"])  # no output bias: a removed head adds exactly 0
    without = tiny_model(**STYLES["llama_rope_gqa"])
    K = model.config.head_dim
    kernel = np.array(without.layers[1].attn.o.kernel[...])
    kernel[2 * K : 3 * K] = 0.0
    set_params(without, {"layers.1.attn.o.kernel": kernel})
    tokens_BxT = random_tokens((2, 6))
    ablated = model(tokens_BxT, interventions=ablation([(1, 2)], None, model.config)).logits_BxTxV
    np.testing.assert_allclose(ablated, without(tokens_BxT).logits_BxTxV, atol=1e-6)
    assert np.abs(np.asarray(ablated - model(tokens_BxT).logits_BxTxV)).max() > 1e-3
    means = np.random.default_rng(0).normal(size=(2, 4, K)).astype(np.float32)
    untouched = model(tokens_BxT, interventions=ablation([], means, model.config)).logits_BxTxV
    np.testing.assert_array_equal(untouched, model(tokens_BxT).logits_BxTxV)


@settings(max_examples=60, deadline=None)
@given(
    layers=st.integers(1, 4),
    heads=st.integers(1, 6),
    draws=st.integers(1, 4),
    seed=st.integers(0, 10**6),
    data=st.data(),
)
def test_random_controls_never_include_the_targeted_heads(layers, heads, draws, seed, data):
    means = {name: np.random.default_rng(seed).random((layers, heads)) for name in SCORES}
    ablate = data.draw(st.lists(st.sampled_from(SCORES), min_size=1, unique=True))
    k_grid = data.draw(st.lists(st.integers(1, layers * heads), min_size=1, unique=True))
    plan = ablation_plan(means, ablate, k_grid, draws, seed)
    assert plan == ablation_plan(means, ablate, k_grid, draws, seed)  # the seed fixes the draws
    for k in k_grid:
        targeted = {head for a in plan if a.k == k and a.name in ablate for head in a.heads}
        controls = [a for a in plan if a.k == k and a.name == "random"]
        assert len(controls) == draws
        for control in controls:
            assert control.eligible == layers * heads - len(targeted)
            if control.heads is None:
                assert control.eligible < k
            else:
                assert len(set(control.heads)) == k and not set(control.heads) & targeted


def _flags(model, out, *extra):
    return [
        "--model",
        str(model),
        "--tasks",
        "UF",
        "UR",
        "--lengths",
        "3",
        "--n",
        "3",
        "--periods",
        "3",
        "4",
        "--sequences",
        "4",
        "--k",
        "1",
        "2",
        "--draws",
        "2",
        "--batch-size",
        "4",
        "--greedy-check",
        "2",
        "--out",
        str(out),
        *extra,
    ]


def _records(run):
    return [
        {k: v for k, v in r.items() if k != "seconds"}
        for r in map(json.loads, (run / "ablations.jsonl").read_text().splitlines())
    ]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def whole_run(tiny_llama, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "whole"
    mechanism.main(_flags(tiny_llama, out))
    return out


def test_an_interrupted_run_resumes_to_the_same_files(tmp_path, tiny_llama, whole_run, monkeypatch):
    whole = _records(whole_run)
    # (none + per k: 4 scores, 2 random draws, 2 draws of 2 matched sets per score) x 2 tasks
    assert len(whole) == 2 * (1 + 2 * (4 + 2 + 4 * 2 * 2))
    assert {r["task"] for r in whole} == {"UF", "UR"}

    real_answer_exact, allowed_calls = mechanism.answer_exact, iter(range(7))

    def interrupted(*args):
        if next(allowed_calls, None) is None:
            raise KeyboardInterrupt  # as if the user stopped the run in its eighth evaluation
        return real_answer_exact(*args)

    monkeypatch.setattr(mechanism, "answer_exact", interrupted)
    with pytest.raises(SystemExit, match="^130$"):  # Ctrl-C: one line, exit 130 (crasplab.errors)
        mechanism.main(_flags(tiny_llama, tmp_path))
    assert 0 < len(_records(tmp_path)) < len(whole)
    monkeypatch.setattr(mechanism, "answer_exact", real_answer_exact)
    mechanism.main(_flags(tiny_llama, tmp_path))
    assert _records(tmp_path) == whole
    for name in ("scores.json", "summary.json"):
        saved = [json.loads((run / name).read_text()) for run in (whole_run, tmp_path)]
        if name == "summary.json":
            for summary in saved:
                summary.pop("seconds")
        assert saved[0] == saved[1]
    for name in ("report.md", "scores.png", "ablations.png"):
        assert (tmp_path / name).stat().st_size > 0

    with pytest.raises(SystemExit, match="different settings \\(draws: "):
        mechanism.main(_flags(tiny_llama, tmp_path, "--draws", "3"))


def test_the_report_judges_each_claim_from_the_counts(tiny_llama, tmp_path):
    """A run without matched controls judges the paper's claims unpaired, against random heads."""
    mechanism.main(_flags(tiny_llama, tmp_path, "--controls"))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "matched" not in summary
    assert {(j["score"], j["task"], j["k"]) for j in summary["claims"]} == {
        (score, task, k)
        for score, task in [("induction", "UF"), ("induction", "UR"), ("anti_induction", "UF")]
        for k in (1, 2)
    }
    for judgement in summary["claims"]:
        change = judgement["ablated"]
        assert change["change"] == pytest.approx(change["accuracy"] - judgement["base"]["accuracy"])
        if judgement["base"]["correct"] == 0:
            assert judgement["verdict"] == "untestable"
        elif judgement["verdict"].startswith("drop"):
            assert change["change_high"] < 0
        if "p_holm" in judgement:  # Holm over the testable judgements; a corrected drop is an uncorrected one
            assert judgement["p_holm"] >= judgement["p"]
            assert judgement["corrected"] != "below 0 after correction" or judgement["verdict"] == "drop"
    random_pooled = [
        r for r in summary["rows"] if r["ablation"] == "random" and r["draw"] == "pooled" and "pooled" in r
    ]
    for row in random_pooled:
        draws = [
            r
            for r in summary["rows"]
            if r["ablation"] == "random" and r["k"] == row["k"] and r["task"] == row["task"] and r["draw"] in (0, 1)
        ]
        assert row["pooled"]["total"] == sum(r["pooled"]["total"] for r in draws)
    assert "removing induction heads drops UF" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--tasks", "XYZ"], "argument --tasks: invalid choice: 'XYZ'"),
        (["--task", "XYZ", "--run", "somewhere"], "argument --task: invalid choice: 'XYZ'"),
        (["--k", "0"], "argument --k: must be at least 1, got 0"),
        (["--ablate", "induction_score"], "argument --ablate: invalid choice"),
        (["--model", "m.gguf", "--run", "somewhere"], "give --model (a pretrained model) or --run"),
    ],
)
def test_invalid_flags_are_refused_while_parsing(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit):
        mechanism.main([*flags, "--out", str(tmp_path / "run")])
    assert message in capsys.readouterr().err and not (tmp_path / "run").exists()


def test_more_heads_than_the_model_has_are_refused_before_writing(tmp_path, tiny_llama):
    with pytest.raises(SystemExit, match="--k 9 is more heads than the model has \\(2 layers x 4 heads = 8\\)"):
        mechanism.main(_flags(tiny_llama, tmp_path / "run", "--k", "9"))
    assert not (tmp_path / "run").exists()


def test_prompts_beyond_the_models_context_are_refused_before_writing(tmp_path, tiny_llama):
    # The tiny Llama (RoPE, 512 positions) reads text byte by byte: 300 symbols and their copy do not fit.
    with pytest.raises(
        SystemExit,
        match="the NF prompts at length 300 take up to .* tokens with their answers; the "
        "model's context is 512 positions; lower --lengths",
    ):
        mechanism.main(
            [
                "--model",
                str(tiny_llama),
                "--tasks",
                "NF",
                "--lengths",
                "300",
                "--n",
                "2",
                "--k",
                "1",
                "--out",
                str(tmp_path / "run"),
            ]
        )
    assert not (tmp_path / "run").exists()


def test_a_folder_that_is_not_a_run_a_bad_length_and_a_file_that_is_not_a_model_are_clear_errors(tmp_path):
    with pytest.raises(SystemExit, match=f"error: {tmp_path} holds no run: it has no config.json"):
        mechanism.main(["--run", str(tmp_path), "--task", "UF", "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match="task UF \\(alphabet of 52\\) accepts lengths 1 to 52"):
        mechanism.main(["--tasks", "UF", "--lengths", "60", "--out", str(tmp_path / "out")])
    (tmp_path / "notes.gguf").write_text("not a model")
    with pytest.raises(SystemExit, match="error: .*notes.gguf"):
        mechanism.main(["--model", str(tmp_path / "notes.gguf"), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_from_scratch_model_is_scored_and_ablated_on_its_own_test_strings(tmp_path, monkeypatch):
    """A tiny length_gen.py run trained here (in this process), then analysed: the unablated
    accuracy per bin equals what training recorded on the same strings."""
    from experiments import length_gen
    from crasplab.train.device import ACCELERATOR_PATH_ENV, REHEARSE

    monkeypatch.setenv(ACCELERATOR_PATH_ENV, REHEARSE)  # trained in this process, as on an accelerator
    run = tmp_path / "run"
    length_gen.main(
        [
            "--pe",
            "ape",
            "--preset",
            "quick",
            "--tasks",
            "UF",
            "--n-layers",
            "2",
            "--n-heads",
            "2",
            "--d-model",
            "16",
            "--train-lengths",
            "1",
            "4",
            "--test-bins",
            "1-4,5-6",
            "--max-steps",
            "40",
            "--warmup-steps",
            "1",
            "--eval-every",
            "40",
            "--eval-examples-per-length",
            "3",
            "--greedy-examples-per-bin",
            "2",
            "--batch-size",
            "8",
            "--no-progress",
            "--out",
            str(run),
        ]
    )
    out = tmp_path / "mechanism"
    mechanism.main(
        [
            "--run",
            str(run),
            "--task",
            "UF",
            "--periods",
            "2",
            "3",
            "--sequences",
            "4",
            "--draws",
            "1",
            "--out",
            str(out),
        ]
    )
    config = json.loads((out / "config.json").read_text())
    assert config["separator"] == [2] and config["n_layers"] * config["n_heads"] == 4
    none = next(
        r for r in map(json.loads, (out / "ablations.jsonl").read_text().splitlines()) if r["ablation"] == "none"
    )
    measured = {cell["cell"]: cell["correct"] / cell["total"] for cell in none["cells"]}
    assert measured == pytest.approx(config["recorded_accuracy"], abs=1e-6)
    assert all(cell["greedy_disagreements"] == 0 for cell in none["cells"])
    with pytest.raises(SystemExit, match="trained the tasks UF, not 'UB'"):
        mechanism.main(["--run", str(run), "--task", "UB", "--out", str(tmp_path / "other")])
    # The table holds the strings of inputs up to the preset's position reach, scaled to lengths 1-4.
    job = Job.from_dict(json.loads((run / "UF" / "seed0" / "job.json").read_text()))
    rows = sequence_length(get_task("UF", **job.task_overrides), job.train.position_reach)
    periods = (rows - 2) // 2 + 1  # one past what <bos>, the separator and two periods fit
    refusal = f"--periods {periods} makes {2 + 2 * periods}-token sequences; the model's position table has {rows} rows"
    with pytest.raises(SystemExit, match=refusal):
        mechanism.main(["--run", str(run), "--task", "UF", "--periods", str(periods), "--out", str(tmp_path / "other")])
    assert not (tmp_path / "other").exists()


def _from_scratch_run(run: Path, n_layers: int, checkpoint: bytes | None = None) -> Path:
    """A length_gen.py run folder of one UF job whose job.json claims `n_layers` and whose
    checkpoint.npz holds ten small arrays (or the given bytes)."""
    preset = PRESETS["quick"]
    settings = RunSettings(
        preset="quick",
        tasks=("UF",),
        seeds=(0,),
        model=preset.model,
        train={"UF": preset.train_for("UF")},
        task_overrides={"UF": preset.overrides_for("UF")},
    )
    run.mkdir()
    (run / "config.json").write_text(json.dumps(settings.to_dict()))
    folder = run / "UF" / "seed0"
    folder.mkdir(parents=True)
    job = Job(
        task_code="UF",
        seed=0,
        model=preset.model.replace(n_layers=n_layers),
        train=settings.train["UF"],
        task_overrides=settings.task_overrides["UF"],
        out_dir=str(folder),
    )
    (folder / "job.json").write_text(json.dumps(job.to_dict()))
    if checkpoint is None:
        np.savez(folder / "checkpoint.npz", **{f"leaf_{i:05d}": np.zeros(2) for i in range(10)})
    else:
        (folder / "checkpoint.npz").write_bytes(checkpoint)
    return run


def _truncated_checkpoint() -> bytes:
    """A checkpoint cut short, as a copy that did not finish leaves it (issue 47, probe F: BadZipFile)."""
    buffer = io.BytesIO()
    np.savez(buffer, **{f"leaf_{i:05d}": np.zeros(200) for i in range(10)})
    return buffer.getvalue()[:3000]


TRUNCATED = _truncated_checkpoint()


@pytest.mark.parametrize(
    "n_layers, checkpoint, message",
    [
        (10**8, None, "job.json says the model has 100000000 layers, but checkpoint.npz holds 10 arrays in all"),
        (2, None, "checkpoint.npz: not a readable checkpoint \\(KeyError: 'structure is not a file in the archive'\\)"),
        (2, b"not a zip file", "checkpoint.npz: not a readable checkpoint \\(ValueError"),
        (2, TRUNCATED, "checkpoint.npz: not a readable checkpoint \\(BadZipFile"),
    ],
    ids=["layers-beyond-the-checkpoint", "another-models-checkpoint", "damaged-checkpoint", "truncated-checkpoint"],
)
def test_a_job_folder_that_does_not_hold_its_model_is_an_error_line(tmp_path, n_layers, checkpoint, message):
    run = _from_scratch_run(tmp_path / "run", n_layers, checkpoint)
    with pytest.raises(SystemExit, match=f"^error: .*{message}"):
        mechanism.main(["--run", str(run), "--task", "UF", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "folder", sorted(path.name for path in (ROOT / "evidence/mechanism").iterdir() if path.is_dir())
)
def test_committed_mechanism_runs_rebuild_their_reports_from_their_files(folder, tmp_path, capsys):
    """Folders written before the settings recorded both kinds of model are read as they were
    written (none of them is refused), and their reports come back the same."""
    copy = tmp_path / folder
    shutil.copytree(ROOT / "evidence/mechanism" / folder, copy)
    mechanism.main(["--report-only", str(copy)])
    assert (copy / "report.md").read_text() == (ROOT / "evidence/mechanism" / folder / "report.md").read_text()
