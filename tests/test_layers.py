"""Which part of the lab may import which, read from the source: the architecture in one table,
so that a shortcut across it fails here instead of growing unnoticed.

A module imports only from its own layer and the layers listed before it in LAYERS:

    crasp        the interpreter, tasks and predictions (pure numpy; imports nothing of the lab)
    errors       crasplab.errors: the lab's error types and the command boundary
    models       the transformer, pretrained loaders, memory estimates (source folder models/)
    records      the files every layer above reads and writes: atomic files, job and run folders,
                 the settings base
    train        from-scratch training (source folder train/)
    verdicts     the rules by which trained models are read (fit, pass, task verdict, the threshold,
                 seeds per encoding, controls), the predictions a run starts from, and the planning
                 of protocol rounds: below the run that uses them, above the records they read
    incontext    pretrained models in context and fine-tuned
    reports      what is computed from run folders
    compiler     C-RASP compiled to weights, and the exports of compiled and trained models
    cli          what the experiment scripts share: flags, the experiment runner, the length-
                 generalization run as functions

The scripts (experiments/, benchmarks/) and the tests may import any layer.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = (
    ("crasp", ("crasp",)),
    ("errors", ("crasplab.errors",)),
    ("models", ("crasplab.models",)),
    ("records", ("crasplab.records",)),
    ("train", ("crasplab.train",)),
    ("verdicts", ("crasplab.verdicts",)),
    ("incontext", ("crasplab.incontext",)),
    ("reports", ("crasplab.reports",)),
    ("compiler", ("crasplab.compiler", "crasplab.export", "crasplab.export_lens")),
    ("cli", ("crasplab.cli",)),
)
# Source folders installed under another import name (pyproject.toml's package-dir).
INSTALLED_AS = {"models": "crasplab.models", "train": "crasplab.train"}
SOURCE_FOLDERS = ("crasp", "models", "train", "crasplab")


def layer_of(module: str) -> int | None:
    """The index in LAYERS of a lab module (None: not the lab's, or the bare package crasplab)."""
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
            return index
    return None


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    parts[0] = INSTALLED_AS.get(parts[0], parts[0])
    name = ".".join(parts)
    return name.removesuffix(".__init__")


def imported_modules(path: Path) -> set[str]:
    """The absolute module names a file imports (at the top and inside functions)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def crossings(root: Path) -> dict[str, list[str]]:
    """module -> the lab modules it imports from a later layer."""
    found = {}
    for folder in SOURCE_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            module = module_name(path, root)
            own = layer_of(module)
            if own is None:
                continue
            later = sorted(name for name in imported_modules(path) if (layer_of(name) or 0) > own)
            if later:
                found[module] = later
    return found


def test_every_module_imports_only_its_own_layer_and_the_ones_before_it():
    assert not crossings(ROOT), f"imports across the layers: {crossings(ROOT)}"


def test_every_lab_module_has_a_layer():
    unplaced = [
        module_name(path, ROOT)
        for folder in SOURCE_FOLDERS
        for path in (ROOT / folder).rglob("*.py")
        if layer_of(module_name(path, ROOT)) is None and module_name(path, ROOT) != "crasplab"
    ]
    assert not unplaced, f"modules that LAYERS does not place: {unplaced}"


@pytest.mark.parametrize(
    "folder, source, crossing",
    [
        ("train", "def f():\n    from crasplab.reports.length_gen import write_report\n", True),  # inside a function
        ("train", "import crasplab.cli.arguments\n", True),
        ("crasp", "from crasplab.models import Transformer\n", True),
        ("crasplab/reports", "from crasplab.train.config import PRESETS\n", False),
        ("models", "from crasplab.errors import LabError\n", False),
    ],
)
def test_the_check_sees_an_import_from_a_later_layer_wherever_it_is(tmp_path, folder, source, crossing):
    """A check that missed imports inside functions, or that compared the wrong way, would pass
    a layer that breaks the order."""
    module = tmp_path / folder / "probe.py"
    module.parent.mkdir(parents=True)
    module.write_text(source)
    assert bool(crossings(tmp_path)) == crossing
