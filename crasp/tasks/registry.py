"""The one registry of tasks: user-facing codes (the papers' names) -> task classes."""

import dataclasses

from crasp.tasks.algorithmic import Addition, BinaryMajority, BinaryMajorityInterleave, Majority, Parity, Sort
from crasp.tasks.base import ParameterError, Task, UnknownTaskError
from crasp.tasks.copying import (
    Copy,
    NonUniqueCopyBackward,
    NonUniqueCopyForward,
    RepeatCopy,
    UniqueCopyBackward,
    UniqueCopyForward,
)
from crasp.tasks.retrieval import (
    Retrieval,
    RetrieveLeftOfFirst,
    RetrieveLeftOfLast,
    RetrieveRightOfFirst,
    RetrieveRightOfLast,
    UniqueRetrieveLeft,
    UniqueRetrieveRight,
)

TASK_CLASSES: tuple[type[Task], ...] = (
    UniqueRetrieveLeft,
    UniqueRetrieveRight,
    RetrieveLeftOfFirst,
    RetrieveRightOfFirst,
    RetrieveLeftOfLast,
    RetrieveRightOfLast,
    UniqueCopyForward,
    UniqueCopyBackward,
    NonUniqueCopyForward,
    NonUniqueCopyBackward,
    BinaryMajority,
    Majority,
    Sort,
    RepeatCopy,
    Parity,
    Addition,
    BinaryMajorityInterleave,
)
TASKS: dict[str, type[Task]] = {cls.code: cls for cls in TASK_CLASSES}
TASK_CODES: tuple[str, ...] = tuple(TASKS)
# The ten tasks of the retrieval/copying paper (Veitsman et al. 2025), in registry order; repeat copy
# is Huang et al.'s copying over {a, b}, not one of them.
RETRIEVAL_CODES: tuple[str, ...] = tuple(cls.code for cls in TASK_CLASSES if issubclass(cls, Retrieval))
COPYING_CODES: tuple[str, ...] = tuple(
    cls.code for cls in TASK_CLASSES if issubclass(cls, Copy) and cls is not RepeatCopy
)
RETRIEVAL_AND_COPYING: tuple[str, ...] = RETRIEVAL_CODES + COPYING_CODES
# A task predicted not to generalize -> its control (Task.control).
CONTROLS: dict[str, str] = {cls.code: cls.control for cls in TASK_CLASSES if cls.control}
# The tasks that read against the string's order (the left neighbour, the copy in reverse), which
# the paper finds harder than their right/forward twins.
LEFT_OR_BACKWARD: frozenset[str] = frozenset(
    cls.code for cls in TASK_CLASSES if getattr(cls, "side", None) == "left" or getattr(cls, "backward", False)
)
# Class names are accepted as aliases of the codes (get_task("UniqueCopyForward") is UF).
_ALIASES = {cls.__name__: cls for cls in TASK_CLASSES}


def parameters_of(cls: type[Task]) -> dict:
    """The sampler parameters of a task class with their defaults."""
    return {field.name: field.default for field in dataclasses.fields(cls)}


def get_task(code: str, **params) -> Task:
    """The task with this code (or class name), with sampler parameters overridden by keyword."""
    if not isinstance(code, str):
        raise UnknownTaskError(
            f"a task code is a string, got {code!r} ({type(code).__name__}); accepted codes: {', '.join(TASK_CODES)}"
        )
    cls = TASKS.get(code) or _ALIASES.get(code)
    if cls is None:
        raise UnknownTaskError(f"unknown task {code!r}; accepted codes: {', '.join(TASK_CODES)}")
    accepted = parameters_of(cls)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        shown = ", ".join(f"{name} (default {default!r})" for name, default in accepted.items()) or "none"
        raise ParameterError(f"task {cls.code}: unknown parameter(s) {', '.join(unknown)}; accepted: {shown}")
    return cls(**params)
