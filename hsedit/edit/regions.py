"""A file cut into regions the model rewrites one at a time, and the regions an intent touches.

The cut follows the syntax (tree-sitter): every top-level statement is a unit, with the blank
lines and comments above it; a class, function, loop or `with` too large for one request is cut
into its own statements, and each piece is shown under the header of the statement it sits in,
so the shown text is a piece of valid Python at its own indentation:

    class Store(Base):                 <- head: shown for context, not this region's to change
        def save(self, path):          <- the region: its own lines, rewritten and spliced back
            ...

The first piece of a cut statement owns its header (a rename of the class or a new parameter
changes it there), alone where a long docstring follows it; every other piece shows it
read-only. Which units an intent needs — the uses of a renamed name, a constant's assignment, a
deleted definition, the prints, the %-formats — is read from the same token stream the
instruction check reads; neighbouring units that both need the change are grouped up to a size
budget. A unit that is not picked is never sent and its lines never change.

Sizes are estimated from characters (3.2 a token: Python source runs ~3.7 through SmolLM2's
tokenizer), so the cut needs no tokenizer and training data is cut exactly as inference cuts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from hsedit.edit.check import (
    Source,
    _assignments,
    _definitions,
    _is_marker,
    _name_of,
    _percent_formats,
    _print_statements,
    _walk,
    exported_strings,
    rename_reach,
)
from hsedit.edit.intent import (
    AddParameter,
    Delete,
    FreeForm,
    FStrings,
    Intent,
    RemovePrints,
    Rename,
    SetConstant,
    SnippetMerge,
    TypeHints,
    scope_of,
)

CHARS_PER_TOKEN = 3.2
# A definition larger than this is cut into its statements; neighbours are grouped up to it. About
# 60 lines of code: the apply model is trained on chunks of 12-45 lines and is most often right there.
REGION_TOKENS = 600
DEFINITIONS = ("class_definition", "function_definition")


def estimated_tokens(text: str) -> int:
    return round(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Unit:
    """Lines [start, end) of the file (0-based) that are never cut, under `head`: the line ranges
    of the headers of the statements it sits in, outermost first (shown, not owned). The blank
    lines between units belong to none."""

    start: int
    end: int
    head: tuple[tuple[int, int], ...] = ()
    parent: int = -1  # the start line of the definition it was cut from (-1: the module)
    docstring: bool = False  # a long docstring, cut from its definition's header (`_long_docstring`)


@dataclass(frozen=True)
class Region:
    """Consecutive units of one parent, sent as one request."""

    start: int
    end: int
    head: tuple[tuple[int, int], ...]
    parent: int
    lines: tuple[str, ...] = field(repr=False)  # the whole file's lines, with their ends
    # Lines of one statement, shown alone and dedented by this (`line_pieces`); None: a region
    # of whole units under its head.
    indent: str | None = None

    @property
    def head_text(self) -> str:
        return "".join("".join(self.lines[a:b]) for a, b in self.head)

    @property
    def own_text(self) -> str:
        return "".join(self.lines[self.start : self.end])

    @property
    def shown(self) -> str:
        """What the model sees as "the file": the head, then the region's own lines."""
        if self.indent is not None:
            return "".join(line[len(self.indent):] if line.strip() else line for line in self.lines[self.start : self.end])
        return self.head_text + self.own_text

    @property
    def label(self) -> str:
        return f"lines {self.start + 1}-{self.end}"


# -- the cut ---------------------------------------------------------------------------------
def units(text: str, budget: int = REGION_TOKENS, whole: frozenset[str] = frozenset()) -> list[Unit]:
    """The file's units in order, covering every line but the blank ones between them, once.
    Definitions named in `whole` are never cut, whatever their size."""
    source = Source(text)
    lines = text.splitlines(keepends=True)
    return list(_cut(source, source.root, 0, len(lines), (), -1, lines, budget, whole))


def kept_whole(intent: Intent) -> frozenset[str]:
    """The definitions an intent needs shown uncut: the one a deletion removes, whose header is
    what goes (shown read-only above its statements, it could not be deleted)."""
    return frozenset({intent.name}) if isinstance(intent, Delete) else frozenset()


def _cut(source: Source, block, start: int, end: int, head, parent: int, lines, budget: int,
         whole: frozenset[str] = frozenset()) -> Iterator[Unit]:
    """Units for the statements of `block`, which own lines [start, end): each statement takes
    the lines from where the last one ended to its own last line, the last one the rest."""
    statements = [c for c in block.named_children if c.type != "comment"]
    if not statements:
        yield Unit(start, end, head, parent)
        return
    position = start
    for k, statement in enumerate(statements):
        last = end if k == len(statements) - 1 else statement.end_point[0] + 1
        # Blank lines above a statement stay where they are: a model's answer does not begin with them.
        while position < statement.start_point[0] and not lines[position].strip():
            position += 1
        unit = Unit(position, last, head, parent)
        yield from _cut_definition(source, statement, unit, lines, budget, whole)
        position = last


def _cut_definition(source: Source, statement, unit: Unit, lines, budget: int,
                    whole: frozenset[str] = frozenset()) -> Iterator[Unit]:
    """A statement too large for one request, cut into the statements of its body when it has one
    body and nothing after it (a class or function, a loop or `with` or `if` without `else`)."""
    compound = _compound(statement)
    text = "".join(lines[unit.start : unit.end])
    if compound is None or estimated_tokens(text) <= budget or _name_of(compound) in whole:
        yield unit
        return
    body = compound.child_by_field_name("body")
    header_end = _header_end(compound)
    if body.start_point[0] < header_end or len([c for c in body.named_children if c.type != "comment"]) < 2:
        yield unit
        return
    header = (statement.start_point[0], header_end)
    parent = statement.start_point[0]
    pieces = list(_cut(source, body, header_end, unit.end, unit.head + (header,), parent, lines, budget, whole))
    # The first piece owns the header and whatever stands above the statement (its comments).
    owner = pieces[0]
    if owner.head == unit.head + (header,) and _long_docstring(body, owner, lines):
        # A long docstring stays out of what a change to the header sends: the model would have
        # to repeat it all to rename a parameter, and long ones are where it runs away. The
        # header joins it again (same parent) where both are picked.
        pieces[0] = replace(owner, docstring=True)
        pieces.insert(0, Unit(unit.start, header_end, unit.head, parent))
    elif owner.head == unit.head + (header,):
        pieces[0] = Unit(unit.start, owner.end, unit.head, parent)
    else:  # the first statement was cut in turn: the header gets a unit of its own
        pieces.insert(0, Unit(unit.start, header_end, unit.head, unit.parent))
    yield from pieces


# A docstring of more lines than this is a unit of its own when its definition is cut.
DOCSTRING_LINES = 3


def _long_docstring(body, owner: Unit, lines) -> bool:
    """Whether the body's first statement, the whole of `owner`, is a docstring of more than
    DOCSTRING_LINES non-blank lines."""
    first = next(c for c in body.named_children if c.type != "comment")
    is_docstring = first.type == "expression_statement" and first.named_child_count == 1 \
        and first.named_children[0].type in ("string", "concatenated_string")
    return is_docstring and sum(1 for line in lines[owner.start : owner.end] if line.strip()) > DOCSTRING_LINES


_ONE_BODY = ("class_definition", "function_definition", "for_statement", "while_statement", "with_statement",
             "if_statement")
_CLAUSES = ("else_clause", "elif_clause", "except_clause", "except_group_clause", "finally_clause")


def _compound(statement):
    """The statement (a decorated definition's definition) if its body can be cut: one block and
    no clause after it; else None."""
    node = statement.child_by_field_name("definition") if statement.type == "decorated_definition" else statement
    if node is None or node.type not in _ONE_BODY or any(c.type in _CLAUSES for c in node.children):
        return None
    body = node.child_by_field_name("body")
    return node if body is not None and body.type == "block" else None


# -- what an intent touches ------------------------------------------------------------------
def pick(text: str, intent: Intent, cut: Sequence[Unit] | None = None) -> list[Unit]:
    """The units the intent needs changed (in file order); [] when it needs none (nothing to do).
    For an intent whose reach cannot be told (free form without a name the file has, a snippet
    that matches nowhere) every unit."""
    cut = list(cut if cut is not None else units(text, whole=kept_whole(intent)))
    touched = _touched_once(text, intent)
    if touched is None:
        return cut
    picked = [u for u in cut if any(u.start <= line < u.end for line in touched)]
    if isinstance(intent, Delete) and picked:
        picked = _with_neighbour(cut, picked)
    if isinstance(intent, (FreeForm, SnippetMerge)):
        # Their reach is read from names and anchors, never from a docstring's words: a header
        # they pick may be asked to document itself, so it is sent with its docstring.
        picked = _with_docstrings(cut, picked)
    return picked


@lru_cache(maxsize=8)
def _touched_once(text: str, intent: Intent) -> frozenset[int] | None:
    """`_touched_lines` of a file, read once: a failing region's retries pick from it again."""
    lines = _touched_lines(Source(text), intent)
    return None if lines is None else frozenset(lines)


def _touched_lines(source: Source, intent: Intent) -> set[int] | None:
    """0-based lines the intent changes or must see; None: cannot be told (every unit)."""
    scope = scope_of(intent)
    ranges = [(0, len(source.data))]
    if scope:
        scopes = _definitions(source, scope, DEFINITIONS)
        if not scopes:
            return set()  # nothing in scope: the file is the answer
        ranges = [(n.start_byte, n.end_byte) for n in scopes]

    def inside(token) -> bool:
        return any(a <= token.start and token.end <= b for a, b in ranges)

    def node_lines(nodes) -> set[int]:
        return {line for n in nodes for line in range(n.start_point[0], n.end_point[0] + 1)}

    match intent:
        case Rename():
            reach = None if scope else rename_reach(source, intent.old)  # as the check reads it
            roles = ("name", "attribute") if reach and reach.attributes else ("name",)
            lines = {t.line - 1 for t in source.tokens
                     if t.type == "identifier" and t.text == intent.old and t.role in roles and inside(t)}
            if reach and reach.exports:
                lines |= node_lines(exported_strings(source, intent.old))
            return lines
        case SetConstant():
            return node_lines(_assignments(source, intent.name))
        case Delete():
            return node_lines(_definitions(source, intent.name, intent.types))
        case AddParameter():
            found = _definitions(source, intent.function, ("function_definition",))
            lines = {n.start_point[0] for n in found}  # the signature: the first line of the def
            for n in found:
                definition = n.child_by_field_name("definition") if n.type == "decorated_definition" else n
                parameters = definition.child_by_field_name("parameters")
                lines |= set(range(parameters.start_point[0], parameters.end_point[0] + 1))
            return lines
        case RemovePrints():
            return node_lines(_print_statements(source, ranges))
        case FStrings():
            return node_lines(_percent_formats(source, ranges))
        case TypeHints():
            functions = [n for n in _walk(source.root) if n.type == "function_definition"
                         and any(a <= n.start_byte and n.end_byte <= b for a, b in ranges)]
            return {n.child_by_field_name("parameters").start_point[0] for n in functions} | \
                   {n.child_by_field_name("body").start_point[0] - 1 for n in functions}
        case SnippetMerge():
            return _snippet_lines(source.text, intent.update)
        case FreeForm():
            return _named_lines(source, intent)
    return None


def _snippet_lines(text: str, update: str) -> set[int] | None:
    """The lines from the first to the last line of the file the snippet repeats (its anchors)."""
    wanted = {line.strip() for line in update.splitlines() if not _is_marker(line) and len(line.strip()) > 3}
    hits = [k for k, line in enumerate(text.splitlines()) if line.strip() in wanted]
    return set(range(hits[0], hits[-1] + 1)) if hits else None


def _named_lines(source: Source, intent: FreeForm) -> set[int] | None:
    """Lines where the instruction's code-like names occur as identifiers, or where the file defines
    a function or class the instruction names in plain words; None when it names nothing here."""
    names = set(intent.names)
    lines = {t.line - 1 for t in source.tokens if t.type == "identifier" and t.text in names}
    if lines:
        return lines
    words = set(re.findall(r"[A-Za-z_]\w*", intent.text))
    defined = [n for n in _walk(source.root) if n.type in DEFINITIONS and n.child_by_field_name("name").text.decode() in words]
    return {line for n in defined for line in range(n.start_point[0], n.end_point[0] + 1)} or None


def _with_docstrings(cut: list[Unit], picked: list[Unit]) -> list[Unit]:
    """`picked` and the docstring unit after each picked header."""
    out = list(picked)
    for k, unit in enumerate(cut[:-1]):
        after = cut[k + 1]
        if unit in picked and after.docstring and after.parent == unit.parent and after not in out:
            out.append(after)
    return sorted(out, key=lambda u: u.start)


def _with_neighbour(cut: list[Unit], picked: list[Unit]) -> list[Unit]:
    """A deletion shows the unit before the deleted one too (or after it, for the first): an
    answer that is only an empty block is not what the model learnt to write."""
    out = list(picked)
    for unit in picked:
        k = cut.index(unit)
        for other in (cut[k - 1] if k else None, cut[k + 1] if k + 1 < len(cut) else None):
            if other is not None and other.parent == unit.parent and other not in out:
                out.append(other)
                break
    return sorted(out, key=lambda u: u.start)


def group(text: str, picked: Sequence[Unit], budget: int = REGION_TOKENS) -> list[Region]:
    """Adjacent picked units of one parent joined into regions of up to `budget` tokens. A region
    that starts with the piece owning its parent's header shows that header as its own, so the
    pieces after it join under the shorter head."""
    lines = tuple(text.splitlines(keepends=True))
    regions: list[Region] = []
    for unit in picked:
        last = regions[-1] if regions else None
        if (
            last is not None and last.parent == unit.parent and not "".join(lines[last.end : unit.start]).strip()
            and (unit.docstring or estimated_tokens("".join(lines[last.start : unit.end])) <= budget)
        ):  # a docstring joins its header whatever its size: they were one unit before the cut
            regions[-1] = Region(last.start, unit.end, last.head, last.parent, lines)
        else:
            regions.append(Region(unit.start, unit.end, unit.head, unit.parent, lines))
    return regions


def regions_for(text: str, intent: Intent, budget: int = REGION_TOKENS) -> list[Region]:
    """The regions a request is made for: the cut, the pick, the grouping."""
    picked = pick(text, intent, units(text, budget, kept_whole(intent)))
    # A deletion's region is the definition with its neighbour, whatever their size (`pick`).
    return group(text, picked, budget if not isinstance(intent, Delete) else max(budget, estimated_tokens(text)))


def line_pieces(text: str, region: Region, intent: Intent) -> list[Region] | None:
    """A rename's last resort for a region no cut splits (a long signature, a header with its
    first statement): each run of consecutive lines with a use, alone, without its head and
    dedented. The model is far more often right on `def old_name(` than on the 20 lines around it;
    what it answers is spliced back re-indented and judged with the whole file. None: nothing
    finer than the region itself."""
    if not isinstance(intent, Rename) or region.indent is not None:
        return None
    touched = sorted(line for line in _touched_once(text, intent) or () if region.start <= line < region.end)
    runs: list[list[int]] = []
    for line in touched:
        if runs and line == runs[-1][-1] + 1:
            runs[-1].append(line)
        else:
            runs.append([line])
    pieces = []
    for run in runs:
        own = region.lines[run[0] : run[-1] + 1]
        # What every line starts with: removed exactly and put back exactly, whatever mixes
        # tabs and spaces inside a bracket.
        indent = os.path.commonprefix([line[: len(line) - len(line.lstrip())] for line in own if line.strip()])
        pieces.append(Region(run[0], run[-1] + 1, (), region.parent, region.lines, indent))
    if not pieces or [p.shown for p in pieces] == [region.shown]:
        return None
    return pieces


# -- putting answers back --------------------------------------------------------------------
def own_part(region: Region, answer: str) -> str | None:
    """The region's own lines out of the model's answer to its shown text: the answer less the
    headers it repeats. None when the answer does not keep the head's shape (a definition per
    head level, each the first statement of the one above). A line piece's answer is indented
    back to where its lines sit."""
    if region.indent is not None:
        return "".join(region.indent + line if line.strip() else line for line in answer.splitlines(keepends=True))
    if not region.head:
        return answer
    node = Source(answer).root
    lines = answer.splitlines(keepends=True)
    header_end = 0
    for _ in region.head:
        statements = [c for c in node.named_children if c.type != "comment"]
        compound = _compound(statements[0]) if statements else None
        if compound is None:
            return None
        node = compound.child_by_field_name("body")
        header_end = _header_end(compound)
        if node.start_point[0] < header_end:
            return None  # the body moved onto the header's line
    return "".join(lines[header_end:])


def _header_end(compound) -> int:
    """The line after a compound statement's header: after the colon that opens its body."""
    body = compound.child_by_field_name("body")
    colon = next(c for c in reversed(compound.children) if c.type == ":" and c.end_byte <= body.start_byte)
    return colon.end_point[0] + 1


def splice(text: str, answers: Sequence[tuple[Region, str]]) -> str:
    """The file with each region's own lines replaced by its new ones (regions do not overlap)."""
    lines = text.splitlines(keepends=True)
    out, position = [], 0
    for region, new in sorted(answers, key=lambda pair: pair[0].start):
        out += lines[position : region.start]
        out.append(new)
        position = region.end
    out += lines[position:]
    return "".join(out)
