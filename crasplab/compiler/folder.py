"""A compiled program on disk: the folder `python -m crasp compile --out DIR` writes.

    DIR/compiled.json   the program (text form, over the alphabet it was compiled for), the
                        position encoding, max_length and the ModelConfig's fields
    DIR/checkpoint.npz  the parameters, in train.checkpoint's format (what training writes)
    DIR/listing.txt     what every head and MLP computes, by definition

`load_compiled(DIR)` builds the Transformer from the config and reads the checkpoint through the
same `load_checkpoint` that trained models use, into a template of the model's parameters.
The vocabulary is the program's alphabet in its order (no <pad>).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from flax import nnx

from crasp.program import Program, print_program
from crasp.syntax import parse
from crasplab.compiler import CompiledProgram
from crasplab.errors import LabError
from crasplab.models import ModelConfig, Transformer
from crasplab.records.files import read_json_object, write_json, write_text
from crasplab.train.checkpoint import encode_checkpoint, load_checkpoint, write_encoded

DESCRIPTION_FILE, CHECKPOINT_FILE, LISTING_FILE = "compiled.json", "checkpoint.npz", "listing.txt"


class CompiledFolderError(LabError, ValueError):
    """A folder that holds no compiled program."""


@dataclass(frozen=True)
class LoadedProgram:
    model: Transformer
    program: Program
    pe: str
    max_length: int


def compiled_checkpoint(compiled: CompiledProgram, source: str) -> bytes:
    """The bytes of the folder's checkpoint.npz, compressed (the weights are mostly zeros)."""
    return encode_checkpoint(nnx.state(compiled.model(), nnx.Param), {"compiled_from": source})


def save_compiled(compiled: CompiledProgram, out: Path, source: str, checkpoint: bytes | None = None) -> None:
    """Write the folder; `checkpoint` is compiled_checkpoint's bytes when the caller has them."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_encoded(out / CHECKPOINT_FILE, checkpoint or compiled_checkpoint(compiled, source))
    write_text(out / LISTING_FILE, compiled.listing() + "\n")
    write_json(
        out / DESCRIPTION_FILE,
        {
            "source": source,
            "program": print_program(compiled.program),
            "pe": compiled.pe,
            "max_length": compiled.max_length,
            "parameters": compiled.parameters,
            "config": dataclasses.asdict(compiled.config),
        },
    )


def load_compiled(folder: Path) -> LoadedProgram:
    folder = Path(folder)
    for name in (DESCRIPTION_FILE, CHECKPOINT_FILE):
        if not (folder / name).is_file():
            raise CompiledFolderError(
                f"{folder} has no {name}; give a folder written by `python -m crasp compile PROGRAM --pe PE --out DIR`"
            )
    description = read_json_object(
        folder / DESCRIPTION_FILE,
        "compile the program into this folder again (python -m crasp compile PROGRAM --pe PE --out DIR)",
        required=("config", "program", "source", "pe", "max_length"),
    )
    model = Transformer(ModelConfig(**description["config"]), rngs=nnx.Rngs(0))
    params = nnx.state(model, nnx.Param)
    params, _ = load_checkpoint(folder / CHECKPOINT_FILE, params)
    nnx.update(model, params)
    program = parse(description["program"], description["source"])
    return LoadedProgram(model, program, description["pe"], description["max_length"])


__all__ = ["CompiledFolderError", "LoadedProgram", "compiled_checkpoint", "load_compiled", "save_compiled"]
