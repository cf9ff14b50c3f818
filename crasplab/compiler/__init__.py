"""C-RASP programs compiled into the weights of the lab's own Transformer.

    from crasplab.compiler import compile_program
    compiled = compile_program(program, pe="ape", max_length=4096)   # crasp.program.Program
    model = compiled.model()                  # a crasplab.models.Transformer, llama blocks
    print(compiled.listing())                 # what every head and MLP computes, by definition
    table = output_table(compiled, model, tokens_BxT)   # crasplab.compiler.run: logits > 0

Program to plan: crasplab.compiler.lower (the supported subset and its constructions); plan to
weights: crasplab.compiler.weights; running, probing and scoring: crasplab.compiler.run;
checkpoints: crasplab.compiler.folder; `python -m crasp compile`: crasplab.compiler.command.
The model needs no special case at run time: config fields and weights only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flax import nnx

from crasp.program import Program
from crasp.syntax import parse
from crasplab.compiler.lower import CompileError, Lowering
from crasplab.compiler.plan import Affine, Feature
from crasplab.compiler.weights import PlacedHead, build_weights
from crasplab.models import ModelConfig, Transformer, parameter_count, set_params

DEFAULT_MAX_LENGTH = 16384


@dataclass
class CompiledProgram:
    program: Program
    pe: str
    max_length: int  # the longest string (in tokens) the thresholds and position codes are built for
    config: ModelConfig
    params: dict[str, np.ndarray]
    features: list[Feature]  # one per residual dimension
    definitions: dict[str, tuple[str, object]]  # "prev[a]" -> ("Boolean", Affine) or ("Count", lower.Count)
    columns: list[Affine]  # the output table's column for each symbol
    heads: list[PlacedHead]
    steps: list

    def model(self, dtype: str | None = None) -> Transformer:
        """The Transformer with the compiled weights (in `dtype` instead of the compiled one if given)."""
        config = self.config if dtype is None else self.config.replace(dtype=dtype)
        model = Transformer(config, rngs=nnx.Rngs(0))
        set_params(model, self.params, require_all=True)
        return model

    @property
    def parameters(self) -> int:
        return parameter_count(self.config)

    def listing(self) -> str:
        from crasplab.compiler.listing import listing

        return listing(self)


def compile_program(
    program: Program,
    pe: str,
    max_length: int = DEFAULT_MAX_LENGTH,
    dtype: str = "float32",
    places: dict[str, str] | None = None,
) -> CompiledProgram:
    """The transformer that computes `program`'s output table at every position of strings up to
    `max_length` tokens. `places` maps definition names to where they are written (errors cite them)."""
    if not (isinstance(max_length, int) and max_length >= 2):
        raise CompileError(f"max_length must be an integer >= 2, got {max_length!r}")
    lowering = Lowering(program, pe, max_length, places)
    columns = lowering.lower_program()
    config, params, heads = build_weights(lowering, columns, dtype)
    return CompiledProgram(
        program, pe, max_length, config, params, lowering.features, lowering.definitions, columns, heads, lowering.steps
    )


def definition_places(text: str, source: str) -> dict[str, str]:
    """Definition name -> "file:line" for the definitions of a program text."""
    places = {}
    for number, line in enumerate(text.split("\n"), start=1):
        head = line.split(":=", 1)[0].strip() if ":=" in line and line[:1] not in (" ", "\t") else ""
        if head:
            places[head.split("[")[0].strip()] = f"{source}:{number}"
    return places


def compile_text(text: str, source: str, pe: str, symbols=None, **options) -> CompiledProgram:
    """Parse and compile a .crasp text; errors name the definition and its line."""
    return compile_program(parse(text, source, symbols), pe, places=definition_places(text, source), **options)


__all__ = ["CompileError", "CompiledProgram", "compile_program", "compile_text", "definition_places"]
