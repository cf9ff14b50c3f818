"""What every test module shares: Hypothesis profiles, the machine-dependent marker's rule, and
fixtures that build the smallest models, training settings and run records the lab accepts.

Hypothesis: the "ci" profile (chosen when CI=true, as .ci/run's environment has it) is
derandomized, so a CI failure reproduces exactly; locally each run explores new examples. Both
drop the per-example deadline: on a loaded 2-core machine the first example compiles JAX code.
"""

import os

import pytest
from hypothesis import HealthCheck, settings

from crasp.verdict_cache import FOLDER_VARIABLE

settings.register_profile(
    "ci", derandomize=True, deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") == "true" else "dev"))


@pytest.fixture(autouse=True, scope="session")
def verdict_cache_of_this_session(tmp_path_factory):
    """The witness verdicts crasp keeps between runs (crasp.verdict_cache) go to a folder of this
    session, never the user's: each session verifies the witnesses afresh, once, and the commands
    the tests run in subprocesses share its verdicts."""
    os.environ[FOLDER_VARIABLE] = str(tmp_path_factory.mktemp("crasp-cache"))


@pytest.fixture
def tiny_train_config():
    """A factory of training settings small enough for a test: tiny_train_config(max_steps=8)."""
    from tests.tiny import tiny_config

    return tiny_config


@pytest.fixture
def tiny_model_settings():
    """The smallest from-scratch model: one layer, two heads, width 16."""
    from tests.tiny import TINY_MODEL

    return TINY_MODEL
