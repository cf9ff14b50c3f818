"""What the compiler does with each position encoding: the compiler's part of an encoding's row.

The row's identity (name, theorem) is crasp.position_encodings and its model side (learned table,
rotation, score bias) models.positions; this table says which programs the compiler turns into
weights for a model of that encoding, or why it builds none. How a supported operation is built
follows from the model side: the local relation through the position table's codes or through the
rotation, the first position from the table or from the symbol <bos>. A test keeps the table
complete and true to what the lowering compiles (tests/test_position_encoding_facts.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from crasp.fragment import Fragment


@dataclass(frozen=True)
class Compilation:
    code: str  # as crasp.position_encodings and models.positions write it
    # The programs the compiler builds for the encoding: C-RASP[] plus the local relation j = i - c
    # (a learned table or a rotation singles out the key c positions back) and MOD (only a learned
    # table gives absolute positions). None: it builds none, and `refused` says why.
    fragment: Fragment | None
    refused: str = ""


COMPILATIONS: dict[str, Compilation] = {
    c.code: c
    for c in (
        Compilation("ape", Fragment(local=True, periodic=True)),
        Compilation("rope", Fragment(local=True, periodic=False)),
        Compilation("nope", Fragment(local=False, periodic=False)),
        Compilation(
            "alibi",
            None,
            refused="its bias on the attention scores would tilt the uniform heads whose averages are counts",
        ),
    )
}
COMPILED_ENCODINGS: tuple[str, ...] = tuple(code for code, c in COMPILATIONS.items() if c.fragment is not None)
