"""The one base of every settings dataclass of the lab (a model, its training, a run, a job, an
experiment on a pretrained model): frozen, checked when built, so an invalid one cannot exist, and
stored as JSON one way, `to_dict`, and read back one way, `from_dict`.

    @dataclass(frozen=True)
    class MySettings(Settings):
        lengths: tuple[int, ...] = (10, 20)
        threshold: float = 0.9

        def check(self) -> None:
            self.require(all(n >= 1 for n in self.lengths), "lengths", "input lengths of at least 1")

Before `check` runs, every field is checked against its annotation (int, float, str, bool, a
tuple of them, a dict, `X | None`, or a nested Settings): a number must fit what the arrays
it reaches hold (an int32, a finite float32), a bool is not an int, a list becomes a tuple
(JSON has no tuples), and a list setting may not hold the same value twice (it would evaluate
the same prompts twice). So a hand-edited file ("tasks": "UF", "threshold": "high", a missing
seed, a misspelt name) is refused as clearly as a mistyped flag, naming the setting, what was
given and what is accepted. SettingsError is the one error.

A file written before a setting existed lacks it: the class names such settings in ADDED_LATER,
whose defaults are what every run did before them, or upgrades the file in `upgrade_config`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from typing import Any, ClassVar

from crasplab.errors import LabError


# The bounds of a number setting: what the arrays it reaches hold (JAX computes in int32 and
# float32). A larger one (a max_steps of 10^23 in a hand-edited file or a flag) ended in an
# OverflowError deep in a jitted step; it is refused here, naming the setting.
LARGEST_INT = 2**31 - 1
LARGEST_FLOAT = 3.4028234663852886e38


class SettingsError(LabError, ValueError):
    """A setting of the wrong kind or out of range: names it, what was given and what is accepted."""


class Settings:
    """Base of a frozen settings dataclass; subclasses add `check()`."""

    # Settings that change how a run goes but not its numbers (how many prompts are decoded
    # together): a resumed run may change them, and a file written before they were recorded is
    # read with their defaults.
    RESULTS_UNCHANGED: ClassVar[tuple[str, ...]] = ()
    # Settings added after runs were kept whose defaults are what those runs did: a file without
    # one is read with its default.
    ADDED_LATER: ClassVar[tuple[str, ...]] = ()
    # Fields that say where, not what (a job's folder): the stored copy leaves them out, so that
    # the files can move, and the value a file written before still holds is ignored.
    NOT_STORED: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for field in dataclasses.fields(self):
            value = _conform(getattr(self, field.name), hints[field.name], field.name)
            object.__setattr__(self, field.name, value)  # frozen: the one place a field is set after __init__
        self.check()

    def check(self) -> None:
        """Ranges and relations between settings; call self.require or self.require_that for each."""

    def require(self, condition: bool, name: str, accepted: str) -> None:
        """A check of one setting: the error shows its value and what is accepted."""
        if not condition:
            raise SettingsError(f"setting {name} = {_shown(getattr(self, name))} is not accepted; expected {accepted}")

    def require_that(self, condition: bool, message: str) -> None:
        """A check of several settings together: the error is `message`, under the class's name."""
        if not condition:
            raise SettingsError(f"{type(self).__name__}: {message}")

    def replace(self, **changes):
        unknown = set(changes) - set(self.names())
        if unknown:
            raise SettingsError(
                f"unknown {type(self).__name__} setting(s) {sorted(unknown)}; known: {list(self.names())}"
            )
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The settings as JSON stores them (tuples become lists, nested settings their to_dict)."""
        return {name: _stored(getattr(self, name)) for name in self.names() if name not in self.NOT_STORED}

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(field.name for field in dataclasses.fields(cls))

    @classmethod
    def recorded(cls) -> tuple[str, ...]:
        """The settings every stored copy holds."""
        optional = set(cls.RESULTS_UNCHANGED) | set(cls.ADDED_LATER) | set(cls.NOT_STORED)
        return tuple(name for name in cls.names() if name not in optional)

    @classmethod
    def upgrade_config(cls, values: dict) -> dict:
        """Settings that an earlier version of the lab stored, as this one stores them (a class whose
        settings changed in another way than ADDED_LATER says how; unchanged here)."""
        return values

    @classmethod
    def from_dict(cls, values: dict):
        """The settings `to_dict` stored, checked as they are built."""
        if not isinstance(values, dict):
            raise SettingsError(f"{_shown(values)} is not {cls.__name__}'s settings; expected a JSON object")
        values = {name: value for name, value in cls.upgrade_config(values).items() if name not in cls.NOT_STORED}
        unknown = sorted(set(values) - set(cls.names()))
        if unknown:
            raise SettingsError(f"unknown {cls.__name__} setting(s) {unknown}; known: {list(cls.names())}")
        missing = [name for name in cls.recorded() if name not in values]
        if missing:
            raise SettingsError(f"missing {cls.__name__} setting(s) {', '.join(missing)}")
        return cls(**values)


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, tuple)) else repr(value)


def _stored(value: Any) -> Any:
    if isinstance(value, Settings):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_stored(item) for item in value]
    if isinstance(value, dict):
        return {key: _stored(item) for key, item in value.items()}
    return value


def _conform(value: Any, kind: Any, name: str) -> Any:
    """`value` as a setting of type `kind`, or a SettingsError."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if value is None and type(None) in options:
            return None
        (kind,) = [option for option in options if option is not type(None)]
    if typing.get_origin(kind) is tuple:
        return _conform_tuple(value, typing.get_args(kind), name)
    if kind is dict or typing.get_origin(kind) is dict:
        return _conform_dict(value, typing.get_args(kind), name)
    if isinstance(kind, type) and issubclass(kind, Settings):
        return _conform_settings(value, kind, name)
    accepted = {
        int: f"an integer from {-LARGEST_INT} to {LARGEST_INT}",
        float: f"a finite number of magnitude at most {LARGEST_FLOAT:.4g}",
        str: "a string",
        bool: "true or false",
    }[kind]
    fits = (
        isinstance(value, bool)
        if kind is bool
        else isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and abs(value) <= LARGEST_FLOAT
        if kind is float
        else isinstance(value, kind) and not isinstance(value, bool) and (kind is not int or abs(value) <= LARGEST_INT)
    )
    if not fits:
        raise SettingsError(f"setting {name} = {_shown(value)} is not accepted; expected {accepted}")
    return float(value) if kind is float else value


def _conform_settings(value: Any, kind: type[Settings], name: str) -> Settings:
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


def _conform_dict(value: Any, items: tuple, name: str) -> dict:
    if not isinstance(value, dict):
        raise SettingsError(f"setting {name} = {_shown(value)} is not accepted; expected a JSON object")
    if not items:
        return value
    key_kind, value_kind = items
    return {
        _conform(key, key_kind, f"{name} (a key)"): _conform(item, value_kind, f"{name}[{key!r}]")
        for key, item in value.items()
    }


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
