"""Which package may import which: the lab's layers, read from the source, so that a shortcut
across them fails here instead of growing unnoticed.

- `crasp` (the interpreter) is pure numpy and imports nothing of the lab.
- `models` imports no training, result or experiment code.
- `train` writes the run formats whose one owner is crasplab.results.job_folder (with
  results.files and results.run_folder below it) and never imports a report module.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The modules of crasplab.results that own file formats rather than reports.
FORMAT_MODULES = {"crasplab.results.job_folder", "crasplab.results.files", "crasplab.results.run_folder"}


def imported_modules(folder: str, root: Path = ROOT) -> dict[str, set[str]]:
    """file -> the absolute module names it imports (top level and inside functions)."""
    found = {}
    for path in sorted((root / folder).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
        found[str(path.relative_to(root))] = names
    return found


@pytest.mark.parametrize(
    "folder, allowed",
    [
        ("crasp", lambda name: not name.startswith("crasplab")),
        ("models", lambda name: not name.startswith(("crasplab.train", "crasplab.results", "crasplab.incontext"))),
        ("train", lambda name: not name.startswith("crasplab.results") or name in FORMAT_MODULES),
    ],
)
def test_each_layer_imports_only_what_lies_below_it(folder, allowed):
    crossing = {
        path: sorted(name for name in names if not allowed(name))
        for path, names in imported_modules(folder).items()
        if any(not allowed(name) for name in names)
    }
    assert not crossing, f"imports across the layers: {crossing}"


def test_the_boundary_check_sees_an_import_inside_a_function(tmp_path):
    """A check that missed imports inside functions would pass a layer that breaks the rule."""
    module = tmp_path / "train" / "late.py"
    module.parent.mkdir()
    module.write_text("def f():\n    from crasplab.results.length_gen import write_report\n")
    assert imported_modules("train", tmp_path) == {"train/late.py": {"crasplab.results.length_gen"}}
