"""The lab's models as Hugging Face folders (crasplab.export): transformers loads each export into
the architecture it names, and TransformerLens wraps it in a TransformerBridge
(crasplab.export_lens); both compute the lab's logits up to float32 rounding, for every block and
position encoding the export accepts, a trained quick model and compiled programs; what has no
counterpart is refused, naming it. Runs with the `reference` extra (torch, transformers,
transformer-lens); without transformer-lens the TransformerLens checks fail, they do not skip."""

import json
import sys

import numpy as np
import pytest

from crasp import witnesses as W
from crasp.tasks import get_task
from crasplab.compiler import compile_program
from crasplab.compiler.job import save_compiled_job
from crasplab.export import ExportError, architecture_of, export, main, write_folder
from crasplab.export_lens import transformer_lens_bridge
from crasplab.models import ModelConfig
from crasplab.train.config import ModelSettings, TrainConfig
from crasplab.train.loop import Job, run_job
from crasplab.train.trained import job_folders, load_trained_model
from tests.tiny import random_tokens, tiny_config, tiny_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SHORT_BINS = TrainConfig(train_lengths=(1, 8), test_bins=((1, 8), (9, 12)))  # as tests/test_compiled_job.py
# Float32 rounding of two implementations that sum in different orders, relative to the logits' scale.
ROUNDING = 1e-5

# Every architecture the export writes, from the smallest model of each style (tests/tiny.py).
STYLES = {
    "GPT2LMHeadModel": dict(block="gpt2", position="ape"),
    "GPT2LMHeadModel, no positions": dict(block="gpt2", position="nope"),
    "GPT2LMHeadModel, untied": dict(block="gpt2", position="ape", tie_embeddings=False),
    "LlamaForCausalLM": dict(block="llama", position="rope", rope_base=500.0, tie_embeddings=False),
    "LlamaForCausalLM, grouped queries": dict(block="llama", position="rope", n_kv_heads=2),
    "Phi3ForCausalLM": dict(block="llama", position="rope", rope_dim=4, d_head=9, tie_embeddings=False),
    "SmolLM3ForCausalLM": dict(block="llama", position="nope", tie_embeddings=False),
}


def hugging_face_logits(folder, tokens_BxT) -> tuple[str, np.ndarray]:
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        logits = model(torch.tensor(np.asarray(tokens_BxT), dtype=torch.long)).logits
    return type(model).__name__, logits.numpy()


def lens_logits(folder, tokens_BxT) -> np.ndarray:
    bridge = transformer_lens_bridge(folder)
    with torch.no_grad():
        return bridge(torch.tensor(np.asarray(tokens_BxT), dtype=torch.long), return_type="logits").numpy()


def assert_same_logits(lab_BxTxV, exported_BxTxV) -> None:
    scale = max(1.0, float(np.abs(lab_BxTxV).max()))
    assert np.abs(exported_BxTxV - lab_BxTxV).max() <= ROUNDING * scale


@pytest.mark.parametrize("style", list(STYLES))
def test_every_architecture_loads_into_its_class_and_transformer_lens_with_the_lab_logits(style, tmp_path):
    model = tiny_model(**STYLES[style])
    write_folder(model, tuple(f"s{k}" for k in range(15)) + ("<pad>",), tmp_path / "hf")
    tokens = random_tokens((3, 20), seed=1)
    loaded_as, logits = hugging_face_logits(tmp_path / "hf", tokens)
    lab = np.asarray(model(tokens).logits_BxTxV)
    assert loaded_as == style.split(",")[0]
    assert_same_logits(lab, logits)
    assert_same_logits(lab, lens_logits(tmp_path / "hf", tokens))


def trained_job(tmp_path, pe: str):
    """A quick model trained for a few steps of the lab's tiny settings, its job folder and model."""
    job = Job(
        task_code="UR",
        seed=0,
        model=ModelSettings(pe=pe, n_layers=1, n_heads=2, d_model=16),
        train=tiny_config(max_steps=8, eval_every=8),
        task_overrides=dict(alphabet_size=6),
        out_dir=str(tmp_path / pe),
    )
    run_job(job)
    return tmp_path / pe, load_trained_model(tmp_path / pe)


def task_strings(task, length: int):
    return task.sample(np.random.default_rng(0), 4, length).tokens


@pytest.mark.parametrize("pe, architecture", [("ape", "GPT2LMHeadModel"), ("rope", "LlamaForCausalLM")])
def test_a_trained_job_folder_exports_to_the_lab_logits_in_transformers_and_transformer_lens(
    pe, architecture, tmp_path, capsys
):
    folder, trained = trained_job(tmp_path, pe)
    assert trained.step == 8
    assert main([str(folder), "--out", str(tmp_path / "hf")]) == 0
    assert f"({architecture}: config.json" in capsys.readouterr().out
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    if pe == "rope":  # the lab's RoPE models: base 500, an output matrix of their own
        assert config["rope_parameters"]["rope_theta"] == 500.0 and config["tie_word_embeddings"] is False
    tokens = task_strings(trained.task, trained.setup.bins[-1][1])  # the longest the position table holds
    loaded_as, logits = hugging_face_logits(tmp_path / "hf", tokens)
    lab = np.asarray(trained.model(tokens).logits_BxTxV)
    assert loaded_as == architecture
    assert_same_logits(lab, logits)
    strings = [" ".join(trained.task.vocab[k] for k in row) for row in tokens]
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tokenizer(strings[0])["input_ids"] == list(tokens[0])
    bridge = transformer_lens_bridge(tmp_path / "hf")
    # The lab's ids: the strings carry their <bos>, which TransformerLens neither adds nor strips by default.
    assert bridge.to_tokens(strings).tolist() == bridge.to_tokens(strings, prepend_bos=False).tolist()
    assert bridge.to_tokens(strings).tolist() == np.asarray(tokens).tolist()
    assert bridge.to_tokens(strings[0].removeprefix("<bos> "), prepend_bos=True).tolist() == [list(tokens[0])]
    with torch.no_grad():
        logits, cache = bridge.run_with_cache(bridge.to_tokens(strings))
    assert_same_logits(lab, logits.numpy())
    assert cache["blocks.0.attn.hook_pattern"].shape == (4, 2, tokens.shape[1], tokens.shape[1])  # 2 heads


@pytest.mark.parametrize(
    "code, make, pe, architecture",
    [
        ("UF", W.copy_forward_without_positions, "nope", "SmolLM3ForCausalLM"),
        ("UR", W.unique_right, "rope", "Phi3ForCausalLM"),
    ],
)
def test_a_compiled_job_folder_exports_to_the_lab_logits_and_answers_in_transformers_and_transformer_lens(
    code, make, pe, architecture, tmp_path
):
    task = get_task(code, alphabet_size=16)
    compiled = compile_program(make(task.symbols), pe, max_length=64)
    save_compiled_job(compiled, tmp_path / "run", code, SHORT_BINS, "quick", task_overrides=dict(alphabet_size=16))
    [folder] = job_folders(tmp_path / "run", code)
    assert export(folder, tmp_path / "hf") == architecture
    trained = load_trained_model(folder)
    tokens = task_strings(task, 8)
    loaded_as, logits = hugging_face_logits(tmp_path / "hf", tokens)
    lab = np.asarray(trained.model(tokens).logits_BxTxV)
    assert loaded_as == architecture
    assert_same_logits(lab, logits)
    assert np.array_equal(lab.argmax(-1), logits.argmax(-1))  # the program's answers, every position
    lens = lens_logits(tmp_path / "hf", tokens)
    assert_same_logits(lab, lens)
    assert np.array_equal(lab.argmax(-1), lens.argmax(-1))


@pytest.mark.parametrize(
    "config, named",
    [
        (dict(block="gpt2", position="alibi"), "ALiBi has no counterpart"),
        (dict(block="llama", position="ape"), "Llama blocks with a learned position table"),
        (dict(block="gpt2", position="ape", n_kv_heads=2), "GPT2LMHeadModel holds only n_heads heads"),
        (dict(block="gpt2", position="rope"), "GPT-2 blocks with rope positions"),
        (dict(block="gemma3", position="rope"), "gemma3 blocks are not exported"),
    ],
)
def test_what_has_no_counterpart_is_refused_naming_it(config, named):
    fields = dict(vocab_size=8, d_model=16, n_layers=1, n_heads=4, d_ff=32, max_positions=16)
    with pytest.raises(ExportError, match=named):
        architecture_of(ModelConfig(**(fields | config)))


def test_a_compiled_ape_program_and_bad_folders_are_one_error_line_each(tmp_path, capsys):
    task = get_task("UR", alphabet_size=16)
    compiled = compile_program(W.unique_right(task.symbols), "ape", max_length=64)
    save_compiled_job(compiled, tmp_path / "run", "UR", SHORT_BINS, "quick", task_overrides=dict(alphabet_size=16))
    [folder] = job_folders(tmp_path / "run", "UR")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    for argv, message in [
        ([str(folder), "--out", str(tmp_path / "hf")], "compile the program with --pe rope or --pe nope"),
        ([str(tmp_path / "run"), "--out", str(tmp_path / "hf")], "holds no model of the lab"),
        ([str(folder), "--out", str(tmp_path / "full")], "is not empty; give a new folder"),
    ]:
        with pytest.raises(SystemExit) as stopped:
            main(argv)
        error = str(stopped.value)
        assert error.startswith("error: ") and message in error and len(error.splitlines()) == 1
    assert not (tmp_path / "hf").exists() and [p.name for p in (tmp_path / "full").iterdir()] == ["notes.txt"]


def test_transformer_lens_is_refused_a_folder_without_an_export_and_names_a_missing_package(tmp_path, monkeypatch):
    with pytest.raises(ExportError, match="holds no exported model .no config.json.: write one with"):
        transformer_lens_bridge(tmp_path)
    monkeypatch.setitem(sys.modules, "transformer_lens.model_bridge.sources", None)  # as if not installed
    with pytest.raises(ExportError, match="needs transformer-lens.*pip install -e '.\\[reference\\]'"):
        transformer_lens_bridge(tmp_path)
