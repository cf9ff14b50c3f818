"""Parameters by dotted path ("layers.0.attn.q.kernel"), for weight loaders and inspection."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def _param_variables(model: nnx.Module) -> dict[str, nnx.Param]:
    return {
        ".".join(str(part) for part in path): node
        for path, node in nnx.iter_graph(model)
        if isinstance(node, nnx.Param)
    }


def param_shapes(model: nnx.Module) -> dict[str, tuple[int, ...]]:
    """Every parameter's dotted path and shape."""
    return {path: tuple(variable.get_value().shape) for path, variable in sorted(_param_variables(model).items())}


def count_params(model: nnx.Module) -> int:
    """Number of scalars in the model's parameters (compare with models.parameter_count(config))."""
    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)))


def set_params(model: nnx.Module, arrays: Mapping[str, object], *, require_all: bool = False) -> None:
    """Assign arrays to parameters by dotted path, checking every path and shape before any write.

    Arrays are cast to the parameter's dtype (float32). require_all=True also fails when some
    parameter of the model is not among `arrays` (a loader that must cover the whole model).
    """
    variables = _param_variables(model)
    problems = []
    for path, array in arrays.items():
        if path not in variables:
            close = difflib.get_close_matches(path, variables, n=3)
            problems.append(f"unknown parameter path {path!r}" + (f" (did you mean {close}?)" if close else ""))
        elif tuple(np.shape(array)) != variables[path].get_value().shape:
            problems.append(
                f"{path}: got shape {tuple(np.shape(array))}, the model expects {variables[path].get_value().shape}"
            )
    if require_all:
        problems += [f"{path}: not given" for path in sorted(set(variables) - set(arrays))]
    if problems:
        raise ValueError("set_params: " + "; ".join(problems) + ". See models.param_shapes(model) for every path.")
    for path, array in arrays.items():
        variables[path][...] = jnp.asarray(array, variables[path][...].dtype)
