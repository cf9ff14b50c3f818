"""Run folders and their files: a changed command is refused, files are never torn, and every
file the lab reads back gets an error that names it."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasplab.results.files import ResultFileError, append_jsonl, read_jsonl, write_jsonl
from crasplab.results.run_folder import RunFolderError, open_run_folder, read_run_config

SETTINGS = dict(pe="ape", tasks=["UF"], seeds=[0, 1], threshold=0.9, bins=((1, 10), (11, 20)))


def test_a_new_folder_gets_the_settings_and_the_same_command_resumes_it(tmp_path):
    open_run_folder(tmp_path / "run", SETTINGS)
    open_run_folder(tmp_path / "run", SETTINGS)  # tuples and lists compare as the file stores them
    assert json.loads((tmp_path / "run" / "config.json").read_text())["bins"] == [[1, 10], [11, 20]]


def test_a_changed_setting_is_refused_and_named_unless_it_may_change(tmp_path):
    open_run_folder(tmp_path, SETTINGS)
    with pytest.raises(RunFolderError, match="different settings \\(seeds, tasks\\)"):
        open_run_folder(tmp_path, dict(SETTINGS, tasks=["UB"], seeds=[0]))
    open_run_folder(tmp_path, dict(SETTINGS, threshold=0.5), may_change=("threshold",))
    assert json.loads((tmp_path / "config.json").read_text())["threshold"] == 0.5


@pytest.mark.parametrize("content", [b"[1, 2]", b"\xff\xfe binary", b"{not json"])
def test_a_config_that_is_not_settings_is_refused_with_its_path(tmp_path, content):
    (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(RunFolderError, match="unreadable config.json"):
        open_run_folder(tmp_path, SETTINGS)
    with pytest.raises(RunFolderError, match="config.json is not the settings of a run of the test"):
        read_run_config(tmp_path, ("pe",), "the test")


def test_a_folder_without_a_run_and_an_out_that_is_a_file_are_refused(tmp_path):
    with pytest.raises(RunFolderError, match="holds no run: it has no config.json"):
        read_run_config(tmp_path, ("pe",), "the test")
    (tmp_path / "file").write_text("")
    with pytest.raises(RunFolderError, match="file is a file"):
        open_run_folder(tmp_path / "file", SETTINGS)


@settings(max_examples=30, deadline=None)
@given(records=st.lists(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
                        max_size=5),
       cut=st.integers(1, 40))
def test_a_torn_last_line_is_ignored_and_complete_records_kept(tmp_path_factory, records, cut):
    path = tmp_path_factory.mktemp("jsonl") / "metrics.jsonl"
    write_jsonl(path, records)
    append_jsonl(path, {"last": "x" * 50})
    whole = path.read_bytes()
    path.write_bytes(whole[:len(whole) - cut])  # a writer killed during its last append
    assert read_jsonl(path) == records


def test_a_corrupt_line_in_the_middle_names_the_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": oops}\n{"step": 3}\n')
    with pytest.raises(ResultFileError, match="metrics.jsonl:2: not a JSON record"):
        read_jsonl(path)
