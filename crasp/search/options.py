"""The search's options and the errors a user can make with them (light: the command line
builds its parser from these without loading the search)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

RESULTS_PATH = Path(__file__).resolve().parent.parent / "search_results.json"
LARGEST_SIZE = 30


class SearchError(ValueError):
    """Base class of the errors a user can make with the search's options."""


@dataclass(frozen=True)
class SampleOptions:
    alphabet: int = 3  # task symbols the strings use (tasks with an alphabet_size)
    exhaustive_length: int = 3  # every string with input length up to this
    random_strings: int = 24
    random_lengths: tuple[int, ...] = (4, 5, 6, 7, 8, 10)
    seed: int = 0

    def __post_init__(self):
        if not 2 <= self.alphabet <= 6:
            raise SearchError(f"--sample-alphabet must be an integer from 2 to 6, got {self.alphabet}")
        if not 1 <= self.exhaustive_length <= 6:
            raise SearchError(f"--exhaustive-length must be an integer from 1 to 6, got {self.exhaustive_length}")
        if not 0 <= self.random_strings <= 1000:
            raise SearchError(f"--random-strings must be an integer from 0 to 1000, got {self.random_strings}")


@dataclass(frozen=True)
class SearchOptions:
    max_size: int = 10
    time_limit: float = 600.0  # CPU seconds of the searching process, for the whole search (verification included)
    max_behaviours: int = 50_000_000
    memory_gib: float = 4.0
    max_rounds: int = 30
    sample: SampleOptions = field(default_factory=SampleOptions)

    def __post_init__(self):
        if not 1 <= self.max_size <= LARGEST_SIZE:
            raise SearchError(f"--max-size must be an integer from 1 to {LARGEST_SIZE}, got {self.max_size}")
        if not self.time_limit > 0:
            raise SearchError(f"--time-limit must be a positive number of seconds, got {self.time_limit:g}")
        if self.max_behaviours < 1:
            raise SearchError(f"--max-behaviours must be a positive integer, got {self.max_behaviours}")
        if not self.memory_gib > 0:
            raise SearchError(f"--memory must be a positive number of GiB, got {self.memory_gib:g}")
