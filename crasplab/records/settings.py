"""The settings of an experiment run: a frozen dataclass that checks itself when it is built, and
the config.json of its run folder, written from it and read back through it.

    @dataclass(frozen=True)
    class MySettings(ExperimentSettings):
        lengths: tuple[int, ...] = (10, 20)
        threshold: float = 0.9

        def check(self) -> None:
            self.require(all(n >= 1 for n in self.lengths), "lengths", "input lengths of at least 1")

Before `check` runs, every field is checked against its annotation (int, float, str, bool, a
tuple of them, `X | None`, or a nested settings dataclass with `from_dict`): a float must be
finite, a bool is not an int, a list becomes a tuple (JSON has no tuples), and a list setting may
not hold the same value twice (it would evaluate the same prompts twice). So a hand-edited
config.json ("tasks": "UF", "threshold": "high", a missing seed) is refused as clearly as a
mistyped flag, naming the setting, what was given and what is accepted.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from typing import Any, ClassVar

from crasplab.errors import LabError


class SettingsError(LabError, ValueError):
    """A setting of the wrong kind or out of range: names it, what was given and what is accepted."""


class ExperimentSettings:
    """Base of an experiment's frozen settings dataclass; subclasses add `check()`."""

    # Settings that change how a run goes but not its numbers (how many prompts are decoded
    # together): a resumed run may change them, and a config.json written before they were
    # recorded is read with their defaults.
    RESULTS_UNCHANGED: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for field in dataclasses.fields(self):
            value = _conform(getattr(self, field.name), hints[field.name], field.name)
            object.__setattr__(self, field.name, value)  # frozen: the one place a field is set after __init__
        self.check()

    def check(self) -> None:
        """Ranges and relations between settings; call self.require for each."""

    def require(self, condition: bool, name: str, accepted: str) -> None:
        if not condition:
            raise SettingsError(f"setting {name} = {_shown(getattr(self, name))} is not accepted; expected {accepted}")

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def to_config(self) -> dict:
        """The settings as config.json stores them (tuples become lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def recorded(cls) -> tuple[str, ...]:
        """The settings every config.json of this experiment holds."""
        return tuple(field.name for field in dataclasses.fields(cls) if field.name not in cls.RESULTS_UNCHANGED)

    @classmethod
    def upgrade_config(cls, values: dict) -> dict:
        """A config.json that an earlier version of the experiment wrote, as this one writes it
        (an experiment whose settings changed says how; unchanged here)."""
        return values

    @classmethod
    def from_config(cls, values: dict):
        """The settings a config.json holds (other keys, such as the model's path, are ignored)."""
        missing = [name for name in cls.recorded() if name not in values]
        if missing:
            raise SettingsError(f"missing setting(s) {', '.join(missing)}")
        return cls(**{field.name: values[field.name] for field in dataclasses.fields(cls) if field.name in values})


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, tuple)) else repr(value)


def _conform(value: Any, kind: Any, name: str) -> Any:
    """`value` as a setting of type `kind`, or a SettingsError."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if value is None and type(None) in options:
            return None
        (kind,) = [option for option in options if option is not type(None)]
    if typing.get_origin(kind) is tuple:
        return _conform_tuple(value, typing.get_args(kind), name)
    if isinstance(kind, type) and hasattr(kind, "from_dict"):  # a nested settings dataclass
        if isinstance(value, kind):
            return value
        if not isinstance(value, dict):
            raise SettingsError(
                f"setting {name} = {_shown(value)} is not accepted; expected a JSON object of {kind.__name__} settings"
            )
        try:
            return kind.from_dict(value)
        except (ValueError, TypeError) as error:
            raise SettingsError(f"setting {name}: {error}") from None
    accepted = {int: "an integer", float: "a finite number", str: "a string", bool: "true or false"}[kind]
    fits = (
        isinstance(value, bool)
        if kind is bool
        else isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if kind is float
        else isinstance(value, kind) and not isinstance(value, bool)
    )
    if not fits:
        raise SettingsError(f"setting {name} = {_shown(value)} is not accepted; expected {accepted}")
    return float(value) if kind is float else value


def _conform_tuple(value: Any, items: tuple, name: str) -> tuple:
    if not isinstance(value, (list, tuple)):
        raise SettingsError(f"setting {name} = {_shown(value)} is not accepted; expected a list")
    if len(items) == 2 and items[1] is Ellipsis:
        values = tuple(_conform(item, items[0], name) for item in value)
        repeated = sorted({item for item in values if values.count(item) > 1}, key=str)
        if repeated:
            raise SettingsError(
                f"setting {name} = {_shown(list(value))} lists {', '.join(map(str, repeated))} more "
                "than once; give each value once"
            )
        return values
    if len(value) != len(items):
        raise SettingsError(f"setting {name} = {_shown(value)} is not accepted; expected {len(items)} values")
    return tuple(_conform(item, kind, name) for item, kind in zip(value, items))
