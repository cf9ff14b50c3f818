"""Expressions of C-RASP[periodic, local] as immutable, interned nodes.

Every node is either a Boolean (a predicate P(i)) or a Count (an integer C(i)); both are
evaluated at every position i of a string. Nodes are built by operator overloading:

    >>> a_count = count(Q("a"))
    >>> b_count = count(Q("b"))
    >>> more_a = (a_count > b_count).named("more_a")

Nodes are interned (hash-consed): building the same expression twice returns the same object,
so structural equality is identity (`x is y`) and every evaluator can memoize by `id`. This is
also why `==` on a Count builds a comparison node instead of testing equality, as in tracr.

Families indexed by alphabet symbols use index variables (`Var("t")`), which appear in
`Q(t)`, in the arguments of a named family `prev(t)`, in `t.is_symbol("a")` and `u.precedes(t)`
(alphabet order), and are bound by
the finite quantifiers `any_(t, body)` / `all_(t, body)` or by the parameters of a family.

Every integer written in a program (a count constant, the distance c of `j = i - c`, MOD's m and r)
lies within +-MAX_CONSTANT = 2**40. A count is at most the length of the string, so sums of
counts and such constants stay far inside the int64 range (+-2**63) in which the fast evaluator
computes; a sum that leaves it nevertheless (definitions each doubling the previous one) is an
error there, never a wrapped value.

Programs may nest deeply (thousands of brackets or of chained definitions): the recursive
algorithms over nodes (printing, parsing, evaluating) run on `crasp.trampoline`, and nodes check
only their direct children, so no depth limit applies beyond memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Union

from crasp.trampoline import Computation, trampoline

BOOL = "Boolean"
COUNT = "Count"
MAX_CONSTANT = 2**40


class CraspError(Exception):
    """Base class of every error a user can make with a C-RASP program."""


class CraspTypeError(CraspError, TypeError):
    """A Boolean was used where a Count is needed, or the other way round."""


class CraspScopeError(CraspError, ValueError):
    """An index variable is used where it is not bound, or is bound twice."""


class CraspRangeError(CraspError, ValueError):
    """An integer outside the range the lab computes exactly (see MAX_CONSTANT)."""


def out_of_range(what: str, written: str) -> CraspRangeError:
    return CraspRangeError(
        f"{what} {written} is outside the accepted range: integers from -{MAX_CONSTANT} to "
        f"{MAX_CONSTANT} (2**40), which keeps every count exact"
    )


def require_constant(what: str, value: int) -> None:
    if abs(value) > MAX_CONSTANT:
        raise out_of_range(what, str(value))


@dataclass(frozen=True)
class Var:
    """An index variable ranging over the program's alphabet (the `t` of `any t:` or `prev[t]`)."""

    name: str

    def is_symbol(self, symbol: str) -> "SymbolRelation":
        """The index equals this symbol: a constant for each unrolled member of a family."""
        return SymbolRelation("=", self, symbol)

    def precedes(self, other: "SymbolArg") -> "SymbolRelation":
        """This index comes before `other` in the alphabet's order."""
        return SymbolRelation("<", self, other)

    def __str__(self) -> str:
        return self.name


SymbolArg = Union[Var, str]
"""An argument of Q(...) or of a family: an index variable or a literal symbol."""

_INTERNED: dict[tuple, "Expr"] = {}


def _key_part(value) -> object:
    if isinstance(value, Expr):
        return ("expr", id(value))
    if isinstance(value, tuple):
        return tuple(_key_part(v) for v in value)
    return (type(value).__name__, value)


class Expr:
    """A node. Subclasses list their fields in `_fields`; instances are interned by value."""

    _fields: tuple[str, ...] = ()
    type: str
    free: frozenset[str]  # index variables this node depends on and does not bind itself
    quantified: frozenset[str]  # index variables bound by quantifiers inside (for shadowing checks)

    def __new__(cls, *values):
        if len(values) != len(cls._fields):
            raise TypeError(f"{cls.__name__} takes {len(cls._fields)} fields, got {len(values)}")
        key = (cls.__name__,) + tuple(_key_part(v) for v in values)
        node = _INTERNED.get(key)
        if node is None:
            node = object.__new__(cls)
            for name, value in zip(cls._fields, values):
                object.__setattr__(node, name, value)
            node._check()
            _INTERNED[key] = node
        return node

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} nodes are immutable")

    def __reduce__(self):
        return (type(self), tuple(getattr(self, f) for f in self._fields))

    __hash__ = object.__hash__

    def _check(self) -> None:
        raise NotImplementedError

    def _set(self, type_: str, free=frozenset(), quantified=frozenset()) -> None:
        object.__setattr__(self, "type", type_)
        object.__setattr__(self, "free", frozenset(free))
        object.__setattr__(self, "quantified", frozenset(quantified))

    def children(self) -> tuple["Expr", ...]:
        return tuple(getattr(self, f) for f in self._fields if isinstance(getattr(self, f), Expr))

    def named(self, name: str) -> "Named":
        """Give this expression a name: it becomes a definition and a row of the trace."""
        if self.free:
            raise CraspScopeError(
                f"`{name}` depends on index {sorted(self.free)}: define it with family(...) "
                "so that the index is a parameter"
            )
        return Named(name, (), (), self)

    def __bool__(self):
        raise CraspTypeError(
            f"`{show(self)}` is a C-RASP expression, not a Python truth value: "
            "use & | ~ instead of and/or/not, and compare expressions only inside programs"
        )

    def __repr__(self) -> str:
        return f"<{self.type} {show(self)}>"


def _need(node: Expr, role: str, child: object, wanted: str) -> Expr:
    if not isinstance(child, Expr):
        raise CraspTypeError(f"{role} of `{type(node).__name__}` must be a {wanted}, got the Python value {child!r}")
    if child.type != wanted:
        raise CraspTypeError(f"{role} `{show(child)}` is a {child.type}, but a {wanted} is needed here")
    return child


def _quantified_in(parts: tuple[Expr, ...]) -> frozenset[str]:
    quantified: set[str] = set()
    for part in parts:
        quantified |= part.quantified
    return frozenset(quantified)


class BoolExpr(Expr):
    def __and__(self, other):
        return And(self, as_bool(other))

    def __rand__(self, other):
        return And(as_bool(other), self)

    def __or__(self, other):
        return Or(self, as_bool(other))

    def __ror__(self, other):
        return Or(as_bool(other), self)

    def __invert__(self):
        return Not(self)

    def then(self, if_true, if_false) -> "Conditional":
        """`P ? C1 : C2`."""
        return Conditional(self, as_count(if_true), as_count(if_false))


class CountExpr(Expr):
    def __add__(self, other):
        return Arith("+", self, as_count(other))

    def __radd__(self, other):
        return Arith("+", as_count(other), self)

    def __sub__(self, other):
        return Arith("-", self, as_count(other))

    def __rsub__(self, other):
        return Arith("-", as_count(other), self)

    def __lt__(self, other):
        return Compare("<", self, as_count(other))

    def __le__(self, other):
        return Compare("<=", self, as_count(other))

    def __gt__(self, other):
        return Compare(">", self, as_count(other))

    def __ge__(self, other):
        return Compare(">=", self, as_count(other))

    def __eq__(self, other):
        return Compare("=", self, as_count(other))  # type: ignore[override]

    def __ne__(self, other):
        return Compare("!=", self, as_count(other))  # type: ignore[override]

    __hash__ = Expr.__hash__

    def __mul__(self, other):
        raise CraspTypeError(
            f"`{show(self)} * ...`: C-RASP has no product of counts (only +, -, min, max and comparisons)"
        )

    __rmul__ = __mul__

    def __mod__(self, other):
        raise CraspTypeError(
            f"`{show(self)} % ...`: C-RASP has no count modulo m; "
            "the periodic predicate MOD(m, r) tests the position only"
        )


def as_bool(value) -> BoolExpr:
    if isinstance(value, bool):
        return BoolConst(value)
    if isinstance(value, Expr) and value.type == BOOL:
        return value  # type: ignore[return-value]
    shown = show(value) if isinstance(value, Expr) else repr(value)
    raise CraspTypeError(
        f"`{shown}` is used as a Boolean, but it is a {value.type if isinstance(value, Expr) else type(value).__name__}"
    )


def as_count(value) -> CountExpr:
    if isinstance(value, bool):
        raise CraspTypeError(f"the Python bool {value} is used as a Count; write 1 or 0")
    if isinstance(value, int):
        return Number(value)
    if isinstance(value, Expr) and value.type == COUNT:
        return value  # type: ignore[return-value]
    shown = show(value) if isinstance(value, Expr) else repr(value)
    raise CraspTypeError(
        f"`{shown}` is used as a Count, but it is a {value.type if isinstance(value, Expr) else type(value).__name__}"
    )


# ---------------------------------------------------------------- Boolean nodes


class BoolConst(BoolExpr):
    _fields = ("value",)
    value: bool

    def _check(self):
        if not isinstance(self.value, bool):
            raise CraspTypeError(f"a Boolean constant must be True or False, got {self.value!r}")
        self._set(BOOL)


class Token(BoolExpr):
    """Q_a(i): the symbol at position i is a (a literal symbol or an index variable)."""

    _fields = ("symbol",)
    symbol: SymbolArg

    def _check(self):
        if isinstance(self.symbol, Var):
            self._set(BOOL, {self.symbol.name})
        elif isinstance(self.symbol, str):
            self._set(BOOL)
        else:
            raise CraspTypeError(f"Q(...) takes a symbol (str) or an index Var, got {self.symbol!r}")


class SymbolRelation(BoolExpr):
    """`t = "a"` or `u < t`: a relation between symbols in the alphabet's order, each side an index
    variable or a literal symbol. Sugar over the finite alphabet: for every unrolled member of a
    family it is the constant true or false."""

    _fields = ("op", "left", "right")
    op: str
    left: SymbolArg
    right: SymbolArg

    def _check(self):
        if self.op not in ("=", "<"):
            raise CraspTypeError(f"symbols are related by `=` or `<` (alphabet order), got {self.op!r}")
        for side in (self.left, self.right):
            if not isinstance(side, (Var, str)):
                raise CraspTypeError(f"a symbol relation relates index Vars and symbol strings, got {side!r}")
        self._set(BOOL, {side.name for side in (self.left, self.right) if isinstance(side, Var)})


class Not(BoolExpr):
    _fields = ("operand",)
    operand: BoolExpr

    def _check(self):
        _need(self, "the operand of `not`", self.operand, BOOL)
        self._set(BOOL, self.operand.free, self.operand.quantified)


class _BoolBinary(BoolExpr):
    _fields = ("left", "right")
    left: BoolExpr
    right: BoolExpr
    word = ""

    def _check(self):
        _need(self, f"the left side of `{self.word}`", self.left, BOOL)
        _need(self, f"the right side of `{self.word}`", self.right, BOOL)
        self._set(BOOL, self.left.free | self.right.free, _quantified_in((self.left, self.right)))


class And(_BoolBinary):
    word = "and"


class Or(_BoolBinary):
    word = "or"


COMPARISONS: dict[str, Callable] = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
}


class Compare(BoolExpr):
    """C1(i) op C2(i), both counts at the same position."""

    _fields = ("op", "left", "right")
    op: str
    left: CountExpr
    right: CountExpr

    def _check(self):
        if self.op not in COMPARISONS:
            raise CraspTypeError(f"unknown comparison `{self.op}`; accepted: {' '.join(COMPARISONS)}")
        _need(self, f"the left side of `{self.op}`", self.left, COUNT)
        _need(self, f"the right side of `{self.op}`", self.right, COUNT)
        self._set(BOOL, self.left.free | self.right.free, _quantified_in((self.left, self.right)))


class Periodic(BoolExpr):
    """MOD_m^r(i): i = r (mod m), positions counted from 1 (BOS is position 1)."""

    _fields = ("modulus", "residue")
    modulus: int
    residue: int

    def _check(self):
        m, r = self.modulus, self.residue
        if not (isinstance(m, int) and isinstance(r, int) and m >= 1 and 0 <= r < m):
            raise CraspTypeError(f"MOD({m}, {r}) needs integers m >= 1 and 0 <= r < m")
        require_constant("the modulus m of MOD(m, r)", m)
        self._set(BOOL)


class Quantified(BoolExpr):
    """`any t: P[t]` or `all t: P[t]`: a finite or/and over the alphabet (sugar)."""

    _fields = ("kind", "index", "body")
    kind: str
    index: Var
    body: BoolExpr

    def _check(self):
        if self.kind not in ("any", "all"):
            raise CraspTypeError(f"a quantifier is `any` or `all`, got {self.kind!r}")
        _need(self, f"the body of `{self.kind} {self.index}:`", self.body, BOOL)
        name = self.index.name
        if name in self.body.quantified:
            raise CraspScopeError(
                f"`{self.kind} {name}:` contains another quantifier over `{name}`; give the inner index another name"
            )
        self._set(BOOL, self.body.free - {name}, self.body.quantified | {name})


# ---------------------------------------------------------------- Count nodes


class CountOf(CountExpr):
    """`#[j <= i] P(j)`, or with the local relation `#[j <= i, j = i - c] P(j)` when offset = c."""

    _fields = ("body", "offset")
    body: BoolExpr
    offset: int | None

    def _check(self):
        _need(self, "the body of a count #[j <= i]", self.body, BOOL)
        if self.offset is not None:
            if not (isinstance(self.offset, int) and self.offset >= 0):
                raise CraspTypeError(f"the local relation j = i - c needs an integer c >= 0, got {self.offset!r}")
            require_constant("the distance c of j = i - c", self.offset)
        self._set(COUNT, self.body.free, self.body.quantified)


class Number(CountExpr):
    _fields = ("value",)
    value: int

    def _check(self):
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise CraspTypeError(f"a count constant must be an integer, got {self.value!r}")
        require_constant("the count constant", self.value)
        self._set(COUNT)


class Arith(CountExpr):
    _fields = ("op", "left", "right")
    op: str
    left: CountExpr
    right: CountExpr

    def _check(self):
        if self.op not in ("+", "-", "min", "max"):
            raise CraspTypeError(f"unknown count operation {self.op!r}; accepted: + - min max")
        _need(self, f"the left operand of `{self.op}`", self.left, COUNT)
        _need(self, f"the right operand of `{self.op}`", self.right, COUNT)
        self._set(COUNT, self.left.free | self.right.free, _quantified_in((self.left, self.right)))


class Conditional(CountExpr):
    """`P ? C1 : C2`."""

    _fields = ("condition", "if_true", "if_false")
    condition: BoolExpr
    if_true: CountExpr
    if_false: CountExpr

    def _check(self):
        _need(self, "the condition of `? :`", self.condition, BOOL)
        _need(self, "the value after `?`", self.if_true, COUNT)
        _need(self, "the value after `:`", self.if_false, COUNT)
        parts = (self.condition, self.if_true, self.if_false)
        self._set(COUNT, frozenset().union(*(p.free for p in parts)), _quantified_in(parts))


# ---------------------------------------------------------------- named definitions


class Named(Expr):
    """A use of the definition `name[params] := body` with the given arguments.

    The body is its own scope: it sees only the parameters. An argument is an index variable of
    the caller's scope or a literal symbol."""

    _fields = ("name", "params", "args", "body")
    name: str
    params: tuple[str, ...]
    args: tuple[SymbolArg, ...]
    body: Expr

    def _check(self):
        if not isinstance(self.body, Expr):
            raise CraspTypeError(f"the definition of `{self.name}` must be an expression, got {self.body!r}")
        if len(self.args) != len(self.params):
            raise CraspScopeError(
                f"`{self.name}` takes {len(self.params)} index argument(s) "
                f"[{', '.join(self.params)}], got {len(self.args)}"
            )
        if len(set(self.params)) != len(self.params):
            raise CraspScopeError(f"`{self.name}` names a parameter twice: {list(self.params)}")
        undeclared = self.body.free - set(self.params)
        if undeclared:
            raise CraspScopeError(
                f"the definition of `{self.name}` uses index "
                f"{', '.join(sorted(undeclared))}, which is not among its parameters "
                f"[{', '.join(self.params)}]"
            )
        for arg in self.args:
            if not isinstance(arg, (Var, str)):
                raise CraspTypeError(f"an argument of `{self.name}` must be an index Var or a symbol, got {arg!r}")
        free = {a.name for a in self.args if isinstance(a, Var)}
        object.__setattr__(self, "__class__", NamedBool if self.body.type == BOOL else NamedCount)
        self._set(self.body.type, free)

    def __call__(self, *args: SymbolArg) -> "Named":
        """Use the same definition with other arguments: `prev(t)` -> `prev(s)`."""
        return Named(self.name, self.params, tuple(args), self.body)


class NamedBool(Named, BoolExpr):
    pass


class NamedCount(Named, CountExpr):
    pass


# ---------------------------------------------------------------- constructors of the DSL


def Q(symbol: SymbolArg) -> Token:
    """Q_a(i): position i holds the symbol a."""
    return Token(symbol)


TRUE = BoolConst(True)
FALSE = BoolConst(False)


def count(body, offset: int | None = None) -> CountOf:
    """`#[j <= i] body(j)`; with offset=c, `#[j <= i, j = i - c] body(j)` (body held c positions ago)."""
    return CountOf(as_bool(body), offset)


def MOD(modulus: int, residue: int) -> Periodic:
    return Periodic(modulus, residue)


def min_(a, b) -> Arith:
    return Arith("min", as_count(a), as_count(b))


def max_(a, b) -> Arith:
    return Arith("max", as_count(a), as_count(b))


def cond(condition, if_true, if_false) -> Conditional:
    return Conditional(as_bool(condition), as_count(if_true), as_count(if_false))


def any_(index: Var, body) -> Quantified:
    return Quantified("any", index, as_bool(body))


def all_(index: Var, body) -> Quantified:
    return Quantified("all", index, as_bool(body))


def family(name: str, params: list[str] | tuple[str, ...], build: Callable[..., Expr]) -> Callable[..., Named]:
    """Define `name[params] := build(*params)` and return a function that uses it:

    >>> prev = family("prev", ["t"], lambda t: count(Q(t), offset=1) >= 1)
    >>> prev("<bos>")        # the previous token is <bos>
    """
    params = tuple(params)
    body = build(*(Var(p) for p in params))
    if not isinstance(body, Expr):
        raise CraspTypeError(f"the family `{name}` must build an expression, got {body!r}")

    def use(*args: SymbolArg) -> Named:
        return Named(name, params, tuple(args), body)

    use(*(Var(p) for p in params))  # checks the definition now, where it is written

    use.__name__ = name
    return use


def walk(root: Expr, into_definitions: bool = True) -> Iterator[Expr]:
    """Every node reachable from root, each once, children first. With into_definitions=False
    the uses of named definitions are visited but not their bodies: walking every definition of
    a program so costs the program's size, where following the bodies would cost quadratic time
    on a chain of definitions each using the previous one."""
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in seen:
            continue
        if expanded:
            seen.add(id(node))
            yield node
        else:
            stack.append((node, True))
            if into_definitions or not isinstance(node, Named):
                stack.extend((child, False) for child in reversed(node.children()))


def symbols_used(root: Expr) -> set[str]:
    """Literal symbols that appear in Q(...), index tests and family arguments of root's own
    definition (not in the bodies of the definitions it uses)."""
    found: set[str] = set()
    for node in walk(root, into_definitions=False):
        if isinstance(node, Token) and isinstance(node.symbol, str):
            found.add(node.symbol)
        elif isinstance(node, SymbolRelation):
            found.update(side for side in (node.left, node.right) if isinstance(side, str))
        elif isinstance(node, Named):
            found.update(a for a in node.args if isinstance(a, str))
    return found


# ---------------------------------------------------------------- printing (papers' notation)

# Binding strength: larger binds tighter. Quantifiers and `? :` extend as far right as possible.
_LOOSEST, _OR, _AND, _NOT, _COMPARE, _SUM, _ATOM = range(7)


def show_symbol(arg: SymbolArg) -> str:
    if isinstance(arg, Var):
        return arg.name
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _precedence(node: Expr) -> int:
    if isinstance(node, (Quantified, Conditional)):
        return _LOOSEST
    if isinstance(node, Or):
        return _OR
    if isinstance(node, And):
        return _AND
    if isinstance(node, Not):
        return _NOT
    if isinstance(node, (Compare, SymbolRelation)):
        return _COMPARE
    if isinstance(node, Arith) and node.op in "+-":
        return _SUM
    if isinstance(node, Number) and node.value < 0:
        return _SUM
    return _ATOM


def show(node: Expr) -> str:
    """The expression in the text syntax (the parser reads it back to the same node)."""
    return trampoline(_show(node))


def _wrapped(node: Expr, at_least: int) -> Computation[str]:
    text = yield _show(node)
    return f"({text})" if _precedence(node) < at_least else text


def _show(node: Expr) -> Computation[str]:
    if isinstance(node, BoolConst):
        return "true" if node.value else "false"
    if isinstance(node, Token):
        return f"Q({show_symbol(node.symbol)})"
    if isinstance(node, SymbolRelation):
        return f"{show_symbol(node.left)} {node.op} {show_symbol(node.right)}"
    if isinstance(node, Not):
        return f"not {(yield _wrapped(node.operand, _NOT))}"
    if isinstance(node, (And, Or)):
        level = _precedence(node)
        # Left-nested chains print without parentheses; the parser builds them left-nested too.
        return f"{(yield _wrapped(node.left, level))} {node.word} {(yield _wrapped(node.right, level + 1))}"
    if isinstance(node, Compare):
        return f"{(yield _wrapped(node.left, _SUM))} {node.op} {(yield _wrapped(node.right, _SUM))}"
    if isinstance(node, Periodic):
        return f"MOD({node.modulus}, {node.residue})"
    if isinstance(node, Quantified):
        return f"{node.kind} {node.index.name}: {(yield _show(node.body))}"
    if isinstance(node, CountOf):
        relation = "" if node.offset is None else f", j = i - {node.offset}"
        return f"#[j <= i{relation}] {(yield _wrapped(node.body, _ATOM))}"
    if isinstance(node, Number):
        return str(node.value)
    if isinstance(node, Arith):
        if node.op in ("min", "max"):
            return f"{node.op}({(yield _show(node.left))}, {(yield _show(node.right))})"
        return f"{(yield _wrapped(node.left, _SUM))} {node.op} {(yield _wrapped(node.right, _SUM + 1))}"
    if isinstance(node, Conditional):
        return (
            f"{(yield _wrapped(node.condition, _OR))} ? {(yield _wrapped(node.if_true, _OR))}"
            f" : {(yield _wrapped(node.if_false, _LOOSEST))}"
        )
    if isinstance(node, Named):
        if not node.params:
            return node.name
        return f"{node.name}[{', '.join(show_symbol(a) for a in node.args)}]"
    raise TypeError(f"not a C-RASP node: {node!r}")
