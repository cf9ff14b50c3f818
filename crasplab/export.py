"""A model of the lab as a Hugging Face model folder, for the tools researchers already use.

    python -m crasplab.export FOLDER --out DIR

FOLDER is a job folder (a trained one, `<run>/<task>/seed<k>`, or the one `python -m crasp compile
... --task TASK` writes) or a compiled folder (`crasp compile --out DIR`). DIR receives
config.json and model.safetensors, which `transformers.AutoModelForCausalLM.from_pretrained(DIR)`
loads into the architecture below, and tokenizer.json: the model's vocabulary, one token per
whitespace-separated symbol (`AutoTokenizer.from_pretrained(DIR)("<bos> a b <sep>")`), in the
lab's token ids. The exported model gives the lab's logits up to float32 rounding at positions
0, 1, ... (transformers' default position ids; the lab's APE training draws random offsets, which
a caller passes as position_ids). TransformerLens reads the folder through crasplab.export_lens.

The lab's block and position encoding decide the transformers class (ARCHITECTURES):
- GPT-2 blocks with a learned table (APE): GPT2LMHeadModel.
- GPT-2 blocks without positions (NoPE): GPT2LMHeadModel whose position table is all zeros, so
  that it adds nothing: exactly a NoPE model in GPT-2's code.
- Llama blocks with RoPE over the whole head (trained RoPE models: base 500, untied embeddings):
  LlamaForCausalLM.
- Llama blocks with RoPE over part of each head (compiled programs: the first 32 dims, base 100):
  Phi3ForCausalLM, Llama's blocks with partial_rotary_factor.
- Llama blocks without positions (compiled C-RASP[] programs): SmolLM3ForCausalLM with RoPE off in
  every layer (its no_rope_layers), Llama's blocks otherwise.
Everything else is refused, naming what has no counterpart: ALiBi (transformers has it only in
BLOOM and MPT, whose blocks differ from both of the lab's), a learned table in Llama blocks (a
compiled APE program), and the shapes GPT-2's code cannot hold (grouped-query attention, a head
width other than d_model / n_heads). The lab's interventions (head masks, attention biases) are
inputs of a forward pass, not part of a model, and are not exported.

Nothing here imports torch or transformers: the folder is written from numpy arrays.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from flax import nnx

from crasplab.errors import LabError, command_boundary
from crasplab.models import ModelConfig, Transformer
from crasplab.records.run_folder import check_new_folder

# Written into config.json: the version whose loading the tests check (the `reference` extra).
TRANSFORMERS_VERSION = "5.24.0"


class ExportError(LabError, ValueError):
    """A model the export cannot write, or a folder it cannot read or write; the message says why."""


@dataclass(frozen=True)
class LabModel:
    model: Transformer
    vocabulary: tuple[str, ...]  # the symbol of each token id
    source: str  # what the folder held, in words


def _params(model: Transformer) -> dict[str, np.ndarray]:
    """Every parameter by its dotted path (models.params' names: "layers.0.attn.q.kernel")."""
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    return {".".join(map(str, path)): np.asarray(variable.get_value(), np.float32) for path, variable in flat}


@dataclass(frozen=True)
class Refused:
    """Why no transformers class computes the lab's blocks with an encoding."""

    why: str


@dataclass(frozen=True)
class PositionExport:
    """What the exporter writes for one position encoding: the exporter's part of the encoding's
    row (crasp.position_encodings, models.positions), per family of the lab's blocks."""

    code: str
    gpt2: str | Refused  # the class for GPT-2 blocks
    llama: str | Refused  # the class for Llama blocks (Phi-3's where RoPE turns part of each head)


_ALIBI = Refused(
    "ALiBi has no counterpart: transformers has ALiBi only in BLOOM and MPT, whose blocks are "
    "neither GPT-2's nor Llama's (an extra norm after the embeddings, other MLPs)"
)
EXPORTS: dict[str, PositionExport] = {
    e.code: e
    for e in (
        PositionExport(
            "ape",
            gpt2="GPT2LMHeadModel",
            llama=Refused(
                "Llama blocks with a learned position table (a compiled APE program) have no counterpart: no "
                "transformers architecture adds a position table to RMSNorm and SwiGLU blocks; compile the "
                "program with --pe rope or --pe nope to export it"
            ),
        ),
        PositionExport(
            "rope",
            gpt2=Refused("GPT-2 blocks with rope positions have no counterpart in transformers"),
            llama="LlamaForCausalLM",
        ),
        PositionExport("nope", gpt2="GPT2LMHeadModel", llama="SmolLM3ForCausalLM"),
        PositionExport("alibi", gpt2=_ALIBI, llama=_ALIBI),
    )
}


def _class_or_refusal(entry: str | Refused) -> str:
    if isinstance(entry, Refused):
        raise ExportError(entry.why)
    return entry


def architecture_of(config: ModelConfig) -> str:
    """The transformers class that computes what `config` does, or ExportError naming what has none."""
    exported = EXPORTS[config.position]
    if config.block == "gpt2":
        architecture = _class_or_refusal(exported.gpt2)
        if config.kv_heads != config.n_heads or config.head_dim * config.n_heads != config.d_model:
            raise ExportError(
                f"GPT-2 blocks with {config.kv_heads} key/value heads for {config.n_heads} query heads of width "
                f"{config.head_dim} (d_model {config.d_model}): GPT2LMHeadModel holds only n_heads heads of "
                "width d_model / n_heads"
            )
        return architecture
    if config.block != "llama":
        # Gemma 3's blocks (norms after attention and the MLP, (1 + scale) RMSNorm) are not Llama's:
        # written as LlamaForCausalLM they would load and compute something else.
        raise ExportError(f"{config.block} blocks are not exported; the exporter writes GPT-2 and Llama blocks")
    architecture = _class_or_refusal(exported.llama)
    if config.qkv_bias:
        raise ExportError("Llama blocks with q/k/v biases (Qwen2's) are not exported")
    if architecture == "LlamaForCausalLM" and config.rotary_dim != config.head_dim:
        return "Phi3ForCausalLM"  # Llama's blocks with partial_rotary_factor
    return architecture


def _gpt2(config: ModelConfig, p: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    tensors = {"transformer.wte.weight": p["embed.embedding"]}
    # NoPE: a table of zeros adds nothing to the token embeddings.
    tensors["transformer.wpe.weight"] = p.get(
        "pos_embed.embedding", np.zeros((config.max_positions, config.d_model), np.float32)
    )
    for i in range(config.n_layers):
        lab, hf = f"layers.{i}", f"transformer.h.{i}"
        qkv = ("q", "k", "v")
        # GPT-2's Conv1D keeps weights as (in, out), as the lab's kernels are.
        tensors |= {
            f"{hf}.ln_1.weight": p[f"{lab}.attn_norm.scale"],
            f"{hf}.ln_1.bias": p[f"{lab}.attn_norm.bias"],
            f"{hf}.attn.c_attn.weight": np.concatenate([p[f"{lab}.attn.{x}.kernel"] for x in qkv], axis=1),
            f"{hf}.attn.c_attn.bias": np.concatenate([p[f"{lab}.attn.{x}.bias"] for x in qkv]),
            f"{hf}.attn.c_proj.weight": p[f"{lab}.attn.o.kernel"],
            f"{hf}.attn.c_proj.bias": p[f"{lab}.attn.o.bias"],
            f"{hf}.ln_2.weight": p[f"{lab}.mlp_norm.scale"],
            f"{hf}.ln_2.bias": p[f"{lab}.mlp_norm.bias"],
            f"{hf}.mlp.c_fc.weight": p[f"{lab}.mlp.fc.kernel"],
            f"{hf}.mlp.c_fc.bias": p[f"{lab}.mlp.fc.bias"],
            f"{hf}.mlp.c_proj.weight": p[f"{lab}.mlp.proj.kernel"],
            f"{hf}.mlp.c_proj.bias": p[f"{lab}.mlp.proj.bias"],
        }
    tensors |= {"transformer.ln_f.weight": p["final_norm.scale"], "transformer.ln_f.bias": p["final_norm.bias"]}
    if not config.tie_embeddings:
        tensors["lm_head.weight"] = p["lm_head.kernel"].T
    settings = dict(
        n_embd=config.d_model,
        n_layer=config.n_layers,
        n_head=config.n_heads,
        n_inner=config.d_ff,
        n_positions=config.max_positions,
        activation_function="gelu_new",  # the lab's GELU, tanh approximation
        layer_norm_epsilon=config.norm_eps,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        scale_attn_weights=True,
    )
    return settings, tensors


def _llama_family(config: ModelConfig, p: dict[str, np.ndarray], fused: bool) -> tuple[dict, dict[str, np.ndarray]]:
    """Llama's tensors (q/k/v and gate/up apart), or Phi-3's (`fused`: qkv_proj and gate_up_proj).
    torch's Linear keeps weights as (out, in): the lab's kernels transposed."""
    tensors = {"model.embed_tokens.weight": p["embed.embedding"], "model.norm.weight": p["final_norm.scale"]}
    for i in range(config.n_layers):
        lab, hf = f"layers.{i}", f"model.layers.{i}"
        q, k, v = (p[f"{lab}.attn.{x}.kernel"].T for x in ("q", "k", "v"))
        gate, up = p[f"{lab}.mlp.gate.kernel"].T, p[f"{lab}.mlp.up.kernel"].T
        tensors |= {
            f"{hf}.input_layernorm.weight": p[f"{lab}.attn_norm.scale"],
            f"{hf}.post_attention_layernorm.weight": p[f"{lab}.mlp_norm.scale"],
            f"{hf}.self_attn.o_proj.weight": p[f"{lab}.attn.o.kernel"].T,
            f"{hf}.mlp.down_proj.weight": p[f"{lab}.mlp.down.kernel"].T,
        }
        if fused:  # Phi-3 splits gate_up_proj's output in two halves, the gate first
            tensors[f"{hf}.self_attn.qkv_proj.weight"] = np.concatenate([q, k, v])
            tensors[f"{hf}.mlp.gate_up_proj.weight"] = np.concatenate([gate, up])
        else:
            tensors |= {f"{hf}.self_attn.{x}_proj.weight": w for x, w in zip("qkv", (q, k, v))}
            tensors |= {f"{hf}.mlp.gate_proj.weight": gate, f"{hf}.mlp.up_proj.weight": up}
    tensors["lm_head.weight"] = (p["embed.embedding"] if config.tie_embeddings else p["lm_head.kernel"].T).copy()
    rope = dict(rope_type="default", rope_theta=float(config.rope_base))
    if config.rotary_dim != config.head_dim:
        # transformers takes int(head_dim * factor) dims: half a dim more than rotary_dim survives the rounding.
        rope["partial_rotary_factor"] = (config.rotary_dim + 0.5) / config.head_dim
    settings = dict(
        hidden_size=config.d_model,
        intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.kv_heads,
        head_dim=config.head_dim,
        hidden_act="silu",
        max_position_embeddings=config.max_positions,
        rms_norm_eps=config.norm_eps,
        rope_parameters=rope,
        attention_bias=False,
        attention_dropout=0.0,
        mlp_bias=False,
    )
    return settings, tensors


def hugging_face_model(model: Transformer, vocabulary: tuple[str, ...]) -> tuple[dict, dict[str, np.ndarray]]:
    """config.json's content and the tensors of model.safetensors for `model`, whose token ids
    stand for `vocabulary`: its <pad>, <bos> and <eos> are the config's special tokens (None where
    it has none: an architecture's own defaults name ids of its pretrained vocabulary)."""
    config, params = model.config, _params(model)
    architecture = architecture_of(config)
    if architecture == "GPT2LMHeadModel":
        settings, tensors = _gpt2(config, params)
        model_type = "gpt2"
    else:
        settings, tensors = _llama_family(config, params, fused=architecture == "Phi3ForCausalLM")
        model_type = {"LlamaForCausalLM": "llama", "Phi3ForCausalLM": "phi3", "SmolLM3ForCausalLM": "smollm3"}[
            architecture
        ]
        if architecture == "SmolLM3ForCausalLM":
            settings |= dict(no_rope_layers=[0] * config.n_layers, use_sliding_window=False)
        if architecture == "Phi3ForCausalLM":
            settings |= dict(resid_pdrop=0.0, embd_pdrop=0.0, sliding_window=None)
    written = dict(
        architectures=[architecture],
        model_type=model_type,
        vocab_size=config.vocab_size,
        tie_word_embeddings=config.tie_embeddings,
        dtype="float32",
        use_cache=True,
        transformers_version=TRANSFORMERS_VERSION,
        **{f"{name}_token_id": _id(vocabulary, f"<{name}>") for name in ("pad", "bos", "eos")},
        **settings,
    )
    return written, {name: np.ascontiguousarray(array, np.float32) for name, array in tensors.items()}


def _id(vocabulary: tuple[str, ...], symbol: str) -> int | None:
    return vocabulary.index(symbol) if symbol in vocabulary else None


def _tokenizer(vocabulary: tuple[str, ...]) -> str:
    """tokenizer.json: one token per whitespace-separated symbol, the ids the lab's."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({symbol: k for k, symbol in enumerate(vocabulary)}, unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer.to_str()


def read_lab_model(folder: Path) -> LabModel:
    """The model of a job folder (trained or compiled with a task) or of a compiled folder."""
    folder = Path(folder)
    if (folder / "job.json").is_file():
        from crasplab.train.trained import TrainedModelError, load_trained_model

        try:
            trained = load_trained_model(folder)
        except TrainedModelError as error:
            raise ExportError(str(error)) from None
        return LabModel(trained.model, tuple(trained.task.vocab), f"job {trained.job.task_code}, step {trained.step}")
    from crasplab.compiler.folder import DESCRIPTION_FILE, load_compiled

    if (folder / DESCRIPTION_FILE).is_file():
        loaded = load_compiled(folder)
        return LabModel(loaded.model, tuple(loaded.program.alphabet), f"compiled program {loaded.program.title}")
    raise ExportError(
        f"{folder} holds no model of the lab: give a job folder (<run folder>/<task>/seed<k>, with job.json "
        "and checkpoint.npz) or a folder `python -m crasp compile ... --out DIR` wrote (with compiled.json)"
    )


def export(folder: Path, out: Path) -> str:
    """Write the Hugging Face folder of the model in `folder` into `out` (absent or empty); return its class."""
    out = check_new_folder(out)
    lab = read_lab_model(folder)
    try:
        return write_folder(lab.model, lab.vocabulary, out, f"{folder}: {lab.source}")
    except OSError as error:
        raise ExportError(
            f"--out {out}: cannot write {error.filename or out} ({error.strerror}); give a new folder in a "
            "writable place"
        ) from None


def write_folder(model: Transformer, vocabulary: tuple[str, ...], out: Path, source: str = "") -> str:
    """Write the Hugging Face folder of `model` (its token ids standing for `vocabulary`) into `out`;
    return its class. `source` goes into config.json as crasplab_source."""
    from safetensors.numpy import save_file

    config, tensors = hugging_face_model(model, vocabulary)
    if source:
        config["crasplab_source"] = source
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "tokenizer.json").write_text(_tokenizer(vocabulary))
    # The special tokens config.json names by id, by symbol: a tokenizer pads with <pad> (TransformerLens's
    # to_tokens always pads) and knows <bos> and <eos>, but adds none of them to what it encodes.
    specials = {f"{name}_token": f"<{name}>" for name in ("pad", "bos", "eos") if f"<{name}>" in vocabulary}
    tokenizer_config = dict(tokenizer_class="PreTrainedTokenizerFast", **specials)
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    # config.json last: a folder without it (an export killed midway) is no model transformers loads.
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return config["architectures"][0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m crasplab.export",
        description=__doc__.split("\n\n")[0]
        + " Writes config.json, model.safetensors and tokenizer.json; transformers loads the folder with "
        "AutoModelForCausalLM.from_pretrained (docs/export.md).",
    )
    parser.add_argument(
        "folder",
        type=Path,
        help="a job folder (<run folder>/<task>/seed<k>, trained or written by `crasp compile --task`) "
        "or a compiled folder (`crasp compile --out DIR`)",
    )
    parser.add_argument("--out", type=Path, required=True, help="the Hugging Face folder to write: new or empty")
    args = parser.parse_args(argv)
    with command_boundary():  # every error of the folder, its files or the target: one `error:` line, exit 1
        architecture = export(args.folder, args.out)
    print(f"written: {args.out} ({architecture}: config.json, model.safetensors, tokenizer.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
