"""One settings base (crasplab.records.settings.Settings) for every settings type of the lab: each
is checked when built, so an invalid one cannot exist; each goes to JSON and back one way; a
stored copy with a misspelt, missing or mistyped setting is refused naming it; and a copy written
before a setting existed is read with the default every run had before it (ADDED_LATER)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

import crasplab
import crasplab.models
import crasplab.train
from crasplab.cli.sweep import SweepSettings
from crasplab.incontext.finetune_config import FinetuneConfig
from crasplab.incontext.settings import GitRunSettings, LoremRunSettings, MechanismSettings, PretrainedSettings
from crasplab.records.settings import Settings, SettingsError
from crasplab.reports.selection import Configuration
from crasplab.verdicts.rules import VerdictRules
from crasplab.train.config import PRESETS, ModelSettings, RunSettings, TrainConfig
from crasplab.train.engines import EngineSettings
from crasplab.train.loop import Job

QUICK = PRESETS["quick"]


def run_settings() -> RunSettings:
    tasks = ("UF", "NB")
    return RunSettings(
        preset=QUICK.name,
        tasks=tasks,
        seeds=(0, 1),
        model=QUICK.model,
        train={task: QUICK.train_for(task) for task in tasks},
        task_overrides={task: QUICK.overrides_for(task) for task in tasks},
        model_overrides={"NB": dict(n_layers=4)},
    )


STORED = [
    ModelSettings(pe="rope", n_layers=2, d_model=64),
    ModelSettings(pe="nope", n_heads=4, d_model=16, architecture=dict(block="llama")),
    TrainConfig(train_lengths=(1, 20), test_bins=((1, 20), (21, 30)), max_grad_norm=1.0),
    run_settings(),
    Job(task_code="UF", seed=3, model=QUICK.model, train=QUICK.train_for("UF"), task_overrides={}, out_dir="x"),
    FinetuneConfig(),
    PretrainedSettings(),
    MechanismSettings(),
    LoremRunSettings(),
    GitRunSettings(),
    VerdictRules(min_fitted_seeds=3),
    EngineSettings(workers=2),
    Configuration(n_layers=2, n_heads=4, d_model=64, learning_rate=1e-3),
    SweepSettings(
        pe="ape",
        preset="quick",
        tasks=("UL",),
        configurations=(Configuration(1, 2, 16, 1e-3), Configuration(2, 2, 16, 1e-3)),
        sweep_seeds=(0,),
        validation_bin=(21, 30),
        max_steps=None,
        verdict_seeds=(5, 6),
    ),
]
IDS = [type(settings).__name__ for settings in STORED]


@pytest.mark.parametrize("settings", STORED, ids=IDS)
def test_settings_come_back_equal_from_the_json_they_store(settings):
    stored = json.loads(json.dumps(settings.to_dict()))
    assert stored == settings.to_dict()  # to_dict is already JSON: no tuples left to become lists
    assert type(settings).from_dict(stored) == settings


@pytest.mark.parametrize("settings", STORED, ids=IDS)
def test_a_misspelt_or_missing_stored_setting_is_refused_naming_it(settings):
    stored = settings.to_dict()
    name = type(settings).recorded()[0]
    with pytest.raises(SettingsError, match=f"unknown {type(settings).__name__} setting\\(s\\) \\['{name}x'\\]"):
        type(settings).from_dict({**stored, f"{name}x": stored[name]})
    with pytest.raises(SettingsError, match=f"missing {type(settings).__name__} setting\\(s\\) {name}"):
        type(settings).from_dict({key: value for key, value in stored.items() if key != name})


@pytest.mark.parametrize(
    "settings, added",
    [
        (ModelSettings(), dict(dtype="float32", architecture={})),
        (
            TrainConfig(),
            dict(
                max_grad_norm=0.0, test_bins_at_stop_only=False, position_reach=0, steps_per_call=1, retrieval_eos=True
            ),
        ),
        (run_settings().replace(model_overrides={}), dict(model_overrides={})),
    ],
    ids=["ModelSettings", "TrainConfig", "RunSettings"],
)
def test_a_copy_written_before_a_setting_existed_reads_with_the_behaviour_runs_had_before_it(settings, added):
    assert set(type(settings).ADDED_LATER) == set(added)
    older = {key: value for key, value in settings.to_dict().items() if key not in added}
    assert type(settings).from_dict(older) == settings.replace(**added)


@hypothesis_settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from([f.name for f in dataclasses.fields(TrainConfig) if f.type in ("int", "float")]),
    value=st.one_of(st.text(max_size=3), st.booleans(), st.none(), st.just(float("nan")), st.lists(st.integers())),
)
def test_a_mistyped_training_setting_cannot_be_built(name, value):
    with pytest.raises(SettingsError, match=f"setting {name} = .* is not accepted"):
        TrainConfig().replace(**{name: value})


def test_every_settings_dataclass_of_the_lab_derives_from_the_one_base():
    """A dataclass named like settings (…Settings, …Config) anywhere in crasplab is a Settings,
    except models.config.ModelConfig: the models layer lies below the records layer, and
    ModelSettings is the settings type that builds it."""
    found = {}
    names = [
        module_info.name
        for package in (crasplab, crasplab.models, crasplab.train)  # models/ and train/ install into crasplab
        for module_info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
    ]
    for name in names:
        if name.startswith(("crasplab.models.loading", "crasplab.export_lens")):
            continue  # optional dependencies (gguf, transformer_lens); they define no settings
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and dataclasses.is_dataclass(value)
                and value.__module__ == module.__name__
                and value.__name__.endswith(("Settings", "Config"))
            ):
                found[f"{value.__module__}.{value.__name__}"] = issubclass(value, Settings)
    assert found.pop("crasplab.models.config.ModelConfig") is False
    assert {"crasplab.train.config.TrainConfig", "crasplab.cli.sweep.SweepSettings"} <= set(found)
    assert [name for name, derives in found.items() if not derives] == []
