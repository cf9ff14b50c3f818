"""Witness verdicts kept between runs (crasp.verdict_cache): a second run of `crasp tasks` verifies
nothing, and any change to what a verdict rests on (the witness, the crasp source) or a damaged
cache file makes it verify again, never reuse a verdict it cannot vouch for."""

import json

import pytest

from crasp import prediction, verdict_cache
from crasp.witnesses import WITNESSES


@pytest.fixture
def checks(tmp_path, monkeypatch):
    """A fresh cache folder, predictions forgotten in memory, and the list of the tasks checked."""
    monkeypatch.setenv(verdict_cache.FOLDER_VARIABLE, str(tmp_path))
    checked = []
    check_witness = prediction.check_witness

    def counted(task, *args, **kwargs):
        checked.append(task.code)
        return check_witness(task, *args, **kwargs)

    monkeypatch.setattr(prediction, "check_witness", counted)
    prediction.verified_witnesses.cache_clear()
    yield checked
    prediction.verified_witnesses.cache_clear()


def a_new_run():
    """What a second process sees: the cache file, and nothing kept in memory."""
    prediction.verified_witnesses.cache_clear()


def test_a_second_run_verifies_nothing_and_predicts_the_same(checks):
    first = [prediction.predict(code, "ape") for code in ("UL", "UR", "Majority")]
    assert set(checks) == {"UL", "UR", "Majority"}
    done = len(checks)
    a_new_run()
    assert [prediction.predict(code, "ape") for code in ("UL", "UR", "Majority")] == first
    assert len(checks) == done


def test_a_changed_witness_is_verified_again(checks, monkeypatch):
    assert prediction.verified_witnesses("UL")
    done = len(checks)
    a_new_run()
    monkeypatch.setitem(WITNESSES, "UL", WITNESSES["UR"])  # retrieval on the wrong side: wrong for UL
    monkeypatch.setattr(prediction, "load_search_results", dict)  # and no witness found by search
    assert prediction.verified_witnesses("UL") == ()
    assert len(checks) == done + len(WITNESSES["UR"])


def test_a_changed_crasp_source_is_verified_again(checks, monkeypatch):
    assert prediction.verified_witnesses("UR")
    done = len(checks)
    a_new_run()
    monkeypatch.setattr(verdict_cache, "source_fingerprint", lambda: "an edited crasp")
    assert prediction.verified_witnesses("UR")
    assert len(checks) == 2 * done


@pytest.mark.parametrize("text", ["", "{not json", "[]", '{"a source": {"a key": "yes"}}'])
def test_a_damaged_cache_file_is_verified_again_and_rewritten(text, checks):
    verdict_cache.cache_file().write_text(text)
    assert prediction.verified_witnesses("UR")
    done = len(checks)
    a_new_run()
    assert prediction.verified_witnesses("UR")
    assert len(checks) == done > 0


def test_the_file_keeps_the_verdicts_of_the_last_few_sources_only(checks, monkeypatch):
    """Checkouts that share a cache each add their source's verdicts; the file does not grow without end."""
    sources = [f"source {k}" for k in range(verdict_cache.SOURCES_KEPT + 2)]
    for source in sources:
        monkeypatch.setattr(verdict_cache, "source_fingerprint", lambda: source)
        a_new_run()
        assert prediction.verified_witnesses("UR")
    assert list(json.loads(verdict_cache.cache_file().read_text())) == sources[-verdict_cache.SOURCES_KEPT :]
