"""One row per position encoding: every layer that knows a fact about an encoding holds it in one
table keyed by the encoding's code, every table has every encoding, and nothing else in the lab
decides by an encoding's name (docs/layout.md, "Position encodings").

The row, by the layer that owns each part:
    crasp.position_encodings     name, description, theorem (fragment, source) or the one it borrows,
                                 the papers that train it
    crasplab.models.positions    learned table, rotation, score bias
    crasplab.models.loading      the pretrained architectures whose models use it (Architecture.position)
    crasplab.train.config        the blocks a from-scratch model of it gets
    crasplab.verdicts.rules      the fitted seeds a protocol verdict needs
    crasplab.compiler.positions  the fragment the compiler builds, or why it builds none
    crasplab.export              the transformers class per block family, or why there is none
"""

import ast
import re
from pathlib import Path

import pytest

from crasp.position_encodings import ENCODINGS, POSITION_ENCODINGS, encoding
from crasplab.compiler import CompileError, compile_text
from crasplab.compiler.positions import COMPILATIONS, COMPILED_ENCODINGS
from crasplab.export import EXPORTS, ExportError, Refused, architecture_of
from crasplab.models import ModelConfig
from crasplab.models.config import BLOCKS
from crasplab.models.loading.tables import GGUF_ARCHITECTURES, HF_ARCHITECTURES
from crasplab.models.positions import SCHEMES
from crasplab.train.config import ARCHITECTURE_OF_POSITION, ModelSettings
from crasplab.verdicts.rules import REQUIRED_FITTED_SEEDS, rules_for

ROOT = Path(__file__).resolve().parents[1]
LAYER_TABLES = {
    "models.positions.SCHEMES": SCHEMES,
    "train.config.ARCHITECTURE_OF_POSITION": ARCHITECTURE_OF_POSITION,
    "verdicts.rules.REQUIRED_FITTED_SEEDS": REQUIRED_FITTED_SEEDS,
    "compiler.positions.COMPILATIONS": COMPILATIONS,
    "export.EXPORTS": EXPORTS,
}
EXPORTED_CLASSES = ("GPT2LMHeadModel", "LlamaForCausalLM", "SmolLM3ForCausalLM")


def pretrained_architectures(code: str) -> list[str]:
    """The loaders' architectures whose models use the encoding `code`."""
    tables = {"GGUF": GGUF_ARCHITECTURES, "Hugging Face": HF_ARCHITECTURES}
    return [f"{kind} {name}" for kind, table in tables.items() for name, a in table.items() if a.position == code]


def row(code: str) -> dict:
    """Every fact the lab holds about one encoding, gathered from the layers' tables."""
    identity, scheme, compilation, export = ENCODINGS[code], SCHEMES[code], COMPILATIONS[code], EXPORTS[code]
    return dict(
        name=identity.name,
        description=identity.description,
        theorem=identity.prediction_theorem.fragment,
        source=identity.prediction_theorem.source,
        caveat=identity.caveat() if identity.theorem is None else "none: a theorem covers it",
        in_the_papers=identity.trained_by or "the lab's addition",
        learned_table=scheme.learned_table,
        rotation=scheme.rotate is not None,
        score_bias=scheme.score_bias is not None,
        from_scratch_block=ARCHITECTURE_OF_POSITION[code]["block"],
        pretrained=pretrained_architectures(code) or "none of the loaders",
        protocol_seeds=REQUIRED_FITTED_SEEDS[code],
        compiler=compilation.fragment.name if compilation.fragment else compilation.refused,
        export_gpt2=getattr(export.gpt2, "why", export.gpt2),
        export_llama=getattr(export.llama, "why", export.llama),
    )


@pytest.mark.parametrize("table", LAYER_TABLES)
def test_every_layer_table_has_a_row_for_every_encoding_in_the_identity_order(table):
    assert tuple(LAYER_TABLES[table]) == POSITION_ENCODINGS
    for code, entry in LAYER_TABLES[table].items():
        assert getattr(entry, "code", code) == code, f"{table}[{code!r}] is the row of {entry.code!r}"


@pytest.mark.parametrize("code", POSITION_ENCODINGS)
def test_every_encoding_has_every_fact(code):
    facts = row(code)
    missing = [fact for fact, value in facts.items() if value is None or value == "" or value == ()]
    assert not missing, f"{code} has no {missing}"
    assert facts["from_scratch_block"] in BLOCKS
    assert isinstance(facts["protocol_seeds"], int) and facts["protocol_seeds"] >= 1
    assert rules_for(code).min_fitted_seeds == facts["protocol_seeds"]
    assert ModelSettings(pe=code).model_config(8, 16).block == facts["from_scratch_block"]


def test_an_encoding_without_a_theorem_borrows_one_that_has_it():
    for code, e in ENCODINGS.items():
        assert (e.theorem is None) == (e.borrows is not None), code
        if e.borrows is not None:
            assert encoding(e.borrows).theorem is not None, f"{code} borrows from {e.borrows}, which has no theorem"


def test_every_pretrained_architecture_names_a_known_encoding():
    for table in (GGUF_ARCHITECTURES, HF_ARCHITECTURES):
        for name, architecture in table.items():
            assert architecture.position in POSITION_ENCODINGS, name


@pytest.mark.parametrize("code", POSITION_ENCODINGS)
def test_the_compiler_row_is_what_the_lowering_builds(code):
    """A compiled encoding takes a C-RASP[] program, MOD exactly when its fragment is periodic and
    a local count exactly when it is local; a refused one is refused with the row's reason. Each
    fragment also matches how the lowering builds it from the model side: MOD and the first
    position from a learned table, the local relation from a table or a rotation."""
    programs = {
        None: 'alphabet: <bos> a\naccept: seen\nseen := #[j <= i] Q("a") >= 1\n',
        "periodic": "alphabet: <bos> a\naccept: odd\nodd := MOD(2, 1)\n",
        "local": 'alphabet: <bos> a\naccept: back\nback := #[j <= i, j = i - 1] Q("a") >= 1\n',
    }
    fragment = COMPILATIONS[code].fragment
    if fragment is None:
        assert code not in COMPILED_ENCODINGS
        with pytest.raises(CompileError, match=re.escape(COMPILATIONS[code].refused)):
            compile_text(programs[None], "prog.crasp", code, 16)
        return
    scheme = SCHEMES[code]
    assert scheme.score_bias is None, "a score bias would tilt the averaging heads"
    assert fragment.periodic == scheme.learned_table
    assert fragment.local == (scheme.learned_table or scheme.rotate is not None)
    for operation, text in programs.items():
        if operation is None or getattr(fragment, operation):
            compile_text(text, "prog.crasp", code, 16)
        else:
            with pytest.raises(CompileError):
                compile_text(text, "prog.crasp", code, 16)


@pytest.mark.parametrize("code", POSITION_ENCODINGS)
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_export_row_is_what_the_exporter_writes(code, family):
    entry = getattr(EXPORTS[code], family)
    config = ModelConfig(vocab_size=8, d_model=16, n_layers=1, n_heads=4, d_ff=32, block=family, position=code)
    if isinstance(entry, Refused):
        with pytest.raises(ExportError, match=re.escape(entry.why)):
            architecture_of(config)
    else:
        assert entry in EXPORTED_CLASSES
        assert architecture_of(config) == entry


# ---------------------------------------------------------------- nothing else decides by name

SOURCE_FOLDERS = ("crasp", "models", "train", "crasplab", "experiments", "benchmarks")
# Dict literals keyed by encoding codes that may stand where they are, by (file, the module-level
# name they are assigned to). A layer's table, or data that a paper reports per encoding.
ALLOWED_TABLES = {
    ("train/config.py", "ARCHITECTURE_OF_POSITION"),  # the train layer's part of the row
    ("crasplab/verdicts/rules.py", "REQUIRED_FITTED_SEEDS"),  # the verdicts layer's part of the row
    # The retrieval/copying paper's figure numbers per task and encoding, as its figure data gives them.
    ("experiments/calibration/protocol_table.py", "PAPER_FIGURE"),
    ("experiments/calibration/protocol_table.py", "PAPER_THREE_SEED_MEANS"),
}


def _names_an_encoding(node: ast.AST) -> bool:
    """A string literal that is an encoding's code, or a literal tuple/list/set holding one."""
    if isinstance(node, ast.Constant):
        return node.value in POSITION_ENCODINGS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_an_encoding(element) for element in node.elts)
    return False


def _assigned_name(statement: ast.stmt) -> str | None:
    targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
    names = [t.id for t in targets if isinstance(t, ast.Name)]
    return names[0] if names else None


def decisions_by_name(source: str, path: str) -> list[str]:
    """'path:line' of each comparison with an encoding's code (`pe == "ape"`, `pe in ("ape", "nope")`,
    `case "ape":`) and each dict literal keyed by one outside ALLOWED_TABLES."""
    found = []
    for statement in ast.parse(source).body:
        allowed = (path, _assigned_name(statement)) in ALLOWED_TABLES
        for node in ast.walk(statement):
            if isinstance(node, ast.Compare) and any(map(_names_an_encoding, [node.left, *node.comparators])):
                found.append(f"{path}:{node.lineno}")
            elif isinstance(node, ast.MatchValue) and _names_an_encoding(node.value):
                found.append(f"{path}:{node.lineno}")
            elif isinstance(node, ast.Dict) and any(map(_names_an_encoding, filter(None, node.keys))) and not allowed:
                found.append(f"{path}:{node.lineno}")
    return found


def test_no_module_outside_the_tables_decides_by_an_encoding_name():
    found = [
        place
        for folder in SOURCE_FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        for place in decisions_by_name(path.read_text(), path.relative_to(ROOT).as_posix())
    ]
    assert not found, f"decisions by an encoding's name outside the tables (look the fact up in its row): {found}"


@pytest.mark.parametrize(
    "source, decides",
    [
        ('if config.position == "alibi":\n    pass\n', True),
        ('ok = pe not in ("ape", "nope")\n', True),
        ('SEEDS = {"ape": 5}\nseeds = SEEDS.get(pe, 3)\n', True),
        ('match pe:\n    case "rope":\n        pass\n', True),
        ('model = settings.replace(pe="ape")\n', False),  # a default or an argument decides nothing
        ('if task == "UF":\n    pass\n', False),
    ],
)
def test_the_check_sees_a_decision_by_name_wherever_it_is_written(source, decides):
    assert bool(decisions_by_name(source, "probe.py")) == decides
