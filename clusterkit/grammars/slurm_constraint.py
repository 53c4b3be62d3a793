"""Slurm's ``-C``/``--constraint`` expressions: node features joined by operators.

The grammar is the one ``sbatch(1)`` documents under --constraint and slurmctld reads
(``_feature_string2list`` in ``src/slurmctld/job_scheduler.c``, SchedMD/slurm at 284c3b9):

* a single name (``gpu``); a node count after a name, ``graphics*4`` ("at least four of the
  job's nodes have it"), alone or inside brackets;
* AND ``&`` and OR ``|``, read strictly from left to right: ``foo|bar&baz`` is
  ``(foo|bar)&baz``; a comma is taken for ``&`` (slurmctld rewrites it, "a common error");
* parentheses group (one level; no count inside them);
* one set of square brackets per job: *matching OR* ``[rack1|rack2]`` (every node has the same
  one; no counts) or *multiple counts* ``[rack1*2&rack2*4]`` (a count on every term).

:func:`parse` returns a :class:`Constraint` or raises :class:`ConstraintError` with the reason
slurmctld logs (the user sees only "Invalid feature specification"). :meth:`Constraint.matches`
says whether a node with a set of features may hold part of the job. No verdict on a site here:
which features exist is the judges' business (:mod:`clusterkit.emulate.slurm`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

OPERATORS = "&|"
_SPECIAL = "*&|[]()"


class ConstraintError(ValueError):
    """A constraint slurmctld refuses to read (ESLURM_INVALID_FEATURE)."""


@dataclass(frozen=True)
class Feature:
    name: str
    count: int = 0


@dataclass(frozen=True)
class Group:
    """Terms in parentheses (``kind="paren"``) or brackets (``kind="bracket"``)."""

    kind: str
    items: tuple[tuple[object, str], ...]  # (Feature | Group, operator before it: "" first)
    count: int = 0


@dataclass(frozen=True)
class Constraint:
    text: str
    items: tuple[tuple[object, str], ...]
    names: frozenset[str] = field(default_factory=frozenset)

    def matches(self, features: set[str] | frozenset[str]) -> bool:
        """Whether a node with ``features`` may hold (part of) the job."""
        return _fold(self.items, features)

    @property
    def counts(self) -> list[tuple[object, int]]:
        """The terms that carry a node count, with their count (``gpu*2`` -> [(gpu, 2)])."""
        return [(term, term.count) for term in _terms(self.items) if term.count]

    def term_matches(self, term: object, features: set[str] | frozenset[str]) -> bool:
        return _fold(((term, ""),), features)

    @property
    def matching_or(self) -> bool:
        """Brackets around alternatives: every node of the job has the same one."""
        return any(
            isinstance(t, Group) and t.kind == "bracket" and any(op == "|" for _, op in t.items)
            for t in _terms(self.items, deep=False)
        )


def _terms(items, deep: bool = True):
    for term, _op in items:
        yield term
        if deep and isinstance(term, Group) and term.kind == "bracket":
            yield from _terms(term.items)


def _fold(items, features) -> bool:
    """Left to right, as slurmctld reads it; a bracket of counts holds a node that has any of
    its terms (each node serves one of the counts)."""
    result = None
    for term, op in items:
        value = _value(term, features)
        if result is None:
            result = value
        elif op == "&":
            result = result and value
        else:
            result = result or value
    return bool(result)


def _value(term, features) -> bool:
    if isinstance(term, Feature):
        return term.name in features
    if term.kind == "bracket" and any(op == "&" for _, op in term.items):
        return any(_value(t, features) for t, _ in term.items)
    return _fold(term.items, features)


_TOKEN = re.compile(r"\*(\d*)|[&|\[\]()]|[^*&|\[\]()]+")


def parse(text: str) -> Constraint:
    """Read a --constraint value; raise ConstraintError as slurmctld would refuse it."""
    if not text.strip():
        raise ConstraintError("empty constraint")
    tokens = [m.group(0) for m in _TOKEN.finditer(text.replace(",", "&"))]
    reader = _Reader(text, tokens)
    items = reader.sequence(closing="")
    names = frozenset(f.name for f in _features(Group("all", items)))
    return Constraint(text, items, names)


def _features(group: Group):
    for term, _op in group.items:
        if isinstance(term, Feature):
            yield term
        else:
            yield from _features(term)


class _Reader:
    """A recursive reader that refuses what slurmctld refuses, with its reasons."""

    def __init__(self, text: str, tokens: list[str]):
        self.text, self.tokens, self.i = text, tokens, 0
        self.brackets = 0
        self.depth = {"paren": 0, "bracket": 0}

    def fail(self, why: str) -> ConstraintError:
        return ConstraintError(f"constraint {why}: {self.text}")

    def peek(self) -> str:
        return self.tokens[self.i] if self.i < len(self.tokens) else ""

    def take(self) -> str:
        tok = self.peek()
        self.i += 1
        return tok

    def sequence(self, closing: str) -> tuple[tuple[object, str], ...]:
        items: list[tuple[object, str]] = []
        op = ""
        while True:
            items.append((self.atom(), op))
            tok = self.peek()
            if tok in ("&", "|"):
                self.take()
                op = tok
                if self.peek() in ("", "&", "|", ")", "]"):
                    raise self.fail(f"requested '{tok}' without a feature")
                continue
            if tok == closing and closing:
                self.take()
                return tuple(items)
            if tok == "":
                name = {"]": "brackets", ")": "parenthesis"}.get(closing)
                if name:
                    raise self.fail(f"has unbalanced {name}")
                return self._check_top(tuple(items))
            if tok in ("]", ")"):
                kind = "brackets" if tok == "]" else "parentheses"
                raise self.fail(f"has imbalanced {kind}")
            raise self.fail("has an unexpected character")

    def _check_top(self, items):
        plain = [t for t, _ in items if isinstance(t, Feature)]
        counted = [t for t in plain if t.count]
        groups = [t for t, _ in items if isinstance(t, Group) and t.kind == "paren"]
        if counted or any(g.count for g in groups):
            total = len(plain) + sum(len(list(_features(g))) for g in groups)
            if total > 1:
                raise self.fail("has '*' outside of brackets with more than one feature")
        return items

    def atom(self):
        tok = self.take()
        if tok in ("", "&", "|", "]", ")", "*") or tok.startswith("*"):
            raise self.fail(f"requested '{tok or 'nothing'}' without a feature")
        if tok == "(":
            if self.depth["paren"]:
                raise self.fail("has imbalanced parentheses")
            self.depth["paren"] += 1
            items = self.sequence(closing=")")
            self.depth["paren"] -= 1
            return Group("paren", items, self.count())
        if tok == "[":
            if self.depth["paren"] or self.depth["bracket"]:
                raise self.fail("has imbalanced brackets")
            self.brackets += 1
            if self.brackets > 1:
                raise self.fail("has more than one set of brackets")
            self.depth["bracket"] += 1
            items = self.sequence(closing="]")
            self.depth["bracket"] -= 1
            return self._bracket(items)
        return Feature(tok, self.count())

    def count(self) -> int:
        tok = self.peek()
        if not tok.startswith("*"):
            return 0
        self.take()
        digits = tok[1:]
        if not digits or int(digits) <= 0 or self.depth["paren"]:
            raise self.fail(
                "invalid, '*' must be requested with a positive integer, and after a feature "
                "or parentheses"
            )
        return int(digits)

    def _bracket(self, items) -> Group:
        ops = {op for _, op in items[1:]}
        counted = [t for t, _ in items if t.count]
        if "&" in ops and len(counted) != len(items):
            raise self.fail("invalid, count must be used with XAND")
        if "|" in ops and counted:
            raise self.fail("invalid, count must not be used with MOR")
        if self.peek().startswith("*"):
            raise self.fail("has an unexpected character")
        return Group("bracket", items)
