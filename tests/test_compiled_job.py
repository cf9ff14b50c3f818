"""A compiled program as a job folder: loaded by train.trained like a trained model, it answers every
test string training would evaluate, and experiments/mechanism.py finds the heads it was built with.
Training's own job settings are written as before the compiled architecture existed."""

import json

import numpy as np
import pytest

from crasp import witnesses as W
from crasp.__main__ import main
from crasp.check import to_program_ids
from crasp.program import print_program
from crasp.tasks import get_task
from crasplab.compiler import compile_program
from crasplab.compiler.job import save_compiled_job, task_weights
from crasplab.models import Transformer, set_params
from crasplab.models.analysis import AnswerBatch, answer_exact
from crasplab.models.config import PRESETS as MODEL_PRESETS
from crasplab.train.config import ModelSettings, TrainConfig
from crasplab.records.settings import SettingsError
from crasplab.train.evaluate import build_eval_sets
from crasplab.train.loop import Job
from crasplab.train.trained import job_folders, load_trained_model
from experiments import length_gen, mechanism
from flax import nnx

SHORT_BINS = TrainConfig(train_lengths=(1, 8), test_bins=((1, 8), (9, 12)))


def generic_text(make) -> str:
    """The witness as a program file that reads any task's symbols (its body names no symbol)."""
    return print_program(make(["a", "b"])).replace("alphabet: <bos> <sep> <eos> a b", "alphabet: <bos> <sep> <eos> ...")


def exact_on_test_strings(trained, examples_per_length: int) -> dict[str, float]:
    sets = build_eval_sets(
        trained.task, trained.job.seed, trained.setup.bins, examples_per_length, trained.setup.max_positions
    )
    accuracy = {}
    for eval_set in sets:
        b = eval_set.batch
        batch = AnswerBatch(b.tokens_BxT, b.positions_BxT, b.valid_BxT, b.loss_mask_BxT > 0)
        accuracy[f"{eval_set.lo}-{eval_set.hi}"] = float(answer_exact(trained.model, batch, None, 64).mean())
    return accuracy


@pytest.mark.parametrize(
    "config",
    [
        compile_program(W.unique_right(get_task("UR", alphabet_size=4).symbols), "ape", max_length=32).config,
        compile_program(W.copy_forward(get_task("UF", alphabet_size=4).symbols), "rope", max_length=32).config,
        MODEL_PRESETS["smollm2_135m"],
    ],
    ids=["compiled-ape", "compiled-rope", "smollm2"],
)
def test_the_settings_of_a_config_build_that_config_after_a_json_round_trip(config):
    settings = ModelSettings.from_dict(json.loads(json.dumps(ModelSettings.of_config(config).to_dict())))
    assert settings.model_config(config.vocab_size, config.max_positions) == config


def test_training_settings_are_written_without_an_architecture():
    job = Job(task_code="UF", seed=0, model=ModelSettings(pe="rope"), train=TrainConfig())
    assert set(job.to_dict()["model"]) == {"pe", "n_layers", "n_heads", "d_model", "d_ff", "dtype"}
    config = job.model.model_config(10, 64)
    assert (config.block, config.rope_base, config.tie_embeddings) == ("llama", 500.0, False)


@pytest.mark.parametrize(
    "architecture, says",
    [
        ({"vocab_size": 5}, ["architecture sets ['vocab_size']", "may set only n_kv_heads, d_head, block,"]),
        ({"block": "mamba"}, ["makes no model", "block='mamba'", "accepted: ('gpt2', 'llama', 'gemma3')"]),
        ({"d_head": 6, "n_kv_heads": 3}, ["makes no model", "n_heads=4 must be a multiple of n_kv_heads=3"]),
        ([["block", "llama"]], ['setting architecture = [["block", "llama"]] is not accepted; expected a JSON object']),
    ],
)
def test_an_architecture_that_makes_no_model_is_refused_saying_what_is_accepted(architecture, says):
    with pytest.raises(SettingsError) as error:
        ModelSettings(pe="nope", n_heads=4, d_model=16, architecture=architecture)
    for words in says:
        assert words in str(error.value)


def test_task_ids_read_and_answer_as_the_program_ids_of_their_symbols():
    """The program lists the task's symbols in reverse order, so no shift of the ids would do."""
    task = get_task("UR", alphabet_size=6)
    compiled = compile_program(W.unique_right(task.symbols[::-1]), "ape", max_length=32)
    config, params = task_weights(compiled, task.vocab)
    over_task = Transformer(config, rngs=nnx.Rngs(0))
    set_params(over_task, params, require_all=True)
    examples = task.sample(np.random.default_rng(0), 8, 6)
    program_ids = to_program_ids(examples.tokens, task.vocab, compiled.program)
    real = program_ids >= 0
    task_logits = np.asarray(over_task(np.asarray(examples.tokens)).logits_BxTxV)
    program_logits = np.asarray(compiled.model()(np.maximum(program_ids, 0)).logits_BxTxV)
    symbol_of_task_id = to_program_ids(np.arange(len(task.vocab)), task.vocab, compiled.program)
    assert np.array_equal(task_logits[real][:, 1:], program_logits[real][:, symbol_of_task_id[1:]])
    assert (task_logits[real][:, 0] == 0).all()  # <pad>: between every true (+8) and false (-8) output


@pytest.mark.parametrize(
    "code, make, pe, overrides",
    [
        ("UR", W.unique_right, "ape", dict(alphabet_size=16)),
        ("NRFirst", W.first_right, "ape", {}),
        ("UF", W.copy_forward_without_positions, "nope", dict(alphabet_size=16)),
    ],
)
def test_a_compiled_job_loads_like_a_trained_one_and_answers_every_test_string(tmp_path, code, make, pe, overrides):
    task = get_task(code, **overrides)
    compiled = compile_program(make(task.symbols), pe, max_length=64)
    save_compiled_job(compiled, tmp_path, code, SHORT_BINS, "quick", seed=3, task_overrides=overrides)
    [folder] = job_folders(tmp_path, code)
    trained = load_trained_model(folder)
    assert (folder.name, trained.step, trained.task.vocab) == ("seed3", 0, task.vocab)
    assert trained.model.config == compiled.config.replace(vocab_size=len(task.vocab))
    assert exact_on_test_strings(trained, 4) == {f"{lo}-{hi}": 1.0 for lo, hi in trained.setup.bins}


def test_the_compile_command_writes_a_job_that_mechanism_finds_the_built_heads_in(tmp_path):
    program, out = tmp_path / "first_right.crasp", tmp_path / "compiled"
    program.write_text(generic_text(W.first_right))
    flags = ["--task", "NRFirst", "--lengths", "5", "--samples", "2", "--out", str(out)]
    assert main(["compile", str(program), "--pe", "ape", "--max-length", "64", *flags]) == 0
    trained = load_trained_model(out / "NRFirst" / "seed0")
    assert trained.setup.bins == [(2, 20), (21, 30), (31, 40)]  # the quick preset's, from NRFirst's shortest input
    assert set(exact_on_test_strings(trained, 2).values()) == {1.0}
    # The job's evaluation is recorded as training records one: length_gen reports it.
    length_gen.main(["--report-only", str(out)])
    [row] = json.loads((out / "summary.json").read_text())["rows"]
    assert [(b["lo"], b["mean"]) for b in row["bins"]] == [(2, 1.0), (21, 1.0), (31, 1.0)]
    assert row["observed"] == "passes" and row["agrees"] is True
    analysis = tmp_path / "mechanism"
    mechanism.main(
        ["--run", str(out), "--task", "NRFirst", "--examples-per-length", "2", "--periods", "3", "4"]
        + ["--sequences", "4", "--draws", "1", "--greedy-check", "4", "--out", str(analysis)]
    )
    records = [json.loads(line) for line in (analysis / "ablations.jsonl").read_text().splitlines()]
    [none] = [r for r in records if r["ablation"] == "none"]
    assert all(c["correct"] == c["total"] and c["greedy_disagreements"] == 0 for c in none["cells"])
    scores = json.loads((analysis / "scores.json").read_text())
    # The witness reads the previous token (prev through j = i - 1) and then the position after the
    # query's first occurrence: a previous-token head and an induction head, each attending fully.
    for score in ("previous_token", "induction"):
        assert np.max(scores[score]["mean"]) > 0.99, score


def test_a_max_length_below_the_test_strings_or_a_folder_of_another_run_is_refused_writing_nothing(tmp_path):
    program = tmp_path / "first_right.crasp"
    program.write_text(generic_text(W.first_right))
    short = tmp_path / "short"
    with pytest.raises(SystemExit, match="^error: .*--max-length of at least"):
        main(["compile", str(program), "--pe", "ape", "--max-length", "32", "--task", "NRFirst", "--out", str(short)])
    assert not short.exists()
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"preset": "quick"}')
    with pytest.raises(SystemExit, match="^error: --out .*run holds config.json and no compiled.json"):
        main(["compile", str(program), "--pe", "ape", "--max-length", "64", "--task", "NRFirst", "--out", str(run)])
    assert sorted(p.name for p in run.iterdir()) == ["config.json"]
