"""Forward and backward copying in the realistic experiments, and the formal copying task each one
is an instance of: a copy whose tokens are unique is UF (forward) or UB (backward); one whose
tokens repeat is NF or NB, which no C-RASP[pos] program expresses."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Direction:
    name: str
    reverse: bool
    unique_task: str  # the formal task where every copied token occurs once
    non_unique_task: str  # the formal task where copied tokens repeat

    def arrange(self, sequence: list) -> list:
        """`sequence` in the order this direction copies it."""
        return list(reversed(sequence)) if self.reverse else list(sequence)


FORWARD = Direction("forward", reverse=False, unique_task="UF", non_unique_task="NF")
BACKWARD = Direction("backward", reverse=True, unique_task="UB", non_unique_task="NB")
DIRECTIONS = {direction.name: direction for direction in (FORWARD, BACKWARD)}
