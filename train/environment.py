"""A setting that reaches the processes a block of code starts, through the environment: a child
copies the environment as it starts, so the value set here is what every process started within
the block sees (training workers, sampling helpers, Ray tasks given the workers' environment)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def environment_variable(name: str, value: str) -> Iterator[None]:
    """`name` set to `value` within the block, and as it was (or unset) after."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before
