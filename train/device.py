"""Which of the two training paths this process takes, and the one setting that rehearses the
accelerator's path on a CPU.

The CPU path runs each job in its own single-threaded process pinned to a core
(crasplab.train.workers). The accelerator path runs in this process: the seeds of a task as one
vmapped stack, several stacks at once on the one device, their batches sampled ahead by helper
processes (crasplab.train.accelerator). A machine with an accelerator is rare and lent briefly,
and the accelerator path once crashed at its first step on the first GPU the lab was lent because
nothing had ever run it. So the test suite runs it on the CPU, end to end, with

    CRASPLAB_ACCELERATOR_PATH=rehearse

set (or `rehearsing_accelerator_path()` in a test): every branch that a GPU would take is then
taken here, only slower. Every place that chooses between the two paths asks `accelerator_path()`,
never the JAX backend directly, so that nothing escapes the rehearsal.
"""

from __future__ import annotations

import os

from crasplab.errors import LabError
from crasplab.train.environment import environment_variable

ACCELERATOR_PATH_ENV = "CRASPLAB_ACCELERATOR_PATH"
REHEARSE = "rehearse"


class AcceleratorPathError(LabError, ValueError):
    """CRASPLAB_ACCELERATOR_PATH holds a value other than the one it accepts."""


def accelerator_path() -> bool:
    """True on an accelerator, and on a CPU told to rehearse the accelerator's path."""
    value = os.environ.get(ACCELERATOR_PATH_ENV, "")
    if value not in ("", REHEARSE):
        raise AcceleratorPathError(
            f"{ACCELERATOR_PATH_ENV}={value!r}: the accepted value is {REHEARSE!r} (take the accelerator's "
            "path on a CPU), or leave it unset (the path follows the JAX backend)"
        )
    if value == REHEARSE:
        return True
    import jax  # here: the command line's flags parse without loading JAX

    return jax.default_backend() != "cpu"


def path_name() -> str:
    """How a run's records name the path it took."""
    import jax

    if jax.default_backend() != "cpu":
        return f"the {jax.default_backend()} device"
    return "the accelerator path rehearsed on the CPU" if accelerator_path() else "the CPU"


def rehearsing_accelerator_path():
    """Within the block, and in the processes it starts, take the accelerator's path."""
    return environment_variable(ACCELERATOR_PATH_ENV, REHEARSE)
