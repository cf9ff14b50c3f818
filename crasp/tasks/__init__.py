"""The task library: retrieval and copying (Veitsman et al. 2025) and the algorithmic tasks of
Huang et al. 2025, each with a seeded sampler, the exact reference answer and literature claims.

    from crasp.tasks import get_task
    task = get_task("UR", alphabet_size=62)
    examples = task.sample(np.random.default_rng(0), n=64, length=20)
"""

from crasp.tasks.base import (
    BOS_ID,
    BOS_SYMBOL,
    EOS_ID,
    EOS_SYMBOL,
    MAX_ALPHABET_SIZE,
    MAX_LENGTH,
    MAX_SAMPLE_ELEMENTS,
    NUM_SPECIALS,
    PAD_ID,
    PROGRAM_SPECIALS,
    SEP_ID,
    SEP_SYMBOL,
    SPECIAL_TOKENS,
    UNBOUNDED,
    Examples,
    InvalidInputError,
    ParameterError,
    SamplerError,
    Task,
    TaskError,
    UnknownTaskError,
    symbol_names,
)
from crasp.tasks.literature import FRAGMENT_NAMES, Claim, Expressibility
from crasp.tasks.registry import (
    CONTROLS,
    COPYING_CODES,
    LEFT_OR_BACKWARD,
    RETRIEVAL_AND_COPYING,
    RETRIEVAL_CODES,
    TASK_CLASSES,
    TASK_CODES,
    TASKS,
    get_task,
    parameters_of,
)

__all__ = [
    "BOS_ID",
    "BOS_SYMBOL",
    "EOS_ID",
    "EOS_SYMBOL",
    "MAX_ALPHABET_SIZE",
    "MAX_LENGTH",
    "MAX_SAMPLE_ELEMENTS",
    "NUM_SPECIALS",
    "PAD_ID",
    "PROGRAM_SPECIALS",
    "SEP_ID",
    "SEP_SYMBOL",
    "SPECIAL_TOKENS",
    "UNBOUNDED",
    "Examples",
    "InvalidInputError",
    "ParameterError",
    "SamplerError",
    "Task",
    "TaskError",
    "UnknownTaskError",
    "symbol_names",
    "FRAGMENT_NAMES",
    "Claim",
    "Expressibility",
    "CONTROLS",
    "COPYING_CODES",
    "LEFT_OR_BACKWARD",
    "RETRIEVAL_AND_COPYING",
    "RETRIEVAL_CODES",
    "TASK_CLASSES",
    "TASK_CODES",
    "TASKS",
    "get_task",
    "parameters_of",
]
