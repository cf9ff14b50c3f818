"""The lab installs two import names, crasp and crasplab, and nothing in the folder a user runs it
from can shadow them: a train.py or a models/ folder there (common in ML projects) is never run or
imported in place of the lab's own modules."""

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Executed or imported in place of the lab's modules, each of these would leave a marker file.
SHADOWS = {
    "train.py": "open('TRAIN_PY_RAN', 'w').close()\n",
    "models/__init__.py": "open('MODELS_IMPORTED', 'w').close()\nraise ImportError('the user models/ folder')\n",
    "results/__init__.py": "open('RESULTS_IMPORTED', 'w').close()\n",
    # As in a source checkout installed without -e: the pool's workers must not import it.
    "crasplab/__init__.py": "open('CRASPLAB_IMPORTED', 'w').close()\n",
}

TINY_RUN = textwrap.dedent("""
    import sys
    from crasplab.models import Transformer
    from crasplab.train.config import ModelSettings, TrainConfig
    from crasplab.train.loop import Job
    from crasplab.train.workers import run_on_cpu_cores
    config = TrainConfig(train_lengths=(1, 3), test_bins=((1, 3), (4, 5)), batch_size=8, warmup_steps=1,
                         max_steps=4, eval_every=4, eval_examples_per_length=2, greedy_examples_per_bin=2,
                         eval_batch_size=8, log_every=2, checkpoint_every=4)
    job = Job(task_code="UR", seed=0, model=ModelSettings(n_layers=1, n_heads=2, d_model=16), train=config,
              task_overrides=dict(alphabet_size=6), out_dir=sys.argv[1])
    run_on_cpu_cores([job], workers=1, show_progress=False)
    print(Transformer.__module__)
""")


def test_the_wheel_holds_two_import_names_and_every_package_of_the_source():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages, folders = setuptools["packages"], setuptools["package-dir"]
    assert {name.split(".")[0] for name in packages} == {"crasp", "crasplab"}

    def source_folder(package):
        mapped = max((p for p in folders if package == p or package.startswith(p + ".")), key=len, default=None)
        return ROOT / (folders[mapped] + package[len(mapped) :] if mapped else package).replace(".", "/")

    listed = {source_folder(package).resolve() for package in packages}
    roots = ["crasp", "crasplab", *folders.values()]
    on_disk = {
        init.parent.resolve()
        for root in roots
        for init in (ROOT / root).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert on_disk == listed, "a package folder is missing from pyproject.toml's list (or listed but absent)"


def test_the_worker_pool_runs_from_a_folder_with_its_own_train_py_and_models(tmp_path):
    for name, text in SHADOWS.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    # -P: this test's own process keeps the folder off sys.path; the workers the pool starts must too.
    run = subprocess.run(
        [sys.executable, "-P", "-c", TINY_RUN, str(tmp_path / "job")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-1] == "crasplab.models.transformer"
    assert json.loads((tmp_path / "job" / "result.json").read_text())["steps"] == 4
    assert not [
        marker
        for marker in ("TRAIN_PY_RAN", "MODELS_IMPORTED", "RESULTS_IMPORTED", "CRASPLAB_IMPORTED")
        if (tmp_path / marker).exists()
    ]
