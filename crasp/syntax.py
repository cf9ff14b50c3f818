"""The text syntax of C-RASP programs, close to the papers' notation.

    // comments run from // to the end of the line
    alphabet: <bos> <sep> <eos> a b        // symbols separated by spaces
    output: O                              // or `accept: NAME` for a language program
    prev[t] := #[j <= i, j = i - 1] Q(t) >= 1
    after_sep := #[j <= i] Q("<sep>") >= 1
    O[s] := after_sep and any t: Q(t) and prev[s]

Literal symbols are quoted ("a"); bare names are index variables (bound by `any t:`, `all t:` or
a definition's parameters) or definitions. A definition may continue on indented lines.
Definitions may appear in any order as long as they form no cycle. Integers lie within +-2**40
(crasp.expr.MAX_CONSTANT). Program files are UTF-8 text; a byte-order mark is accepted.

An alphabet line that ends with `...` makes the program alphabet-generic: it reads the symbols
listed before `...` (the only ones it may quote, at least one) and whatever other symbols the
task it runs on has, which `any t:`, `all t:` and families range over. `parse(text, symbols=...)`
says which symbols `...` stands for; the program's alphabet is then `symbols` in their order,
followed by any listed symbol that `symbols` lacks. A task program typically declares
`alphabet: <bos> <sep> <eos> ...`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from crasp import expr as E
from crasp.expr import CraspError
from crasp.program import CraspProgramError, Definition, Program
from crasp.trampoline import Computation, trampoline

GENERIC_MARK = "..."  # last word of a generic program's alphabet line: "and the task's other symbols"
KEYWORDS = {"and", "or", "not", "true", "false", "any", "all", "min", "max", "Q", "MOD", "alphabet", "output", "accept"}
_COMPARE_OPS = ("<=", ">=", "!=", "==", "=", "<", ">")
# symbol relation written -> (relation, negated, sides swapped), over `=` and `<` (alphabet order)
_SYMBOL_RELATIONS = {
    "=": ("=", False, False),
    "==": ("=", False, False),
    "!=": ("=", True, False),
    "<": ("<", False, False),
    ">": ("<", False, True),
    ">=": ("<", True, False),
    "<=": ("<", True, True),
}
_TOKEN = re.compile(
    r"""
    (?P<space>[ \t]+) | (?P<comment>//[^\n]*) | (?P<newline>\n)
  | (?P<number>\d+) | (?P<name>[A-Za-z_][A-Za-z_0-9]*) | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<op>:=|<=|>=|!=|==|[=<>+\-()\[\],:?\#])
""",
    re.VERBOSE,
)


class CraspSyntaxError(CraspError, ValueError):
    """A program text that cannot be read, with the place (file:line:column) and a caret."""

    def __init__(self, message: str, source: str, line: int, column: int, line_text: str):
        self.message, self.source, self.line, self.column = message, source, line, column
        caret = " " * (column - 1) + "^"
        super().__init__(f"{source}:{line}:{column}: {message}\n  {line_text}\n  {caret}")


@dataclass(frozen=True)
class _Tok:
    kind: str  # number, name, string, op, end
    text: str
    line: int
    column: int


class _Source:
    def __init__(self, text: str, name: str):
        self.text, self.name = text, name
        self.lines = text.split("\n")

    def error(self, message: str, line: int, column: int) -> CraspSyntaxError:
        line_text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return CraspSyntaxError(message, self.name, line, column, line_text)

    def tokens(self, line: int, column: int, text: str) -> list[_Tok]:
        """Tokens of `text`, which starts at (line, column) of the source."""
        out: list[_Tok] = []
        pos = 0
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if not match:
                raise self.error(f"unexpected character {text[pos]!r}", line, column)
            kind, value = match.lastgroup, match.group()
            if kind == "newline":
                line, column = line + 1, 1
            else:
                if kind not in ("space", "comment"):
                    out.append(_Tok(kind, value, line, column))
                column += len(value)
            pos = match.end()
        out.append(_Tok("end", "", line, column))
        return out


@dataclass(frozen=True)
class AlphabetLine:
    """The alphabet line as written: the listed symbols, where each is, and whether `...` ends it."""

    symbols: tuple[str, ...]
    places: tuple[tuple[int, int], ...]  # (line, column) of each listed symbol
    generic: bool

    def alphabet(self, symbols: Sequence[str] | None) -> tuple[str, ...]:
        """The program's alphabet: a generic program reads `symbols` (in their order) and then any
        listed symbol they lack; a fixed one reads what it lists."""
        if not self.generic or symbols is None:
            return self.symbols
        return tuple(symbols) + tuple(s for s in self.symbols if s not in symbols)


@dataclass
class _Statement:
    head: _Tok  # the name being defined
    params: tuple[str, ...]
    body: list[_Tok]


def _unquote(token: _Tok) -> str:
    return re.sub(r"\\(.)", r"\1", token.text[1:-1])


def parse(text: str, source: str = "<program>", symbols: Sequence[str] | None = None) -> Program:
    """Read a program; every error names source:line:column and shows the place. `symbols` are
    the symbols that `...` stands for in a generic program's alphabet line (see the module
    docstring); a program with a fixed alphabet ignores them."""
    return parse_with_alphabet_line(text, source, symbols)[0]


def parse_with_alphabet_line(
    text: str, source: str = "<program>", symbols: Sequence[str] | None = None
) -> tuple[Program, AlphabetLine]:
    """`parse`, and the alphabet line as written (for errors that point at a listed symbol)."""
    src = _Source(text, source)
    alphabet: AlphabetLine | None = None
    target: tuple[str, _Tok] | None = None
    statements: dict[str, _Statement] = {}
    title_lines: list[str] = []
    for first_line, chunk in _logical_lines(src.lines):
        code = "\n".join(line.split("//", 1)[0] for line in chunk.split("\n")).strip()
        if not code:
            if not statements and alphabet is None and chunk.strip().startswith("//"):
                title_lines.append(chunk.strip()[2:].strip())
            continue
        keyword, colon, rest = code.partition(":")
        keyword = keyword.strip()
        if keyword == "alphabet" and colon:
            if alphabet is not None:
                raise src.error("the alphabet is declared twice", first_line, 1)
            alphabet = _alphabet_line(src, first_line, chunk)
            continue
        if keyword in ("output", "accept") and colon and not rest.startswith("="):
            tokens = src.tokens(first_line, 1, chunk)
            if len(tokens) != 4 or tokens[1].text != ":" or tokens[2].kind != "name":
                raise src.error(f"expected `{keyword}: NAME`", first_line, 1)
            if target is not None:
                raise src.error(f"the program already names `{target[0]}: {target[1].text}`", first_line, 1)
            target = (keyword, tokens[2])
            continue
        statement = _definition_header(src, src.tokens(first_line, 1, chunk))
        if statement.head.text in statements:
            earlier = statements[statement.head.text].head
            raise src.error(
                f"`{statement.head.text}` is already defined at line {earlier.line}",
                statement.head.line,
                statement.head.column,
            )
        statements[statement.head.text] = statement
    if alphabet is None:
        raise src.error(
            "missing `alphabet: a b c` (the symbols the program reads, separated by spaces; end the "
            f"line with `{GENERIC_MARK}` to read any task's symbols)",
            1,
            1,
        )
    if target is None:
        raise src.error("missing `output: NAME` (a next-token family O[s]) or `accept: NAME`", 1, 1)
    definitions = _Resolver(src, statements, alphabet).resolve_all()
    if target[1].text not in statements:
        raise src.error(f"`{target[1].text}` is not defined", target[1].line, target[1].column)
    try:
        program = Program(
            alphabet.alphabet(symbols),
            tuple(definitions),
            output=target[1].text if target[0] == "output" else None,
            accept=target[1].text if target[0] == "accept" else None,
            title="\n".join(title_lines),
        )
    except CraspProgramError as error:
        raise src.error(str(error), target[1].line, target[1].column) from None
    return program, alphabet


def _alphabet_line(src: _Source, first_line: int, chunk: str) -> AlphabetLine:
    """The symbols after `alphabet:` (continuation lines included) with their places; `...` may
    only come last, and a symbol may be listed once."""
    words: list[tuple[str, int, int]] = []
    for offset, line in enumerate(chunk.split("\n")):
        code = line.split("//", 1)[0]
        start = code.index(":") + 1 if offset == 0 else 0
        words += [(m.group(), first_line + offset, start + m.start() + 1) for m in re.finditer(r"\S+", code[start:])]
    generic = bool(words) and words[-1][0] == GENERIC_MARK
    listed = words[:-1] if generic else words
    seen: set[str] = set()
    for symbol, line, column in listed:
        if symbol == GENERIC_MARK:
            raise src.error(
                f"`{GENERIC_MARK}` ends the alphabet line (it stands for the task's other symbols)", line, column
            )
        if symbol in seen:
            raise src.error(f"symbol {symbol} is listed twice in the alphabet", line, column)
        seen.add(symbol)
    if generic and not listed:
        raise src.error(
            f"list the symbols the program names before `{GENERIC_MARK}`, at least one "
            "(a task program: `alphabet: <bos> <sep> <eos> ...`)",
            words[-1][1],
            words[-1][2],
        )
    return AlphabetLine(tuple(w[0] for w in listed), tuple((w[1], w[2]) for w in listed), generic)


def _logical_lines(lines: list[str]):
    """Group each line that starts at column 1 with its indented continuation lines."""
    start, chunk = 0, None
    for number, line in enumerate(lines, start=1):
        continues = line[:1] in (" ", "\t") and chunk is not None and line.strip()
        if continues:
            chunk += "\n" + line
            continue
        if chunk is not None:
            yield start, chunk
        start, chunk = number, line
    if chunk is not None:
        yield start, chunk


def _definition_header(src: _Source, tokens: list[_Tok]) -> _Statement:
    head = tokens[0]
    if head.kind != "name":
        raise src.error(
            "expected a definition `name := expression` (or `alphabet:`, `output:`, `accept:`)", head.line, head.column
        )
    if head.text in KEYWORDS:
        raise src.error(f"`{head.text}` is a keyword and cannot name a definition", head.line, head.column)
    pos, params = 1, []
    if tokens[pos].text == "[":
        pos += 1
        while True:
            tok = tokens[pos]
            if tok.kind != "name" or tok.text in KEYWORDS:
                raise src.error("expected a parameter name", tok.line, tok.column)
            if tok.text in params:
                raise src.error(f"parameter `{tok.text}` is listed twice", tok.line, tok.column)
            params.append(tok.text)
            pos += 1
            if tokens[pos].text == "]":
                pos += 1
                break
            if tokens[pos].text != ",":
                raise src.error("expected `,` or `]` after a parameter", tokens[pos].line, tokens[pos].column)
            pos += 1
    if tokens[pos].text != ":=":
        raise src.error(f"expected `:=` after `{head.text}`", tokens[pos].line, tokens[pos].column)
    return _Statement(head, tuple(params), tokens[pos + 1 :])


class _Resolver:
    """Parses every definition after the definitions it uses, so definitions may come in any
    order; finds cycles. The order is found on the tokens first, without recursion, so chains of
    thousands of definitions each using the next one are fine."""

    def __init__(self, src: _Source, statements: dict[str, _Statement], alphabet: AlphabetLine):
        self.src, self.statements, self.alphabet = src, statements, alphabet
        self.done: dict[str, Definition] = {}

    def resolve_all(self) -> list[Definition]:
        """Every definition, each after those it uses (the order of a depth-first visit)."""
        return [self._parse(name) for name in self._dependency_order()]

    def _dependency_order(self) -> list[str]:
        order: list[str] = []
        placed: set[str] = set()
        for root in self.statements:
            if root in placed:
                continue
            path, on_path = [root], {root}  # the definitions being visited, each using the next
            pending = [iter(self._uses(root))]  # the uses of each that are still to visit
            while path:
                use = next(pending[-1], None)
                if use is None:
                    order.append(path.pop())
                    on_path.remove(order[-1])
                    placed.add(order[-1])
                    pending.pop()
                elif use.text in on_path:
                    cycle = path[path.index(use.text) :] + [use.text]
                    raise self.src.error(f"definitions form a cycle: {' -> '.join(cycle)}", use.line, use.column)
                elif use.text not in placed:
                    path.append(use.text)
                    on_path.add(use.text)
                    pending.append(iter(self._uses(use.text)))
        return order

    def _uses(self, name: str) -> list[_Tok]:
        """The tokens of the body of `name` that use a definition, in order. A name is an index,
        not a use, after `any` / `all`, in Q(...) and within square brackets (a count's range
        `#[j <= i]` or a family's arguments); the parser reports any misplaced name later."""
        uses: list[_Tok] = []
        in_brackets = False
        body = self.statements[name].body
        for k, tok in enumerate(body):
            if tok.kind == "op" and tok.text in ("[", "]"):
                in_brackets = tok.text == "["
            elif tok.kind == "name" and tok.text in self.statements and not in_brackets:
                after = [t.text for t in body[max(k - 2, 0) : k]]
                if after[-1:] not in (["any"], ["all"]) and after != ["Q", "("]:
                    uses.append(tok)
        return uses

    def _parse(self, name: str) -> Definition:
        statement = self.statements[name]
        clash = [p for p in statement.params if p in self.statements]
        if clash:
            raise self.src.error(
                f"parameter `{clash[0]}` has the name of a definition; rename one of them",
                statement.head.line,
                statement.head.column,
            )
        body = trampoline(_ExpressionParser(self, statement.body, set(statement.params)).parse_all())
        definition = Definition(name, statement.params, body)
        try:
            definition.use(*(E.Var(p) for p in statement.params))
        except CraspError as error:
            raise self.src.error(str(error), statement.head.line, statement.head.column) from None
        self.done[name] = definition
        return definition


class _ExpressionParser:
    """Recursive descent, with the grammar's methods written as generators (see crasp.trampoline),
    so that brackets may nest deeper than Python's recursion limit."""

    def __init__(self, resolver: _Resolver, tokens: list[_Tok], scope: set[str]):
        self.resolver, self.src, self.tokens = resolver, resolver.src, tokens
        self.pos = 0
        self.scope = scope

    # -- token helpers
    @property
    def tok(self) -> _Tok:
        return self.tokens[self.pos]

    def error(self, message: str, tok: _Tok | None = None) -> CraspSyntaxError:
        tok = tok or self.tok
        return self.src.error(message, tok.line, tok.column)

    def accept(self, text: str) -> _Tok | None:
        if self.tok.text == text and self.tok.kind in ("op", "name"):
            self.pos += 1
            return self.tokens[self.pos - 1]
        return None

    def expect(self, text: str, what: str) -> _Tok:
        found = self.accept(text)
        if found is None:
            got = f"`{self.tok.text}`" if self.tok.kind != "end" else "the end of the definition"
            raise self.error(f"expected `{text}` {what}, found {got}")
        return found

    def build(self, at: _Tok, make, *args):
        try:
            return make(*args)
        except CraspError as error:
            raise self.error(str(error), at) from None

    def integer(self, what: str, minus: _Tok | None = None) -> int:
        """The number at the current token (negated after `minus`), within the range of constants;
        an error points at it. Python's int() refuses thousands of digits: those are refused first."""
        tok = self.tok
        at, written = (minus, "-" + tok.text) if minus else (tok, tok.text)
        if len(tok.text.lstrip("0")) > len(str(E.MAX_CONSTANT)):
            raise self.error(str(E.out_of_range(what, written)), at)
        self.pos += 1
        self.build(at, E.require_constant, what, int(written))
        return int(written)

    # -- grammar, loosest first
    def parse_all(self) -> Computation[E.Expr]:
        node = yield self.expression()
        if self.tok.kind != "end":
            raise self.error(f"unexpected `{self.tok.text}` after a complete expression")
        return node

    def expression(self) -> Computation[E.Expr]:
        if self.tok.text in ("any", "all") and self.tok.kind == "name":
            return (yield self.quantifier())
        start = self.tok
        node = yield self.disjunction()
        question = self.accept("?")
        if question is None:
            return node
        if_true = yield self.disjunction()
        self.expect(":", "between the two values of `P ? C1 : C2`")
        if_false = yield self.expression()
        return self.build(
            question,
            E.Conditional,
            self._typed(node, start, E.BOOL),
            self._typed(if_true, start, E.COUNT),
            self._typed(if_false, start, E.COUNT),
        )

    def _typed(self, node: E.Expr, at: _Tok, wanted: str) -> E.Expr:
        if node.type != wanted:
            raise self.error(f"`{E.show(node)}` is a {node.type}, but a {wanted} is needed here", at)
        return node

    def quantifier(self) -> Computation[E.Expr]:
        kind_tok = self.tok
        self.pos += 1
        index = self.tok
        if index.kind != "name" or index.text in KEYWORDS:
            raise self.error(f"expected an index name after `{kind_tok.text}`")
        if index.text in self.scope:
            raise self.error(f"index `{index.text}` is already bound here; choose another name", index)
        if index.text in self.resolver.statements:
            raise self.error(f"index `{index.text}` has the name of a definition; choose another name", index)
        self.pos += 1
        self.expect(":", f"after `{kind_tok.text} {index.text}`")
        self.scope.add(index.text)
        body = yield self.expression()
        self.scope.discard(index.text)
        return self.build(kind_tok, E.Quantified, kind_tok.text, E.Var(index.text), body)

    def _binary_chain(self, word: str, operand, make) -> Computation[E.Expr]:
        start = self.tok
        node = yield operand()
        while True:
            at = self.accept(word)
            if at is None:
                return node
            right = yield (self.quantifier() if self.tok.text in ("any", "all") else operand())
            node = (
                self.build(at, make, node, right)
                if node.type == right.type == E.BOOL
                else self._type_error(at, word, node, right, start)
            )

    def _type_error(self, at, word, left, right, start):
        culprit = left if left.type != E.BOOL else right
        raise self.error(f"`{word}` needs two Booleans, but `{E.show(culprit)}` is a {culprit.type}", at)

    def disjunction(self) -> Computation[E.Expr]:
        return (yield self._binary_chain("or", self.conjunction, E.Or))

    def conjunction(self) -> Computation[E.Expr]:
        return (yield self._binary_chain("and", self.negation, E.And))

    def negation(self) -> Computation[E.Expr]:
        at = self.accept("not")
        if at is None:
            return (yield self.comparison())
        operand = yield (self.quantifier() if self.tok.text in ("any", "all") else self.negation())
        return self.build(at, E.Not, operand)

    def comparison(self) -> Computation[E.Expr]:
        if self._is_symbol_side(self.tok) and self.tokens[self.pos + 1].text in _SYMBOL_RELATIONS:
            return self.symbol_relation()
        left = yield self.sum()
        if self.tok.text in _COMPARE_OPS and self.tok.kind == "op":
            op_tok = self.tok
            self.pos += 1
            right = yield self.sum()
            op = "=" if op_tok.text == "==" else op_tok.text
            return self.build(op_tok, E.Compare, op, left, right)
        return left

    def _is_symbol_side(self, tok: _Tok) -> bool:
        return tok.kind == "string" or (tok.kind == "name" and tok.text in self.scope)

    def symbol_relation(self) -> E.Expr:
        """`t = "a"`, `u < t`, ...: symbols compared in the alphabet's order (sugar)."""
        left = self.symbol_argument()
        op = self.tok
        self.pos += 1
        if not self._is_symbol_side(self.tok):
            raise self.error(f'an index is compared with another index or a quoted symbol, like `t {op.text} "a"`')
        right = self.symbol_argument()
        relation, negated, swapped = _SYMBOL_RELATIONS[op.text]
        node = E.SymbolRelation(relation, *((right, left) if swapped else (left, right)))
        return E.Not(node) if negated else node

    def sum(self) -> Computation[E.Expr]:
        node = yield self.term()
        while self.tok.text in ("+", "-") and self.tok.kind == "op":
            op_tok = self.tok
            self.pos += 1
            node = self.build(op_tok, E.Arith, op_tok.text, node, (yield self.term()))
        return node

    def term(self) -> Computation[E.Expr]:
        minus = self.accept("-")
        if minus is None:
            return (yield self.atom())
        if self.tok.kind != "number":
            raise self.error("expected a number after `-` (negative constants are written -3)")
        return E.Number(self.integer("the count constant", minus))

    def atom(self) -> Computation[E.Expr]:
        tok = self.tok
        if tok.kind == "number":
            return E.Number(self.integer("the count constant"))
        if tok.text == "(" and tok.kind == "op":
            self.pos += 1
            node = yield self.expression()
            self.expect(")", "to close `(`")
            return node
        if tok.text == "#" and tok.kind == "op":
            return (yield self.count())
        if tok.kind == "name":
            if tok.text in ("true", "false"):
                self.pos += 1
                return E.BoolConst(tok.text == "true")
            if tok.text == "Q":
                self.pos += 1
                self.expect("(", "after Q")
                symbol = self.symbol_argument()
                self.expect(")", "to close Q(")
                return E.Token(symbol)
            if tok.text == "MOD":
                return self.periodic()
            if tok.text in ("min", "max"):
                self.pos += 1
                self.expect("(", f"after {tok.text}")
                left = yield self.expression()
                self.expect(",", f"between the two counts of {tok.text}(...)")
                right = yield self.expression()
                self.expect(")", f"to close {tok.text}(")
                return self.build(tok, E.Arith, tok.text, left, right)
            if tok.text == "not":
                return (yield self.negation())
            if tok.text in ("any", "all"):
                return (yield self.quantifier())
            if tok.text in KEYWORDS:
                raise self.error(f"`{tok.text}` cannot start an expression here")
            return self.reference()
        if tok.kind == "string":
            raise self.error(f"a quoted symbol is not an expression; did you mean Q({tok.text})?")
        found = "the end of the definition" if tok.kind == "end" else f"`{tok.text}`"
        raise self.error(f"expected an expression (a count, Q(...), #[j <= i] ..., a name, ...), found {found}")

    def periodic(self) -> E.Expr:
        at = self.tok
        self.pos += 1
        self.expect("(", "after MOD")
        numbers = []
        for what in ("the modulus m", "the residue r"):
            if self.tok.kind != "number":
                raise self.error(f"expected {what} of MOD(m, r), an integer")
            numbers.append(self.integer(f"{what} of MOD(m, r)"))
            if what.startswith("the modulus"):
                self.expect(",", "between m and r in MOD(m, r)")
        self.expect(")", "to close MOD(")
        return self.build(at, E.Periodic, *numbers)

    def count(self) -> Computation[E.Expr]:
        at = self.tok
        self.pos += 1
        self.expect("[", "after # (a count is written #[j <= i] P)")
        inner, outer = self._name("the counted position, as in #[j <= i]"), None
        self.expect("<=", f"after `{inner}` (a count ranges over {inner} <= i)")
        outer = self._name("the current position, as in #[j <= i]")
        offset = None
        if self.accept(","):
            if self._name(f"`{inner}` in the local relation {inner} = {outer} - c") != inner:
                raise self.error(f"the local relation must constrain `{inner}`", self.tokens[self.pos - 1])
            self.expect("=", f"in the local relation {inner} = {outer} - c")
            if self._name(f"`{outer}` in the local relation") != outer:
                raise self.error(f"the local relation must be relative to `{outer}`", self.tokens[self.pos - 1])
            offset = 0
            if self.accept("-"):
                if self.tok.kind != "number":
                    raise self.error("expected a constant distance c in j = i - c")
                offset = self.integer("the distance c of j = i - c")
        self.expect("]", "to close the count's range")
        body = yield (self.negation() if self.tok.text == "not" else self.atom())
        return self.build(at, E.CountOf, body, offset)

    def _name(self, what: str) -> str:
        if self.tok.kind != "name":
            raise self.error(f"expected {what}")
        self.pos += 1
        return self.tokens[self.pos - 1].text

    def _symbol(self, tok: _Tok) -> str:
        symbol = _unquote(tok)
        alphabet = self.resolver.alphabet
        if symbol not in alphabet.symbols:
            listed = " ".join(sorted(alphabet.symbols))
            if alphabet.generic:
                raise self.error(
                    f'symbol "{symbol}" is not listed in the alphabet line ({listed} '
                    f"{GENERIC_MARK}); a generic program quotes only the symbols it lists",
                    tok,
                )
            raise self.error(f'symbol "{symbol}" is not in the alphabet ({listed})', tok)
        return symbol

    def symbol_argument(self) -> E.SymbolArg:
        tok = self.tok
        if tok.kind == "string":
            self.pos += 1
            return self._symbol(tok)
        if tok.kind == "name" and tok.text not in KEYWORDS:
            if tok.text not in self.scope:
                raise self.error(
                    f"index `{tok.text}` is not bound here (bind it with `any {tok.text}:` or a "
                    f'parameter); a literal symbol is quoted: "{tok.text}"'
                )
            self.pos += 1
            return E.Var(tok.text)
        raise self.error('expected an index name or a quoted symbol like "a"')

    def reference(self) -> E.Expr:
        tok = self.tok
        if tok.text not in self.resolver.statements:
            if tok.text in self.scope:
                raise self.error(
                    f"index `{tok.text}` can only appear in Q({tok.text}), as a family argument, "
                    f'or in a test like {tok.text} = "a"'
                )
            known = ", ".join(self.resolver.statements) or "none"
            raise self.error(f"unknown name `{tok.text}` (defined: {known})")
        self.pos += 1
        definition = self.resolver.done[tok.text]  # parsed first: the resolver follows the uses
        args: list[E.SymbolArg] = []
        if self.accept("["):
            while True:
                args.append(self.symbol_argument())
                if self.accept("]"):
                    break
                self.expect(",", "or `]` between family arguments")
        if len(args) != len(definition.params):
            raise self.error(
                f"`{tok.text}` takes {len(definition.params)} index argument(s) "
                f"[{', '.join(definition.params)}], got {len(args)}",
                tok,
            )
        return self.build(tok, definition.use, *args)


def parse_file(path) -> Program:
    """Read a program file: UTF-8 text (a byte-order mark is accepted), any line endings."""
    return parse(read_program_file(path), str(path))


def read_program_file(path) -> str:
    """The text of a program file, its line endings made `\\n`; an unreadable file is an error
    that names it (and the line and column of a byte that is not UTF-8)."""
    path = Path(path)
    expected = "expected a C-RASP program: a UTF-8 text file (.crasp)"
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CraspProgramError(f"cannot read program file {path}: {error.strerror}; {expected}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        read, at = error.object, error.start  # the bytes after any byte-order mark
        line, column = read.count(b"\n", 0, at) + 1, at - read.rfind(b"\n", 0, at)
        raise CraspProgramError(
            f"{path}:{line}:{column}: byte 0x{read[at]:02x} is not UTF-8 (is this a binary file?); {expected}"
        ) from None
    # As Python's text mode reads them: \r\n and \r end lines too.
    return text.replace("\r\n", "\n").replace("\r", "\n")
