"""A C-RASP program lowered to features, heads and MLP steps (crasplab.compiler.plan).

Families are unrolled over the alphabet; every ground node (a node with its index variables
bound to symbols) is lowered once. Each head and step is placed in the earliest layer whose
input features exist (see plan's levels), so the depth is the program's longest chain of counts
and comparisons, not its number of definitions.

The supported subset and what each node becomes:
- Q(a), true/false, symbol relations: token features and constants (no computation);
- not: 1 - P; and/or, any/all: one threshold step (exclusive alternatives, like
  `any t: Q(t) and ...`, are summed without one);
- `#[j <= i] P`: a uniform head (all scores 0) averaging P; constants enter counts as c * (1/i),
  the average of the first-position flag;
- `#[j <= i, j = i - c] P` (APE, RoPE): a head peaked at j = i - c, and a step that zeroes it
  where i <= c;
- comparisons: a step at threshold +-1/2 (counts are integers), margin 1/(2i) for averaged counts;
- `any t: Q(t) and #[j <= i] (K[t] and R) >= 1` with K one-hot in t: one keyed head (query: the
  current symbol; key: the t for which K holds at j) instead of one head per symbol;
- MOD(m, r) (APE): a flag in the position table.
min, max and `? :` of counts are ramps (max(z, 0) from one SwiGLU unit, exact on the integer
values counts take): min(a, b) = a - max(a - b, 0), c ? a : b = b + c (a - b) with
c x = max(x - M (1 - c), 0) - max(-x - M (1 - c), 0) for a bound M of |x|. A count held as its
value (a local count, or `? :` between constants) that meets a count over every j <= i is divided
by i first: x / i is a sum of Booleans [x >= t] divided by i, each one ramp max(1/i + b - 1, 0).
Outside it (local counts on NoPE, MOD without APE) the compiler raises
CompileError naming the node and the definition it is in.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np

from crasp import expr as E
from crasp.position_encodings import PE_NAMES
from crasp.program import Program
from crasplab.compiler.plan import ONE, START, Affine, Feature, HeadGroup, Step
from crasplab.compiler.positions import COMPILATIONS, COMPILED_ENCODINGS
from crasplab.models.positions import SCHEMES

BOS = "<bos>"
STEP_OFFSET = 64.0  # T of plan.Step: silu(x) = x exactly for x >= 38 and ~0 for x <= -64 in float64
BOOLEAN_MARGIN = 0.5  # 0/1 values compared with a half-integer threshold
MATCH_SCORE = 80.0  # keyed heads: a matching key; the sink scores half of it
LOCAL_SCORE_MARGIN = 60.0  # local heads: score gap between the peak, the sink and any other key
EXACT_STEP_INPUT = 2.0**30  # |gain * z| below this keeps (g + T) - (g - T) = 2T exact in float32
ROPE_DIM, ROPE_BASE = 32, 100.0
ARITH = {"+": operator.add, "-": operator.sub, "min": min, "max": max}


def _compiled_where(holds) -> tuple[str, ...]:
    """The encodings the compiler builds for which `holds(code)`, to name them in an error."""
    return tuple(code for code in COMPILED_ENCODINGS if holds(code))


def _tabled(code: str) -> bool:
    return SCHEMES[code].learned_table


def _compiles(operation: str):
    """Whether an encoding's fragment has `operation` ("local" or "periodic")."""
    return lambda code: getattr(COMPILATIONS[code].fragment, operation)


def _listed(codes: tuple[str, ...], last: str) -> str:
    return " ".join(codes) if len(codes) == 1 else f"{', '.join(codes[:-1])} {last} {codes[-1]}"


class CompileError(E.CraspError, ValueError):
    """A program, or part of it, that the compiler cannot turn into weights."""


@dataclass(frozen=True)
class Count:
    """A count as an affine form: `scale` "averaged" (value / i), "local" (the value, 0 or 1), or
    "constant" (the integer `constant`, no form yet: it takes the scale of what it meets)."""

    scale: str
    form: Affine
    constant: int = 0
    zero_or_one: bool = False  # a local count: its comparisons with constants need no step


# The deepest nesting (brackets, and definitions followed into their bodies) the lowering takes:
# it follows the nesting with Python calls, up to five frames a level, under Python's limit of
# 1,000. The interpreter's run, check and fragment follow any depth (crasp.trampoline).
MAX_NESTING = 150


def nesting_depth(root: E.Expr) -> int:
    """How deep `root` nests, through the bodies of the definitions it uses (computed without recursion)."""
    depth: dict[int, int] = {}
    for node in E.walk(root):  # children first
        depth[id(node)] = 1 + max((depth[id(child)] for child in node.children()), default=0)
    return depth[id(root)]


def check_nesting(root: E.Expr) -> None:
    """Refuse, with the limit named, a program nested deeper than the lowering follows."""
    if (depth := nesting_depth(root)) > MAX_NESTING:
        raise CompileError(
            f"the program nests {depth} levels deep (brackets, and definitions followed into their bodies); "
            f"the compiler lowers at most {MAX_NESTING} (`run`, `check` and `fragment` take any depth): "
            "write it with less nesting"
        )


def _add(*forms: tuple[float, Affine]) -> Affine:
    out: Affine = {}
    for coefficient, form in forms:
        for feature, value in form.items():
            out[feature] = out.get(feature, 0.0) + coefficient * value
    return {f: v for f, v in out.items() if v != 0.0}


def _constant_of(form: Affine) -> float | None:
    """The value of a form that reads only the constant feature, else None."""
    return form.get(ONE, 0.0) if set(form) <= {ONE} else None


def _conjuncts(node: E.Expr) -> list[E.Expr]:
    return _conjuncts(node.left) + _conjuncts(node.right) if isinstance(node, E.And) else [node]


def _disjuncts(node: E.Expr) -> list[E.Expr]:
    return _disjuncts(node.left) + _disjuncts(node.right) if isinstance(node, E.Or) else [node]


def local_moduli(max_length: int) -> list[int]:
    """Pairwise coprime moduli whose product exceeds max_length: the APE position code of local heads."""
    chosen: list[int] = []
    for m in (5, 7, 9, 11, 13, 16, 17, 19, 23, 29, 31):
        if math.prod(chosen) > max_length:
            break
        chosen.append(m)
    if math.prod(chosen) <= max_length:
        raise CompileError(f"max_length {max_length} is beyond what the position code of local heads separates")
    return chosen


def onehot_in(node: E.Expr, name: str) -> bool:
    """Is node, as a family over index `name`, true for at most one symbol at every position?"""
    if isinstance(node, E.Token):
        return node.symbol == E.Var(name)
    if isinstance(node, E.And):
        return onehot_in(node.left, name) or onehot_in(node.right, name)
    if isinstance(node, E.Named):
        uses = [p for p, a in zip(node.params, node.args) if a == E.Var(name)]
        return len(uses) == 1 and onehot_in(node.body, uses[0])
    if not (isinstance(node, E.Compare) and isinstance(node.right, E.Number)):
        return False
    counted, name = _count_through_definitions(node.left, name)
    if counted is None:
        return False
    inner, wanted = counted.body, (node.op, node.right.value)
    if counted.offset is not None:  # the body, c positions ago
        return wanted in ((">=", 1), (">", 0), ("=", 1)) and onehot_in(inner, name)
    if not (
        node.op == "="
        and node.right.value >= 1
        and isinstance(inner, E.Compare)
        and isinstance(inner.right, E.Number)
        and (inner.op, inner.right.value) in ((">=", 1), (">", 0))
    ):
        return False
    # #[j <= i] (#[k <= j] K >= 1) = c: the first K[t] was c - 1 positions ago, one t per position
    first, name = _count_through_definitions(inner.left, name)
    return first is not None and first.offset is None and onehot_in(first.body, name)


def false_at_first_position(node: E.Expr) -> bool:
    """Is node false at position 1 whatever the symbols? (A local count there is 0, any other count at most 1.)"""
    if isinstance(node, E.And):
        return false_at_first_position(node.left) or false_at_first_position(node.right)
    if isinstance(node, E.Named):
        return false_at_first_position(node.body)
    if not (isinstance(node, E.Compare) and isinstance(node.right, E.Number)):
        return False
    counted = node.left
    while isinstance(counted, E.Named):
        counted = counted.body
    if not isinstance(counted, E.CountOf):
        return False
    most = 0 if counted.offset not in (None, 0) else 1
    return not any(E.COMPARISONS[node.op](value, node.right.value) for value in range(most + 1))


def _count_through_definitions(node: E.Expr, name: str) -> tuple[E.CountOf | None, str]:
    """The count a (possibly named) count expression is, and what index `name` is called inside it."""
    while isinstance(node, E.Named):
        uses = [p for p, a in zip(node.params, node.args) if a == E.Var(name)]
        if len(uses) != 1:
            return None, name
        node, name = node.body, uses[0]
    return (node, name) if isinstance(node, E.CountOf) else (None, name)


class Lowering:
    def __init__(self, program: Program, pe: str, max_length: int, places: dict[str, str] | None = None):
        if pe not in COMPILED_ENCODINGS:
            refused = COMPILATIONS[pe].refused if pe in COMPILATIONS else ""
            raise CompileError(
                f"position encoding {pe!r}; the compiler builds {_listed(COMPILED_ENCODINGS, 'and')}"
                + (f" ({PE_NAMES[pe]}: {refused})" if refused else "")
            )
        self.program, self.pe, self.max_length = program, pe, max_length
        self.scheme = SCHEMES[pe]
        self.fragment = COMPILATIONS[pe].fragment  # the operations the program may use
        self.alphabet = program.alphabet
        self.places = places or {}
        self.context: list[str] = []  # the definitions being lowered, innermost last
        tabled = self.scheme.learned_table
        start_name = "position 1" if tabled else f"Q({BOS}) (the first position)"
        self.features = [Feature("1", 0, "token"), Feature(start_name, 0, "position" if tabled else "token")]
        self.token = {a: self._feature(f"Q({a})", 0, "token") for a in self.alphabet}
        self.position_flags: dict[tuple, int] = {}  # ("mod", m, r) / ("from", c) / ("cos", m) ... -> feature
        self.groups: dict[tuple, HeadGroup] = {}
        self.steps: list[Step] = []
        self.memo: dict[tuple, object] = {}
        self.definitions: dict[str, tuple[str, object]] = {}  # "prev[a]" -> ("Boolean" or "Count", value)
        self._inverse: int | None = None
        self.bounds: dict[int, float] = {}  # ramp feature -> bound of its value (others lie in [-1, 1])
        self.divided: dict[tuple, Affine] = {}  # a count held as its value (its form's items) -> its form over i

    # ------------------------------------------------------------ bookkeeping
    def _feature(self, name: str, level: int, source: str) -> int:
        if self.context and source in ("head", "mlp"):  # named after the definition it computes
            name = f"{self.context[-1]}: {name}"
        self.features.append(Feature(name, level, source))
        return len(self.features) - 1

    def level(self, form: Affine) -> int:
        return max((self.features[f].level for f in form), default=0)

    def where(self) -> str:
        if not self.context:
            return "the program's output"
        definition = self.context[-1].split("[")[0]
        place = self.places.get(definition)
        return f"definition `{self.context[-1]}`" + (f" ({place})" if place else "")

    def unsupported(self, node: E.Expr, why: str) -> CompileError:
        return CompileError(f"cannot compile `{E.show(node)}` in {self.where()}: {why}")

    @property
    def start(self) -> Affine:
        """The first-position flag: a learned position table's (APE), otherwise the symbol <bos>."""
        if not self.scheme.learned_table and BOS not in self.alphabet:
            raise CompileError(
                f"{self.where()} needs the first position, which --pe {self.pe} recognizes by its "
                f"symbol {BOS}; the alphabet ({' '.join(self.alphabet)}) lacks it: add it, or "
                f"compile with --pe {_listed(_compiled_where(_tabled), 'or')}"
            )
        return {START: 1.0}

    @property
    def inverse(self) -> int:
        """1/i: the average of the first-position flag."""
        if self._inverse is None:
            self._inverse = self.head("uniform", (), self.start, "1/i", "average over j <= i")
        return self._inverse

    def position_flag(self, key: tuple, name: str) -> int:
        if key not in self.position_flags:
            self.position_flags[key] = self._feature(name, 0, "position")
        return self.position_flags[key]

    def head(
        self,
        kind: str,
        pattern: tuple,
        value: Affine,
        name: str,
        label: str,
        *,
        offset: int | None = None,
        query=(),
        key=(),
        rotary: int = 0,
    ) -> int:
        """A value channel of the head group (layer, kind, pattern); returns its output feature."""
        inputs = max([self.level(value)] + [self.level(f) for f in (*query, *key)])
        layer = (inputs + 1) // 2
        group = self.groups.setdefault(
            (layer, kind, pattern),
            HeadGroup(layer, kind, label, offset, [dict(q) for q in query], [dict(k) for k in key], rotary),
        )
        output = self._feature(name, 2 * layer + 1, "head")
        group.channels.append((value, output, name))
        return output

    def check_gain(self, z: Affine, gain: float, name: str) -> None:
        bound = sum(abs(v) for v in z.values()) * gain + STEP_OFFSET
        if bound >= EXACT_STEP_INPUT:
            raise CompileError(
                f"the comparison `{name}` in {self.where()} has coefficients too large to threshold "
                f"exactly up to length {self.max_length} (|gain * z| up to {bound:.3g})"
            )

    def step(self, z: Affine, margin: float, name: str, output: int | None = None, weight: float = 1.0) -> int:
        """A feature that is 1 where z >= margin and 0 where z <= -margin (or adds to `output`)."""
        gain = 2 * STEP_OFFSET / margin
        self.check_gain(z, gain, name)
        layer = max(0, self.level(z) // 2)
        if output is None:
            output = self._feature(name, 2 * layer + 2, "mlp")
        else:
            self.features[output].level = max(self.features[output].level, 2 * layer + 2)
        self.steps.append(Step(layer, z, gain, output, weight, name))
        return output

    def ramp(self, z: Affine, scale: str, name: str) -> int:
        """A feature holding max(z, 0) for a count difference z: z is an integer (divided by i when
        averaged), so z = 0 or |z| >= the count margin, where silu(gain z) / gain is exact."""
        gain = STEP_OFFSET * (self.max_length if scale == "averaged" else 1.0)
        self.check_gain(z, gain, name)
        layer = max(0, self.level(z) // 2)
        output = self._feature(name, 2 * layer + 2, "mlp")
        self.bounds[output] = self.value_bound(z)
        self.steps.append(Step(layer, z, gain, output, 1.0, name, ramp=True))
        return output

    def value_bound(self, form: Affine) -> float:
        """A bound on |form|: every feature lies in [-1, 1] except ramps, whose bound is recorded."""
        return sum(abs(c) * self.bounds.get(f, 1.0) for f, c in form.items())

    # ------------------------------------------------------------ the program
    def lower_program(self) -> list[Affine]:
        """The output table's columns: O[s] for every symbol, or the accepted Boolean in every column."""
        target = self.program.target
        roots = [target.use(s) for s in self.alphabet] if self.program.output else [target.use()]
        check_nesting(roots[0])
        if self.program.output:
            return [self.boolean(root, {}) for root in roots]
        return [self.boolean(roots[0], {})] * len(self.alphabet)

    def lower(self, node: E.Expr, env: dict[str, str]):
        key = (id(node), tuple(sorted((k, v) for k, v in env.items() if k in node.free)))
        if key not in self.memo:
            handler = getattr(self, "_" + type(node).__name__, None)
            if handler is None:
                raise self.unsupported(
                    node,
                    f"{type(node).__name__} is outside the compiled subset",
                )
            self.memo[key] = handler(node, env)
        return self.memo[key]

    def boolean(self, node: E.Expr, env) -> Affine:
        return self.lower(node, env)

    def count(self, node: E.Expr, env) -> Count:
        return self.lower(node, env)

    def symbol(self, arg: E.SymbolArg, env) -> str:
        return env[arg.name] if isinstance(arg, E.Var) else arg

    # ------------------------------------------------------------ Booleans
    def _BoolConst(self, node, env) -> Affine:
        return {ONE: 1.0} if node.value else {}

    def _Token(self, node, env) -> Affine:
        return {self.token[self.symbol(node.symbol, env)]: 1.0}

    def _SymbolRelation(self, node, env) -> Affine:
        left, right = (self.alphabet.index(self.symbol(s, env)) for s in (node.left, node.right))
        return self._BoolConst(E.BoolConst(left == right if node.op == "=" else left < right), env)

    def _Periodic(self, node, env) -> Affine:
        if not self.fragment.periodic:
            tabled = _compiled_where(_compiles("periodic"))
            raise self.unsupported(
                node,
                f"MOD reads absolute positions, which only the {_listed(tuple(PE_NAMES[c] for c in tabled), 'or')} "
                f"table gives (--pe {_listed(tabled, 'or')}); {self.pe} has none",
            )
        return {self.position_flag(("mod", node.modulus, node.residue), E.show(node)): 1.0}

    def _Not(self, node, env) -> Affine:
        return _add((1.0, {ONE: 1.0}), (-1.0, self.boolean(node.operand, env)))

    def _And(self, node, env) -> Affine:
        return self.junction(node, [self.boolean(c, env) for c in _conjuncts(node)], every=True)

    def _Or(self, node, env) -> Affine:
        return self.junction(node, [self.boolean(c, env) for c in _disjuncts(node)], every=False)

    def junction(self, node: E.Expr, parts: list[Affine], every: bool) -> Affine:
        """and (every=True) / or of 0/1 forms: one step on their sum, after folding constants."""
        kept = []
        for part in parts:
            constant = _constant_of(part)
            if constant is None:
                kept.append(part)
            elif bool(constant) != every:  # a false conjunct or a true disjunct decides
                return part
        if not kept:
            return {ONE: 1.0} if every else {}
        if len(kept) == 1:
            return kept[0]
        threshold = len(kept) - BOOLEAN_MARGIN if every else BOOLEAN_MARGIN
        total = _add(*((1.0, p) for p in kept), (-threshold, {ONE: 1.0}))
        return {self.step(total, BOOLEAN_MARGIN, self.describe(node)): 1.0}

    def _Quantified(self, node, env) -> Affine:
        name = node.index.name
        if node.kind == "any":
            keyed = self.keyed(node, env)
            if keyed is not None:
                return keyed
        instances = [{**env, name: a} for a in self.alphabet]
        if node.kind == "any" and E.Token(node.index) in _conjuncts(node.body):
            # Q(t) holds for one t only: the alternatives exclude each other and their sum is the `or`.
            return _add(*((1.0, self.boolean(node.body, scope)) for scope in instances))
        return self.junction(node, [self.boolean(node.body, scope) for scope in instances], every=node.kind == "all")

    def _Compare(self, node, env) -> Affine:
        left, right = self.count(node.left, env), self.count(node.right, env)
        if left.scale == right.scale == "constant":
            return self._BoolConst(E.BoolConst(bool(E.COMPARISONS[node.op](left.constant, right.constant))), env)
        for count, other in ((left, right), (right, left)):
            if count.zero_or_one and other.scale == "constant":  # the comparison at 0 and at 1, as a line
                at = [
                    bool(E.COMPARISONS[node.op](*((v, other.constant) if count is left else (other.constant, v))))
                    for v in (0, 1)
                ]
                return _add((float(at[0]), {ONE: 1.0}), (float(at[1]) - float(at[0]), count.form))
        scale = self.common_scale(left, right)
        unit = self.unit(scale)
        margin = BOOLEAN_MARGIN / self.max_length if scale == "averaged" else BOOLEAN_MARGIN
        difference = _add((1.0, self.form(left, scale, node)), (-1.0, self.form(right, scale, node)))
        name = self.describe(node)

        def at_least(sign: float, slack: float) -> Affine:  # sign * difference + slack > 0
            return _add((sign, difference), (slack, unit))

        if node.op in (">=", ">", "<=", "<"):
            sign = 1.0 if node.op in (">=", ">") else -1.0
            slack = BOOLEAN_MARGIN if node.op in (">=", "<=") else -BOOLEAN_MARGIN
            return {self.step(at_least(sign, slack), margin, name): 1.0}
        both = self.step(at_least(1.0, BOOLEAN_MARGIN), margin, name)
        self.step(at_least(-1.0, BOOLEAN_MARGIN), margin, name, output=both)
        equal = {both: 1.0, ONE: -1.0}  # each side holds: 1 + 1 - 1
        return equal if node.op == "=" else _add((1.0, {ONE: 1.0}), (-1.0, equal))

    def form(self, count: Count, scale: str, node: E.Expr) -> Affine:
        """The count's form on `scale` (the one common_scale chose for `node`)."""
        if count.scale == "constant":
            return _add((count.constant, self.unit(scale)))
        if count.scale == "local" and scale == "averaged":
            return self.divided_by_i(count, node)
        return count.form

    def divided_by_i(self, count: Count, node: E.Expr) -> Affine:
        """A count held as its value x, divided by i to meet a count over every j <= i: x / i is the
        sum over t = 1..M of ([x >= t] - [x <= -t]) / i (x is an integer, |x| <= M), and a Boolean b
        divided by i is the ramp max(1/i + b - 1, 0): 1/i where b = 1, and where b = 0 the ramp's
        input 1/i - 1 is 0 (i = 1) or at most -1/2, as a ramp needs."""
        key = tuple(sorted(count.form.items()))
        if key in self.divided:
            return self.divided[key]
        constant = _constant_of(count.form)
        if constant is not None:  # `c ? k : k`
            return {self.inverse: constant}
        name = self.describe(node)
        if count.zero_or_one:
            booleans = [(1.0, count.form)]
        else:
            booleans = []
            for t in range(1, math.ceil(self.value_bound(count.form)) + 1):
                for sign in (1.0, -1.0):  # [x >= t] and [-x >= t]
                    at_least = _add((sign, count.form), (BOOLEAN_MARGIN - t, {ONE: 1.0}))
                    holds = self.step(at_least, BOOLEAN_MARGIN, f"{'' if sign > 0 else '-'}({name}) >= {t}")
                    booleans.append((sign, {holds: 1.0}))
        parts = []
        for sign, boolean in booleans:
            over_i = _add((1.0, {self.inverse: 1.0}), (1.0, boolean), (-1.0, {ONE: 1.0}))
            parts.append((sign, {self.ramp(over_i, "averaged", f"{E.show(node)} held as its value, / i"): 1.0}))
        self.divided[key] = _add(*parts)
        return self.divided[key]

    # ------------------------------------------------------------ counts
    def _Number(self, node, env) -> Count:
        return Count("constant", {}, node.value)

    def common_scale(self, *counts: Count) -> str:
        """The scale the non-constant counts meet on: averaged where one of them counts over every
        j <= i (the others are then divided by i, see `divided_by_i`), else local."""
        scales = {c.scale for c in counts} - {"constant"}
        return "averaged" if "averaged" in scales else scales.pop()

    def unit(self, scale: str) -> Affine:
        """The form of 1 on `scale`: 1/i when averaged."""
        return {self.inverse: 1.0} if scale == "averaged" else {ONE: 1.0}

    def _Arith(self, node, env) -> Count:
        left, right = self.count(node.left, env), self.count(node.right, env)
        if left.scale == right.scale == "constant":
            return Count("constant", {}, ARITH[node.op](left.constant, right.constant))
        scale = self.common_scale(left, right)
        a, b = self.form(left, scale, node), self.form(right, scale, node)
        if node.op in ("+", "-"):
            return Count(scale, _add((1.0, a), (1.0 if node.op == "+" else -1.0, b)))
        # min(a, b) = a - max(a - b, 0); max(a, b) = a + max(b - a, 0)
        sign = -1.0 if node.op == "min" else 1.0
        excess = self.ramp(_add((-sign, a), (sign, b)), scale, self.describe(node))
        both = left.zero_or_one and right.zero_or_one
        return Count(scale, _add((1.0, a), (sign, {excess: 1.0})), zero_or_one=both)

    def _Conditional(self, node, env) -> Count:
        condition = self.boolean(node.condition, env)
        yes, no = self.count(node.if_true, env), self.count(node.if_false, env)
        if _constant_of(condition) is not None:
            return yes if _constant_of(condition) else no
        if yes.scale == no.scale == "constant":  # a Boolean times a constant: a count held as its value
            form = _add((float(no.constant), {ONE: 1.0}), (float(yes.constant - no.constant), condition))
            return Count("local", form, zero_or_one={yes.constant, no.constant} <= {0, 1})
        scale = self.common_scale(yes, no)
        b = self.form(no, scale, node)
        x = _add((1.0, self.form(yes, scale, node)), (-1.0, b))
        # c x = max(x - M (1 - c), 0) - max(-x - M (1 - c), 0) for an integer M >= |x|: x - M and
        # -x - M are then 0 or at least the count margin where c = 0, as a ramp needs
        M = float(math.ceil(self.value_bound(x)))
        off = _add((M, {ONE: 1.0}), (-M, condition))
        name = self.describe(node)
        above = self.ramp(_add((1.0, x), (-1.0, off)), scale, f"{name} (above 0)")
        below = self.ramp(_add((-1.0, x), (-1.0, off)), scale, f"{name} (below 0)")
        both = yes.zero_or_one and no.zero_or_one
        return Count(scale, _add((1.0, b), (1.0, {above: 1.0}), (-1.0, {below: 1.0})), zero_or_one=both)

    def _CountOf(self, node, env) -> Count:
        body = self.boolean(node.body, env)
        name = self.describe(node)
        if node.offset is None:
            constant = _constant_of(body)
            if constant is not None:  # #[j <= i] true = i: its average is the constant 1
                return Count("averaged", {ONE: constant} if constant else {})
            return Count("averaged", {self.head("uniform", (), body, f"{name} / i", "average over j <= i"): 1.0})
        if not self.fragment.local:
            locating = _compiled_where(_compiles("local"))
            raise self.unsupported(
                node,
                f"the local relation j = i - c needs positions (--pe {_listed(locating, 'or')}); "
                f"{PE_NAMES[self.pe]} compiles C-RASP[] programs (counts over every j <= i) only",
            )
        if node.offset == 0:
            return Count("local", body, zero_or_one=True)
        exists = self.exists(node.offset)
        if _constant_of(body) is not None:
            return Count("local", exists if _constant_of(body) else {}, zero_or_one=True)
        looked_up = self.local_head(node.offset, body, f"{E.show(node.body)} at i - {node.offset}" + self.bound(env))
        both = _add((1.0, {looked_up: 1.0}), (1.0, exists), (-1.5, {ONE: 1.0}))
        return Count("local", {self.step(both, BOOLEAN_MARGIN, name): 1.0}, zero_or_one=True)

    def exists(self, offset: int) -> Affine:
        """[i > offset]: a position-table flag with a learned table (APE); otherwise (RoPE) a step
        on 1/i <= 1/(offset + 1)."""
        if self.scheme.learned_table:
            return {self.position_flag(("from", offset), f"i > {offset}"): 1.0}
        if ("from", offset) not in self.position_flags:
            threshold = 1 / (offset + 0.5)
            margin = min(1 / offset - threshold, threshold - 1 / (offset + 1))
            self.position_flags[("from", offset)] = self.step(
                {ONE: threshold, self.inverse: -1.0}, margin, f"i > {offset}"
            )
        return {self.position_flags[("from", offset)]: 1.0}

    def local_head(self, offset: int, value: Affine, name: str) -> int:
        if self.scheme.learned_table:
            return self.ape_local_head(offset, value, name)
        return self.rope_local_head(offset, value, name)

    def ape_local_head(self, offset: int, value: Affine, name: str) -> int:
        """Score beta * sum_m cos(2 pi (p_j - p_i + c) / m): the moduli's product exceeds the longest
        string, so only j = i - c reaches the full sum; key codes are 0 at position 1, whose own
        score is a constant between the peak and every other key (the sink)."""
        moduli = local_moduli(self.max_length)
        gap = 1 - math.cos(2 * math.pi / max(moduli))
        beta = 2 * LOCAL_SCORE_MARGIN / gap
        query, key = [], []
        for m in moduli:
            cos_q = self.position_flag(("cos", m), f"cos(2 pi i / {m})")
            sin_q = self.position_flag(("sin", m), f"sin(2 pi i / {m})")
            cos_k = self.position_flag(("key cos", m), f"cos(2 pi i / {m}), 0 at i = 1")
            sin_k = self.position_flag(("key sin", m), f"sin(2 pi i / {m}), 0 at i = 1")
            angle = 2 * math.pi * offset / m  # the query turned back by c positions
            query += [
                {cos_q: beta * math.cos(angle), sin_q: beta * math.sin(angle)},
                {cos_q: -beta * math.sin(angle), sin_q: beta * math.cos(angle)},
            ]
            key += [{cos_k: 1.0}, {sin_k: 1.0}]
        query.append({ONE: beta * (len(moduli) - gap / 2)})
        key.append({START: 1.0})
        return self.head("local", (offset,), value, name, f"j = i - {offset}", offset=offset, query=query, key=key)

    def rope_local_head(self, offset: int, value: Affine, name: str) -> int:
        """Constant queries at phase -c theta_f on every rotary pair, keys (1, 0) except at the first
        position (the sink, scored in a dimension RoPE does not turn)."""
        half = ROPE_DIM // 2
        frequencies = [ROPE_BASE ** (-f / half) for f in range(half)]
        gap = rope_gap(offset, self.max_length)
        beta = 2 * LOCAL_SCORE_MARGIN / gap
        query = [{ONE: beta * math.cos(offset * th)} for th in frequencies] + [
            {ONE: -beta * math.sin(offset * th)} for th in frequencies
        ]
        key = [_add((1.0, {ONE: 1.0}), (-1.0, self.start)) for _ in frequencies] + [{} for _ in frequencies]
        query.append({ONE: beta * (half - gap / 2)})
        key.append(self.start)
        return self.head(
            "local", (offset,), value, name, f"j = i - {offset}", offset=offset, query=query, key=key, rotary=ROPE_DIM
        )

    # ------------------------------------------------------------ the keyed-head rewrite
    def keyed(self, node: E.Quantified, env) -> Affine | None:
        """`any t: Q(t) and #[j <= i] (K[t] and R) >= 1 [and S]` with K one-hot in t, R and S free of
        t, and K and R never both true at the first position: one keyed head per R."""
        name = node.index.name
        parts = _conjuncts(node.body)
        with_index = [p for p in parts if name in p.free]
        if E.Token(node.index) not in with_index or len(with_index) != 2:
            return None
        test = next(p for p in with_index if p is not E.Token(node.index))
        if not (
            isinstance(test, E.Compare)
            and isinstance(test.left, E.CountOf)
            and test.left.offset is None
            and isinstance(test.right, E.Number)
            and (test.op, test.right.value) in ((">=", 1), (">", 0))
        ):
            return None
        inner = _conjuncts(test.left.body)
        keyed_parts = [p for p in inner if name in p.free]
        if len(keyed_parts) != 1 or not onehot_in(keyed_parts[0], name):
            return None
        key_node, rest = keyed_parts[0], [p for p in inner if name not in p.free]
        rest_node = rest[0] if rest else E.TRUE
        for r in rest[1:]:
            rest_node = E.And(rest_node, r)
        if not false_at_first_position(E.And(key_node, rest_node)):
            return None
        keys = [self.boolean(key_node, {**env, name: a}) for a in self.alphabet]
        queries = [{self.token[a]: MATCH_SCORE} for a in self.alphabet]
        # The sink (position 1) must add nothing: R there is replaced by 0.
        rest_form = _add((1.0, self.boolean(rest_node, env)), (-1.0, self.start))
        value = {
            self.step(
                _add((1.0, rest_form), (-BOOLEAN_MARGIN, {ONE: 1.0})),
                BOOLEAN_MARGIN,
                f"{E.show(rest_node)} and i > 1" + self.bound(env),
            ): 1.0
        }
        pattern = tuple(tuple(sorted(k.items())) for k in keys)
        found = self.head(
            "keyed",
            pattern,
            value,
            f"{self.describe(test.left)} / matches",
            f"key {E.show(key_node)}, query: the current symbol as {name}",
            query=queries + [{ONE: MATCH_SCORE / 2}],
            key=keys + [self.start],
        )
        hit = {
            self.step(
                {found: 1.0, self.inverse: -BOOLEAN_MARGIN}, BOOLEAN_MARGIN / self.max_length, self.describe(node)
            ): 1.0
        }
        others = [self.boolean(p, env) for p in parts if name not in p.free]
        return self.junction(node, [hit] + others, every=True) if others else hit

    # ------------------------------------------------------------ definitions
    def _NamedBool(self, node, env) -> Affine:
        return self.named(node, env)

    def _NamedCount(self, node, env) -> Count:
        return self.named(node, env)

    def named(self, node: E.Named, env):
        bound = {p: self.symbol(a, env) for p, a in zip(node.params, node.args)}
        label = node.name + (f"[{', '.join(bound[p] for p in node.params)}]" if node.params else "")
        self.context.append(label)
        try:
            value = self.lower(node.body, bound)
        finally:
            self.context.pop()
        self.definitions[label] = (node.type, value)
        return value

    def describe(self, node: E.Expr) -> str:
        text = E.show(node)
        return text if len(text) <= 60 else text[:57] + "..."

    def bound(self, env: dict[str, str]) -> str:
        return f" ({', '.join(f'{k}={v}' for k, v in sorted(env.items()))})" if env else ""


def rope_gap(offset: int, max_length: int) -> float:
    """How far below the peak sum of cosines every other distance 0..max_length scores."""
    half = ROPE_DIM // 2
    frequencies = ROPE_BASE ** (-np.arange(half) / half)
    distances = np.arange(-offset, max_length + 1)
    distances = distances[distances != 0]
    return float(half - np.cos(np.outer(distances, frequencies)).sum(axis=1).max())
