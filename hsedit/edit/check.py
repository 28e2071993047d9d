"""The instruction check: does the answer do what the instruction asks, and only that?

The write guard refuses answers that destroy code; this refuses answers that are simply wrong.
It reads the instruction and, where it understands it, compares the old and the new file as
token streams (tree-sitter, so layout never matters) against what that instruction allows:

    rename        every use of `old` (identifier tokens; in "in function f" only inside f) is
                  `new`; nothing else changed. Attribute names (`obj.old`), keyword-argument names
                  (`f(old=1)`), import paths, strings and comments may follow the rename or not
                  (whether `obj.old` is the same thing cannot be told from one file) — but where
                  `old` is a member (a method or class attribute) attribute uses must follow, and
                  where it occurs only as attributes those are the uses. Where the module's own
                  name is renamed, its entries in `__all__` must follow.
    set constant  the one assignment to the name gets the value (compared as a Python literal);
                  nothing else changed.
    delete        the one function or class of that name is gone (decorators and the comments
                  right above it may go with it); nothing else changed.
    debug prints  `print(...)` statements removed and nothing else: one for "the print", at
                  least one for "prints". Which of several prints is a debug print is not
                  checked (said so in the verdict, never passed or failed on a guess).
    add parameter the function's signature gains that parameter (with that default and that
                  annotation, if named; no annotation if none is); nothing else changed.
    % → f-string  each %-format whose conversion is mechanical is an equivalent f-string (same
                  text, same expressions, same conversions); nothing else changed.
    type hints    only annotations added (and `typing` imports); every parameter and the return
                  of the function(s) in scope annotated; existing annotations kept.
    snippet merge every snippet line present, in order; each "... existing code ..." marker
                  stands for a run of the original; the file around the snippet unchanged.

Whatever the kind but a rename (whose own check holds every use), free form too, an answer for
the whole file that reads a global name nothing in it defines (nor Python's builtins), where the
file itself read none, fails: a misspelt variable, a helper made up on the spot, a deleted
function still called is a NameError waiting.

An instruction that names something the file does not have (a rename of a name that does not
occur) is done by the file as it is. An unchanged answer to an instruction that names
something present is a failed check. Anything else is *unchecked*: said, never failed.
Only Python is checked (the languages `hsedit.edit.validate` parses).
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hsedit.edit.guard import lazy_marker_lines
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
    parse_intent,
)
from hsedit.edit.validate import CHECKED_SUFFIXES, parser, python_scopes


@dataclass(frozen=True)
class CheckVerdict:
    """`ok`: True the answer does what was asked, False it does not, None unchecked."""

    kind: str | None  # rename, set_constant, delete, remove_debug_print, add_parameter, ...
    ok: bool | None
    reason: str

    @property
    def checked(self) -> bool:
        return self.ok is not None

    @property
    def failed(self) -> bool:
        return self.ok is False

    def as_dict(self) -> dict:
        return {"kind": self.kind, "ok": self.ok, "reason": self.reason}


def unchecked(reason: str, kind: str | None = None) -> CheckVerdict:
    return CheckVerdict(kind, None, reason)


# -- tokens ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tok:
    type: str  # the tree-sitter leaf type; "string" for a whole literal; "text" for gaps
    text: str
    line: int  # 1-based
    start: int  # byte offsets in the source
    end: int
    role: str = ""  # identifiers: name | attribute | keyword | import

    @property
    def key(self) -> tuple[str, str]:
        return (self.type, self.text)


class Source:
    """A parsed file and its token stream."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.data = text.encode("utf-8")
        self.tree = parser("python").parse(self.data)
        self.root = self.tree.root_node
        self.tokens: list[Tok] = []
        self._collect(self.root)
        self.keys = [t.key for t in self.tokens]
        self._starts = [t.start for t in self.tokens]

    def node_text(self, node) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8", "replace")

    def span(self, node) -> tuple[int, int]:
        """The token index range [i, j) of a node."""
        import bisect

        return bisect.bisect_left(self._starts, node.start_byte), bisect.bisect_left(self._starts, node.end_byte)

    def _add(self, type_: str, start: int, end: int, line: int, role: str = "") -> None:
        text = self.data[start:end].decode("utf-8", "replace")
        self.tokens.append(Tok(type_, text, line, start, end, role))

    def _collect(self, node) -> None:
        if node.type == "string":
            fields = [c for c in node.children if c.type == "interpolation"]
            if not fields:
                self._add("string", node.start_byte, node.end_byte, node.start_point[0] + 1)
                return
            # An f-string: its literal parts verbatim, its fields' expressions as code.
            position, line = node.start_byte, node.start_point[0] + 1
            for field in fields:
                if field.start_byte > position:
                    self._add("string_part", position, field.start_byte, line)
                self._collect_field(field)
                position, line = field.end_byte, field.end_point[0] + 1
            if node.end_byte > position:
                self._add("string_part", position, node.end_byte, line)
            return
        if node.child_count == 0:
            self._add(node.type if node.is_named else "op", node.start_byte, node.end_byte, node.start_point[0] + 1, _role(node))
            return
        # Text between children that no child covers is a token too: nothing may escape the comparison.
        position, line = node.start_byte, node.start_point[0] + 1
        for child in node.children:
            self._gap(position, child.start_byte, line)
            self._collect(child)
            position, line = child.end_byte, child.end_point[0] + 1
        self._gap(position, node.end_byte, line)

    def _collect_field(self, field) -> None:
        for child in field.children:
            if child.type in ("format_specifier", "type_conversion"):
                self._add("string_part", child.start_byte, child.end_byte, child.start_point[0] + 1)
            else:
                self._collect(child)

    def _gap(self, start: int, end: int, line: int) -> None:
        if self.data[start:end].strip():
            self._add("text", start, end, line)


def _role(node) -> str:
    if node.type != "identifier":
        return ""
    parent = node.parent
    if parent is None:
        return "name"
    if parent.type == "attribute" and parent.child_by_field_name("attribute") == node:
        return "attribute"
    if parent.type == "keyword_argument" and parent.child_by_field_name("name") == node:
        return "keyword"
    ancestor = parent
    while ancestor is not None:
        if ancestor.type in ("import_statement", "import_from_statement", "future_import_statement"):
            return "name" if parent.type == "aliased_import" and parent.child_by_field_name("alias") == node else "import"
        ancestor = ancestor.parent
    return "name"


def _walk(node):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _name_of(node) -> str | None:
    name = node.child_by_field_name("name")
    return name.text.decode("utf-8", "replace") if name is not None else None


def _definitions(source: Source, name: str, types: tuple[str, ...]) -> list:
    """Definitions of `name` (the decorated_definition around one where there is one)."""
    found = []
    for node in _walk(source.root):
        if node.type in types and _name_of(node) == name:
            found.append(node.parent if node.parent is not None and node.parent.type == "decorated_definition" else node)
    return found


def _one_definition(found: list) -> tuple[object | None, str]:
    """The definition an instruction means: the only one, or the only top-level one."""
    if len(found) == 1:
        return found[0], ""
    top = [n for n in found if n.parent is not None and n.parent.type == "module"]
    if len(top) == 1:
        return top[0], ""
    return None, f"is defined {len(found)} times: which one is meant cannot be told"


def _inside(node, ranges: Sequence[tuple[int, int]]) -> bool:
    return any(a <= node.start_byte and node.end_byte <= b for a, b in ranges)


def _describe(tokens: Sequence[Tok]) -> str:
    text = " ".join(" ".join(t.text.split()) for t in tokens)
    return "`" + (text if len(text) <= 40 else text[:37] + "...") + "`"


def first_difference(old: Source, new: Source) -> str:
    """One line about the first place two token streams differ: 'line 40 changes `A` to `B`'."""
    return _first_change(old, new, range(len(old.tokens)), range(len(new.tokens))) or "the token streams are the same"


def _first_change(old: Source, new: Source, a: Sequence[int], b: Sequence[int]) -> str | None:
    """The first difference between the tokens at positions `a` of `old` and `b` of `new`, in one
    line (None: the same). A negative position is a placeholder that equals its counterpart."""
    ka = [("<span>", "") if i < 0 else old.keys[i] for i in a]
    kb = [("<span>", "") if j < 0 else new.keys[j] for j in b]
    if ka == kb:
        return None
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=ka, b=kb, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        olds = [old.tokens[i] for i in a[i1:i2] if i >= 0]
        news = [new.tokens[j] for j in b[j1:j2] if j >= 0]
        before = [old.tokens[i] for i in a[:i1] if i >= 0]
        line = olds[0].line if olds else before[-1].line if before else news[0].line if news else 1
        if olds and news:
            return f"line {line} changes {_describe(olds)} to {_describe(news)}"
        return f"line {line} loses {_describe(olds)}" if olds else f"line {line} gains {_describe(news)}"
    return None


def _same(old: Source, new: Source) -> bool:
    return old.keys == new.keys


# -- the verdict for an intent -----------------------------------------------------------------
def check_edit(
    path: str | Path, original: str, answer: str, instruction: str, update: str | None = None, *, whole_file: bool = True
) -> CheckVerdict:
    """The verdict on `answer` (the whole new file, or a region's with `whole_file=False`) for
    `instruction` (or a snippet `update`)."""
    return check_intent(path, original, answer, parse_intent(instruction, update), whole_file=whole_file)


def check_intent(
    path: str | Path, original: str, answer: str, intent: Intent, *, reach: RenameReach | None = None,
    judged_from: int = 0, whole_file: bool = True,
) -> CheckVerdict:
    """The verdict on `answer` for a parsed intent. `reach` (a rename judged on a region of a
    file): what the rename must follow, as `rename_reach(whole file)` says. `judged_from`: the
    character where a rename's uses start to count (a region's head, left as it was, is judged
    as a region of its own). `whole_file`: `original` is the whole file, so a name the answer
    reads that nothing defines any more fails it (in a region, names are defined elsewhere)."""
    suffix = Path(path).suffix.lower()
    if CHECKED_SUFFIXES.get(suffix) != "python":
        return unchecked(f"no instruction check for {suffix or 'this file type'} files")
    verdict = _check_kind(original, answer, intent, reach, judged_from)
    # A rename's own check already holds every use to the new name (and a name the file never
    # defined stays undefined under its new one).
    if whole_file and not verdict.failed and not isinstance(intent, Rename):
        dangling = names_left_undefined(original, answer)
        if dangling:
            return CheckVerdict(verdict.kind or intent.kind, False, f"the answer uses {dangling}, which nothing in the file defines")
    return verdict


def _check_kind(original: str, answer: str, intent: Intent, reach: RenameReach | None, judged_from: int) -> CheckVerdict:
    if isinstance(intent, SnippetMerge):
        return check_snippet_merge(original, answer, intent.update)
    if isinstance(intent, FreeForm):
        return unchecked("the check does not understand this instruction")
    old, new = Source(original), Source(answer)
    match intent:
        case Rename():
            return check_rename(old, new, intent.old, intent.new, intent.scope, reach,
                                judged_from=len(original[:judged_from].encode("utf-8")))
        case SetConstant():
            return check_set_constant(old, new, intent.name, [intent.value])
        case Delete():
            return check_delete(old, new, intent.name, intent.types)
        case RemovePrints():
            return check_debug_prints(old, new, intent.scope, intent.plural)
        case AddParameter():
            return check_add_parameter(old, new, intent.function, intent.param, intent.default, intent.annotation)
        case FStrings():
            return check_fstrings(old, new, intent.scope)
        case TypeHints():
            return check_type_hints(old, new, intent.scope)
    raise TypeError(f"no check for {intent!r}")


# -- rename ----------------------------------------------------------------------------------

# Token types a rename may or may not follow into: what they say is prose, not a use.
FREE_TEXT = ("string", "string_part", "comment", "text")


def check_rename(
    old: Source, new: Source, name: str, replacement: str, scope: str | None = None, reach: RenameReach | None = None,
    judged_from: int = 0,  # byte where uses start to count (unscoped renames)
) -> CheckVerdict:
    kind = "rename"
    if not scope:
        reach = rename_reach(old, name) if reach is None else reach
        return _check_rename_in(old, new, name, replacement, None, [(judged_from, len(old.data))], reach)
    scopes = _definitions(old, scope, ("function_definition", "class_definition"))
    if not scopes:
        if _same(old, new):
            return CheckVerdict(kind, True, f"nothing to do: there is no `{scope}` in the file")
        return CheckVerdict(kind, False, f"there is no `{scope}` in the file, yet the answer changes it ({first_difference(old, new)})")
    # Several definitions of that name: the answer is right if it is right for one of them.
    mentioning = [n for n in scopes if re.search(rf"\b{re.escape(name)}\b", old.node_text(n))] or scopes[:1]
    verdicts = [_check_rename_in(old, new, name, replacement, scope, [(n.start_byte, n.end_byte)], RenameReach(False, False))
                for n in mentioning]
    return next((v for v in verdicts if v.ok), verdicts[0])


@dataclass(frozen=True)
class RenameReach:
    """What an unscoped rename of a name must follow besides its bare uses, read on the whole file
    (a region alone cannot tell)."""

    attributes: bool  # `obj.OLD` is a use: OLD is a member, or occurs only as attributes
    exports: bool  # the module's own name is renamed, so its `__all__` entries must follow


def rename_reach(source: Source, name: str) -> RenameReach:
    names = any(t.type == "identifier" and t.text == name and t.role == "name" for t in source.tokens)
    return RenameReach(attributes=not names or _is_member(source, name), exports=names)


def _check_rename_in(
    old: Source, new: Source, name: str, replacement: str, scope: str | None, ranges, reach: RenameReach
) -> CheckVerdict:
    kind = "rename"
    where = f" in {scope}" if scope else ""
    occurrences = [i for i, t in enumerate(old.tokens) if t.type == "identifier" and t.text == name]
    in_scope = [i for i in occurrences if _inside_token(old.tokens[i], ranges)]
    free_text = [i for i, t in enumerate(old.tokens) if t.type in FREE_TEXT and _inside_token(t, ranges)
                 and re.search(rf"\b{re.escape(name)}\b", t.text)]
    if not in_scope and not free_text:
        if _same(old, new):
            return CheckVerdict(kind, True, f"nothing to do: `{name}` does not occur{where}")
        return CheckVerdict(kind, False, f"`{name}` does not occur{where}, yet the answer changes the file ({first_difference(old, new)})")
    names = [i for i in in_scope if old.tokens[i].role == "name"]
    attributes = [i for i in in_scope if old.tokens[i].role == "attribute"]
    required = set(names) | (set(attributes) if reach.attributes else set())
    free = set(in_scope) - required
    exported = {old.span(n)[0] for n in exported_strings(old, name)} if reach.exports else set()
    if not required and not exported and _same(old, new):
        return unchecked(f"`{name}` occurs{where} only in strings or comments (line {old.tokens[free_text[0]].line}), "
                         "which a rename may leave as they are", kind)
    # Align the streams with the new name read as the old one, so one missed or extra token
    # elsewhere does not hide which uses were renamed.
    taken = any(t.type == "identifier" and t.text == replacement for t in old.tokens)
    as_old = [("identifier", name) if not taken and t.type == "identifier" and t.text == replacement else t.key for t in new.tokens]
    pairs, others = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old.keys, b=as_old, autojunk=False).get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            pairs.extend(zip(range(i1, i2), range(j1, j2)))
        elif tag == "delete":
            others.append(f"line {old.tokens[i1].line} loses {_describe(old.tokens[i1:i2])}")
        elif tag == "insert":
            others.append(f"line {old.tokens[min(i1, len(old.tokens) - 1)].line} gains {_describe(new.tokens[j1:j2])}")
        else:
            others.append(f"line {old.tokens[i1].line} changes {_describe(old.tokens[i1:i2])} to {_describe(new.tokens[j1:j2])}")
    missed, followed, unexported = [], [], []
    for i, j in pairs:
        a, b = old.tokens[i], new.tokens[j]
        if i in exported:
            if b.type == "string" and _literal(b.text) == replacement:
                continue
            if a.key == b.key:
                unexported.append(a.line)
                continue
        if a.key == b.key:
            if i in required:
                missed.append(a.line)
            continue
        if (i in required or i in free) and b.type == "identifier" and b.text == replacement:
            if i in free:
                followed.append(a)
            continue
        if i in free_text and _renamed_words(a.text, b.text, name, replacement):
            continue
        others.append(f"line {a.line} changes {_describe([a])} to {_describe([b])}")
    others.sort(key=lambda text: int(text.split()[1]))
    problems = []
    if missed:
        lines = ", ".join(str(n) for n in sorted(set(missed))[:5]) + (", ..." if len(set(missed)) > 5 else "")
        problems.append(f"{len(missed)} of {len(required)} uses of `{name}`{where} not renamed (line {lines})")
    if unexported:
        problems.append(f"`__all__` still lists `{name}` (line {unexported[0]})")
    if others:
        problems.append(others[0] + ", which the rename does not touch" + (f" (and {len(others) - 1} more)" if len(others) > 1 else ""))
    if problems:
        return CheckVerdict(kind, False, "; ".join(problems))
    if followed:
        return unchecked(
            f"all {len(required)} uses of `{name}`{where} renamed; line {followed[0].line} also renames the {followed[0].role} "
            f"`{name}`, and whether that is the same thing cannot be told from this file", kind)
    return CheckVerdict(kind, True, f"all {len(required) + len(exported)} uses of `{name}`{where} renamed to `{replacement}`, nothing else changed")


def exported_strings(source: Source, name: str) -> list:
    """The string literals naming `name` in the module's `__all__` (`__all__ = [...]`, `+=`,
    `.append(...)`, `.extend(...)` at the top level): a rename of the name must rename them, or
    `from module import *` breaks."""
    found = []
    for statement in source.root.named_children:
        if statement.type != "expression_statement" or not statement.named_children:
            continue
        node = statement.named_children[0]
        if node.type in ("assignment", "augmented_assignment"):
            target, value = node.child_by_field_name("left"), node.child_by_field_name("right")
        elif node.type == "call":
            function = node.child_by_field_name("function")
            is_list_call = (function is not None and function.type == "attribute"
                            and function.child_by_field_name("attribute").text in (b"append", b"extend"))
            target = function.child_by_field_name("object") if is_list_call else None
            value = node.child_by_field_name("arguments")
        else:
            continue
        if target is None or value is None or target.type != "identifier" or target.text != b"__all__":
            continue
        found += [n for n in _walk(value) if n.type == "string" and _literal(source.node_text(n)) == name]
    return found


def _inside_token(token: Tok, ranges: Sequence[tuple[int, int]]) -> bool:
    return any(a <= token.start and token.end <= b for a, b in ranges)


def _is_member(source: Source, name: str) -> bool:
    """`name` is a method or a class attribute, or assigned as `self.name`: `obj.name` means it."""
    for node in _walk(source.root):
        if node.type == "function_definition" and _name_of(node) == name:
            block = node.parent.parent if node.parent.type == "decorated_definition" else node.parent
            if block is not None and block.type == "block" and block.parent is not None and block.parent.type == "class_definition":
                return True
        if node.type == "assignment":
            left = node.child_by_field_name("left")
            if left is not None and left.type == "attribute":
                attribute, obj = left.child_by_field_name("attribute"), left.child_by_field_name("object")
                if attribute is not None and attribute.text.decode() == name and obj is not None and obj.text in (b"self", b"cls"):
                    return True
            if left is not None and left.type == "identifier" and left.text.decode() == name:
                block = node.parent.parent if node.parent is not None else None
                if block is not None and block.type == "block" and block.parent is not None and block.parent.type == "class_definition":
                    return True
    return False


def same_rename(expected: str, answer: str, name: str, replacement: str) -> bool:
    """`answer` is the rename `expected` is, but for strings and comments in which either one
    renamed some whole-word mentions of `name` the other left (a docstring kept up to date, or
    not): what the rename check accepts either way, so neither is wrong."""
    a, b = Source(expected).tokens, Source(answer).tokens
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.key == y.key:
            continue
        if x.type != y.type or x.type not in FREE_TEXT:
            return False
        if not (_renamed_words(x.text, y.text, name, replacement) or _renamed_words(y.text, x.text, name, replacement)):
            return False
    return True


def _renamed_words(before: str, after: str, name: str, replacement: str) -> bool:
    """`after` is `before` with some whole-word occurrences of `name` replaced by `replacement`."""
    pieces = re.split(rf"\b{re.escape(name)}\b", before)
    pattern = f"(?:{re.escape(name)}|{re.escape(replacement)})".join(re.escape(p) for p in pieces)
    return re.fullmatch(pattern, after, re.DOTALL) is not None


# -- set a constant --------------------------------------------------------------------------


def _literal(text: str):
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _NOT_LITERAL
    return value


_NOT_LITERAL = object()


def _same_value(a, b) -> bool:
    return a is not _NOT_LITERAL and b is not _NOT_LITERAL and type(a) is type(b) and a == b


def _assignments(source: Source, name: str) -> list:
    """Assignments `name = value` (or `name: T = value`) outside functions."""
    found = []
    for node in _walk(source.root):
        if node.type != "assignment":
            continue
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if left is None or right is None or left.type != "identifier" or left.text.decode() != name:
            continue
        ancestor, in_function = node.parent, False
        while ancestor is not None:
            in_function |= ancestor.type in ("function_definition", "lambda")
            ancestor = ancestor.parent
        if not in_function:
            found.append(node)
    return found


def check_set_constant(old: Source, new: Source, name: str, values: Sequence[str]) -> CheckVerdict:
    kind = "set_constant"
    targets = _assignments(old, name)
    if len(targets) != 1:
        what = "is never assigned" if not targets else f"is assigned {len(targets)} times"
        return unchecked(f"`{name}` {what} outside functions: which value to set cannot be told", kind)
    value_node = targets[0].child_by_field_name("right")
    old_value = old.node_text(value_node)
    expected = [_literal(v) for v in values]
    if isinstance(_literal(old_value), str):
        expected += [v for v in values if re.fullmatch(r"[\w.\-]+", v)]  # "set MODE to fast": the string
    if isinstance(_literal(old_value), bool):
        expected += [{"true": True, "false": False}[v.lower()] for v in values if v.lower() in ("true", "false")]

    if all(e is _NOT_LITERAL for e in expected) and any(Source(v).root.has_error for v in values):
        return unchecked(f"{values[0]!r} is not a Python value or expression", kind)

    def matches(text: str) -> bool:
        found = _literal(text)
        if any(_same_value(found, e) for e in expected):
            return True
        return all(e is _NOT_LITERAL for e in expected) and any(_expression_keys(text) == _expression_keys(v) for v in values)

    if matches(old_value):
        if _same(old, new):
            return CheckVerdict(kind, True, f"nothing to do: `{name}` is already {old_value}")
        return CheckVerdict(kind, False, f"`{name}` is already {old_value}, yet the answer changes {first_difference(old, new)}")
    answers = _assignments(new, name)
    if len(answers) != 1:
        return CheckVerdict(kind, False, f"the answer assigns `{name}` {len(answers)} times outside functions (the file once)")
    new_value_node = answers[0].child_by_field_name("right")
    new_value = new.node_text(new_value_node)
    if not matches(new_value):
        return CheckVerdict(kind, False, f"line {new_value_node.start_point[0] + 1} sets `{name}` to {new_value}, not {values[0]}")
    problem = _outside_differs(old, new, [old.span(value_node)], [new.span(new_value_node)])
    if problem:
        return CheckVerdict(kind, False, f"`{name}` is set, but {problem}, which the instruction does not ask for")
    return CheckVerdict(kind, True, f"`{name}` set to {new_value}, nothing else changed")


def _expression_keys(text: str) -> list[tuple[str, str]]:
    return Source(text).keys


def _outside_differs(old: Source, new: Source, old_spans, new_spans) -> str | None:
    """The first difference outside the given token spans (in order, as many in each: span k of
    the old file stands against span k of the new one), or None."""
    def cut(source: Source, spans) -> list[int]:
        keep, position = [], 0
        for i, j in sorted(spans):
            keep.extend(range(position, i))
            keep.append(-1)  # the span, as one placeholder
            position = j
        keep.extend(range(position, len(source.tokens)))
        return keep

    return _first_change(old, new, cut(old, old_spans), cut(new, new_spans))


# -- delete a function or class --------------------------------------------------------------


def check_delete(old: Source, new: Source, name: str, types: tuple[str, ...]) -> CheckVerdict:
    kind = "delete"
    found = _definitions(old, name, types)
    if not found:
        if any(t.type == "identifier" and t.text == name for t in old.tokens):
            return unchecked(f"`{name}` occurs but is not defined here as a function or class", kind)
        if _same(old, new):
            return CheckVerdict(kind, True, f"nothing to do: there is no `{name}` in the file")
        return CheckVerdict(kind, False, f"there is no `{name}` in the file, yet the answer changes it ({first_difference(old, new)})")
    chosen, why = _one_definition(found)
    if chosen is None:
        return unchecked(f"`{name}` {why}", kind)
    found = [chosen]
    i, j = old.span(chosen)
    comments = i
    while comments > 0 and old.tokens[comments - 1].type == "comment" and old.tokens[comments - 1].line >= old.tokens[comments].line - 1:
        comments -= 1
    keys_without = [old.keys[:start] + old.keys[j:] for start in range(comments, i + 1)]
    if new.keys in keys_without:
        return CheckVerdict(kind, True, f"`{name}` (lines {found[0].start_point[0] + 1}-{found[0].end_point[0] + 1}) deleted, nothing else changed")
    if _same(old, new):
        return CheckVerdict(kind, False, f"the answer is the file unchanged: `{name}` (line {found[0].start_point[0] + 1}) is still there")
    if _definitions(new, name, types):
        return CheckVerdict(kind, False, f"`{name}` is still defined; {first_difference(old, new)}")
    return CheckVerdict(kind, False, f"`{name}` is deleted, but {_outside_differs(old, new, [(i, j)], [])}, which the instruction does not ask for")


# -- debug prints ----------------------------------------------------------------------------


def _print_statements(source: Source, ranges) -> list:
    found = []
    for node in _walk(source.root):
        if node.type == "expression_statement" and node.named_child_count == 1:
            call = node.named_children[0]
            function = call.child_by_field_name("function") if call.type == "call" else None
            if function is not None and function.type == "identifier" and function.text == b"print" and _inside(node, ranges):
                found.append(node)
    return found


def check_debug_prints(old: Source, new: Source, scope: str | None, plural: bool) -> CheckVerdict:
    kind = "remove_debug_print"
    where = f" in {scope}" if scope else ""
    ranges = [(0, len(old.data))]
    if scope:
        scopes = _definitions(old, scope, ("function_definition", "class_definition"))
        if not scopes:
            return unchecked(f"there is no `{scope}` in the file", kind)
        ranges = [(n.start_byte, n.end_byte) for n in scopes]
    prints = _print_statements(old, ranges)
    if not prints:
        if _same(old, new):
            return CheckVerdict(kind, True, f"nothing to do: no print statement{where}")
        return CheckVerdict(kind, False, f"there is no print statement{where}, yet the answer changes the file ({first_difference(old, new)})")
    # Which prints went: the answer must be the file less some of them (a block left empty gets `pass`).
    starts = {old.span(p)[0]: (k, old.span(p)[1]) for k, p in enumerate(prints)}
    removed: list[int] = []
    i = j = 0
    while i < len(old.keys):
        if i in starts:
            k, end = starts[i]
            if new.keys[j : j + end - i] == old.keys[i:end]:
                i, j = end, j + end - i
                continue
            removed.append(k)
            i = end
            if new.keys[j : j + 1] == [("op", "pass")] and old.keys[i : i + 1] != [("op", "pass")]:
                j += 1
            continue
        if j >= len(new.keys) or old.keys[i] != new.keys[j]:
            break
        i, j = i + 1, j + 1
    if i < len(old.keys) or j < len(new.keys):
        problem = first_difference(old, new)
        return CheckVerdict(kind, False, f"the answer changes more than print statements: {problem}")
    lines = [prints[k].start_point[0] + 1 for k in removed]
    listed = ", ".join(map(str, lines))
    if not removed:
        if plural:
            return unchecked(f"the answer keeps all {len(prints)} print statements{where}; whether any is a debug print is not checked", kind)
        return CheckVerdict(kind, False, f"the answer is the file unchanged: {_count(len(prints), 'print statement')}{where} still there (line {', '.join(str(p.start_point[0] + 1) for p in prints[:5])})")
    if not plural and len(removed) > 1:
        return CheckVerdict(kind, False, f"the answer removes {len(removed)} print statements (lines {listed}); the instruction asks for one")
    if len(prints) == 1 or (plural and len(removed) == len(prints)):
        return CheckVerdict(kind, True, f"the print statement{'s' if len(removed) > 1 else ''} at line {listed} removed, nothing else changed")
    return unchecked(f"the answer removes {len(removed)} of {len(prints)} print statements{where} (line {listed}) and nothing else; which are debug prints is not checked", kind)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'} {'is' if n == 1 else 'are'}"


# -- add a parameter -------------------------------------------------------------------------


def _parameters(source: Source, node) -> list[tuple[str, str, object, object]]:
    """(name, token text, default node, annotation node) of each parameter of a function definition."""
    out = []
    for child in node.child_by_field_name("parameters").named_children:
        if child.type == "comment":
            continue
        name = child if child.type == "identifier" else child.child_by_field_name("name")
        if name is None:  # *args, **kwargs, a bare * or /
            name = next((c for c in child.named_children if c.type == "identifier"), None)
        label = name.text.decode() if name is not None else child.type
        i, j = source.span(child)
        out.append((label, " ".join(t.text for t in source.tokens[i:j]), child.child_by_field_name("value"),
                    child.child_by_field_name("type")))
    return out


def check_add_parameter(
    old: Source, new: Source, function: str, param: str, default: str | None, annotation: str | None = None
) -> CheckVerdict:
    kind = "add_parameter"
    found = _definitions(old, function, ("function_definition",))
    if not found:
        return unchecked(f"there is no function `{function}` in the file", kind)
    chosen, why = _one_definition(found)
    if chosen is None:
        return unchecked(f"`{function}` {why}", kind)
    defined = [n for n in _walk(chosen) if n.type == "function_definition" and _name_of(n) == function][0]
    before = _parameters(old, defined)
    if any(name == param for name, *_ in before):
        if _same(old, new):
            return CheckVerdict(kind, True, f"nothing to do: `{function}` already has `{param}`")
        return unchecked(f"`{function}` already has a parameter `{param}`", kind)
    answers = [n for n in _walk(new.root) if n.type == "function_definition" and _name_of(n) == function]
    if len(answers) != len(found):
        return CheckVerdict(kind, False, f"the answer defines `{function}` {len(answers)} times (the file {len(found)})")
    answers = [answers[[n.start_byte for n in found].index(chosen.start_byte)]]
    after = _parameters(new, answers[0])
    added = [p for p in after if p[0] == param]
    if not added:
        return CheckVerdict(kind, False, f"`{function}` (line {defined.start_point[0] + 1}) has no parameter `{param}` in the answer")
    rest = [text for name, text, *_ in after if name != param]
    if rest != [text for _, text, *_ in before]:
        return CheckVerdict(kind, False, f"the answer changes other parameters of `{function}`: {', '.join(rest)}")
    value, written = added[0][2], added[0][3] and new.node_text(added[0][3])
    if annotation is None and written is not None:
        return CheckVerdict(kind, False, f"`{function}` gains `{added[0][1]}`: the instruction asks for no type annotation")
    if annotation is not None and (written is None or _expression_keys(written) != _expression_keys(annotation)):
        return CheckVerdict(kind, False, f"`{function}` gains `{added[0][1]}`: the instruction asks for `{param}: {annotation}`")
    if default is not None:
        if value is None:
            return CheckVerdict(kind, False, f"`{param}` has no default in the answer (asked: {default})")
        given = new.node_text(value)
        if not (_same_value(_literal(given), _literal(default)) or _expression_keys(given) == _expression_keys(default)):
            return CheckVerdict(kind, False, f"`{param}` defaults to {given}, not {default}")
    problem = _outside_differs(
        old, new, [old.span(defined.child_by_field_name("parameters"))], [new.span(answers[0].child_by_field_name("parameters"))]
    )
    if problem:
        return CheckVerdict(kind, False, f"`{param}` is added, but {problem}, which the instruction does not ask for")
    return CheckVerdict(kind, True, f"`{function}` gains `{added[0][1]}`, nothing else changed")


# -- %-formatting to f-strings ---------------------------------------------------------------


# The one grammar of printf-style conversions: what `%` formatting reads in a format string.
PERCENT_SPEC = re.compile(
    r"%(?:\((?P<key>[^)]*)\))?(?P<flags>[-0+ #]*)(?P<width>\*|\d+)?(?:\.(?P<precision>\*|\d+))?(?P<length>[hlL])?(?P<type>.)"
)
_CONVERTIBLE = "sdirfFeEgGxXoa%"  # types with an f-string equivalent


def is_mechanical(spec: re.Match) -> bool:
    """A conversion the apply model is trained to turn into an f-string field (and its data
    generator makes): %s %d %i %r %f %.Nf."""
    if spec["key"] is not None or spec["flags"] or spec["width"] or spec["length"]:
        return False
    if spec["precision"] is None:
        return spec["type"] in "sdirf"
    return spec["type"] == "f" and spec["precision"] != "*"


def _percent_formats(source: Source, ranges) -> list:
    found = []
    for node in _walk(source.root):
        if node.type == "binary_operator" and _inside(node, ranges):
            operator, left = node.child_by_field_name("operator"), node.child_by_field_name("left")
            literal = _literal_parts(source, left) if operator is not None and operator.type == "%" else None
            if literal is not None and "f" not in literal[0] and "b" not in literal[0]:
                found.append(node)
    return found


def _string_prefix(source: Source, node) -> str:
    start = node.children[0] if node.children else node
    return re.match(r"[A-Za-z]*", source.node_text(start)).group(0).lower()


def _literal_parts(source: Source, node) -> tuple[str, list[str], str] | None:
    """(prefix, quote characters used, inner text) of a string literal or of adjacent ones with the
    same prefix ("a" "b" is "ab"); None for anything else."""
    parts = [node] if node is not None and node.type == "string" else (
        node.named_children if node is not None and node.type == "concatenated_string" else None)
    if not parts or any(p.type != "string" for p in parts):
        return None
    prefixes = {_string_prefix(source, p) for p in parts}
    if len(prefixes) != 1:
        return None
    prefix = prefixes.pop()
    quotes, inner = [], []
    for part in parts:
        body = source.node_text(part)[len(prefix) :]
        q = 3 if body[:3] in ('"""', "'''") else 1
        quotes.append(body[:q])
        inner.append(body[q:-q])
    return prefix, quotes, "".join(inner)


def _fstrings(source: Source, ranges) -> list:
    return [n for n in _walk(source.root) if n.type == "string" and "f" in _string_prefix(source, n) and _inside(n, ranges)]


def _split_format(body: str) -> tuple[list[str], list[re.Match]] | None:
    """A %-format string's literal pieces and its conversions; None if it cannot be read."""
    pieces, specs, position = [], [], 0
    for spec in PERCENT_SPEC.finditer(body):
        if spec["key"] is not None or spec["length"] or "*" in (spec["width"] or "") + (spec["precision"] or "") \
                or spec["type"] not in _CONVERTIBLE:
            return None  # %(name)s, * widths, lengths: not mechanical
        if spec["type"] == "%":
            continue
        pieces.append(body[position : spec.start()])
        specs.append(spec)
        position = spec.end()
    pieces.append(body[position:])
    return [p.replace("%%", "%") for p in pieces], specs


def _spec_forms(spec: re.Match) -> set[tuple[str, str]]:
    """The (conversion, format spec) pairs of an f-string field that render as this %-conversion."""
    flags, width, precision, letter = spec["flags"], spec["width"] or "", spec["precision"], spec["type"]
    if letter in "sra":
        if precision is not None or set(flags) - {"-"}:
            return set()
        conversion = "" if letter == "s" else "!" + letter
        align = "<" if "-" in flags else ">"
        forms = {(conversion, f"{align}{width}" if width else "")}
        if letter == "s":
            forms.add(("!s", f"{align}{width}" if width else ""))
            if width and "-" in flags:
                forms.add(("", width))
        return forms
    if letter in "diu":
        letter = "d"
    sign = "".join(f for f in "+ " if f in flags)
    alternate = "#" if "#" in flags else ""
    zero = "0" if "0" in flags and "-" not in flags else ""
    align = "<" if "-" in flags else ""
    body = f"{align}{sign}{alternate}{zero}{width}" + (f".{precision}" if precision is not None else "")
    forms = {("", body + letter)}
    if letter == "d" and not body:
        forms.add(("", ""))
    return forms


def check_fstrings(old: Source, new: Source, scope: str | None) -> CheckVerdict:
    kind = "percent_to_fstring"
    where = f" in {scope}" if scope else ""
    ranges = [(0, len(old.data))]
    if scope:
        scopes = _definitions(old, scope, ("function_definition", "class_definition"))
        if not scopes:
            return unchecked(f"there is no `{scope}` in the file", kind)
        ranges = [(n.start_byte, n.end_byte) for n in scopes]
    whole = [(0, len(new.data))]
    formats = _percent_formats(old, ranges)
    if not formats:
        if _same(old, new):
            return CheckVerdict(kind, True, f"nothing to do: no %-formatted string{where}")
        return CheckVerdict(kind, False, f"there is no %-formatted string{where}, yet the answer changes {first_difference(old, new)}")
    # Slots: every %-format and every f-string, in both files, stand for one token; the rest must match.
    old_slots = sorted(_percent_formats(old, [(0, len(old.data))]) + _fstrings(old, [(0, len(old.data))]), key=lambda n: n.start_byte)
    new_slots = sorted(_percent_formats(new, whole) + _fstrings(new, whole), key=lambda n: n.start_byte)
    old_slots, new_slots = _outermost(old_slots), _outermost(new_slots)
    problem = _outside_differs(old, new, [old.span(n) for n in old_slots], [new.span(n) for n in new_slots])
    if problem or len(old_slots) != len(new_slots):
        return CheckVerdict(kind, False, f"the answer changes more than string formatting: {problem or 'the number of format strings differs'}")
    converted, kept, uncertain = 0, [], []
    targets = {n.start_byte for n in formats}
    for a, b in zip(old_slots, new_slots):
        old_text, new_text = old.node_text(a), new.node_text(b)
        if old.keys[slice(*old.span(a))] == new.keys[slice(*new.span(b))]:
            if a.start_byte in targets and _mechanical(old, a):
                kept.append(a.start_point[0] + 1)
            continue
        if a.start_byte not in targets:
            return CheckVerdict(kind, False, f"line {a.start_point[0] + 1} changes {old_text!r}, which is not a %-format{where}")
        verdict = _equivalent(old, a, new, b)
        if verdict is False:
            return CheckVerdict(kind, False, f"line {a.start_point[0] + 1}: {new_text} does not render as {old_text}")
        if verdict is None:
            uncertain.append(a.start_point[0] + 1)
        converted += 1
    if not converted and not kept:
        return unchecked(f"the answer converts none of the {len(formats)} %-formats{where}; none is one the check knows how to convert", kind)
    if kept:
        return CheckVerdict(kind, False, f"{len(kept)} of {len(formats)} %-formats{where} not converted (line {', '.join(map(str, kept[:5]))})")
    if uncertain:
        return unchecked(f"{converted} %-formats converted; the conversion at line {uncertain[0]} is not one the check can verify", kind)
    return CheckVerdict(kind, True, f"{converted} %-format{'s' if converted != 1 else ''} converted to equivalent f-strings, nothing else changed")


def _outermost(nodes: list) -> list:
    out = []
    for node in nodes:
        if not out or node.start_byte >= out[-1].end_byte:
            out.append(node)
    return out


def _mechanical(source: Source, node) -> bool:
    """A %-format the apply model is trained to convert: one line of text, no escapes, braces or
    %%, only %s %d %i %r %f %.Nf, one plain argument per conversion."""
    _prefix, quotes, inner = _literal_parts(source, node.child_by_field_name("left"))
    if len(set(quotes)) != 1 or len(quotes[0]) != 1:
        return False
    if any(c in inner for c in "\\{}\n") or "%%" in inner:
        return False
    arguments = _arguments(source, node)
    specs = list(PERCENT_SPEC.finditer(inner))
    if arguments is None or inner.count("%") != len(specs) or len(specs) != len(arguments) or not all(map(is_mechanical, specs)):
        return False
    return not any(c in source.node_text(a) for a in arguments for c in "\\'\"\n{}")


def _arguments(source: Source, node) -> list | None:
    right = node.child_by_field_name("right")
    while right is not None and right.type == "parenthesized_expression" and right.named_child_count == 1:
        right = right.named_children[0]
    if right is None:
        return None
    if right.type == "tuple":
        return [c for c in right.named_children if c.type != "comment"]
    if right.type in ("dictionary", "list_splat", "dictionary_splat"):
        return None
    return [right]


def _equivalent(old: Source, percent, new: Source, fstring) -> bool | None:
    """Does the f-string render as the %-format? None where that cannot be decided here."""
    prefix, quotes, body = _literal_parts(old, percent.child_by_field_name("left"))
    split = _split_format(body)
    arguments = _arguments(old, percent)
    if split is None or arguments is None:
        return None
    pieces, specs = split
    if len(specs) != len(arguments):
        return None
    if set(prefix) | {"f"} != set(_string_prefix(new, fstring)):
        return False
    # The f-string as literal parts and fields.
    new_body = new.node_text(fstring)[len(_string_prefix(new, fstring)) :]
    q2 = 3 if new_body[:3] in ('"""', "'''") else 1
    inner_start = fstring.start_byte + len(_string_prefix(new, fstring)) + q2
    inner_end = fstring.end_byte - q2
    literal, fields, position = [], [], inner_start
    for child in fstring.children:
        if child.type != "interpolation":
            continue
        literal.append(new.data[position : child.start_byte].decode())
        fields.append(child)
        position = child.end_byte
    literal.append(new.data[position:inner_end].decode())
    if len(fields) != len(specs):
        return False
    if set(quotes) != {new_body[:q2]} and any(c in "".join(pieces) + "".join(literal) for c in "'\"\\"):
        return None
    expected = [p.replace("{", "{{").replace("}", "}}") for p in pieces]
    if expected != literal:
        return False
    for spec, argument, field in zip(specs, arguments, fields):
        if any(c.type not in ("{", "}", "type_conversion", "format_specifier") and c != field.child_by_field_name("expression")
               for c in field.children):
            return False  # `{x=}` and the like render more than the value
        expression = field.child_by_field_name("expression")
        conversion = field.child_by_field_name("type_conversion")
        format_spec = field.child_by_field_name("format_specifier")
        if expression is None:
            return False
        if new.keys[slice(*new.span(expression))] != old.keys[slice(*old.span(argument))]:
            return False
        forms = _spec_forms(spec)
        if not forms:
            return None
        given = (new.node_text(conversion) if conversion is not None else "",
                 new.node_text(format_spec)[1:] if format_spec is not None else "")
        if given not in forms:
            return False
    return True


# -- type hints ------------------------------------------------------------------------------


_TYPING_MODULES = ("typing", "typing_extensions", "collections.abc", "__future__", "collections")


def _annotation_spans(source: Source) -> list[tuple[int, int]]:
    """Token spans of every annotation with its `:` or `->` (parameters, returns, assignments)."""
    spans = []
    for node in _walk(source.root):
        annotation = None
        if node.type in ("typed_parameter", "typed_default_parameter") or (node.type == "assignment" and node.child_by_field_name("type")):
            annotation = node.child_by_field_name("type")
        elif node.type == "function_definition" and node.child_by_field_name("return_type") is not None:
            annotation = node.child_by_field_name("return_type")
        if annotation is None:
            continue
        i, j = source.span(annotation)
        spans.append((i - 1, j))  # the ":" or "->" before it
    return spans


def _typing_imports(source: Source, besides: Source | None = None) -> list[tuple[int, int]]:
    """Token spans of top-level imports from typing-like modules (those not also in `besides`)."""
    already = {besides.node_text(n) for n in besides.root.named_children} if besides is not None else set()
    spans = []
    for node in source.root.named_children:
        if node.type in ("import_from_statement", "future_import_statement", "import_statement") and source.node_text(node) not in already:
            module = node.child_by_field_name("module_name")
            names = [module.text.decode()] if module is not None else [
                c.text.decode() for c in node.named_children if c.type == "dotted_name"]
            if node.type == "future_import_statement" or (names and all(n in _TYPING_MODULES for n in names)):
                spans.append(source.span(node))
    return spans


def _signatures(source: Source, ranges) -> list[tuple[str, dict[str, str], str | None, object]]:
    """(name, {parameter: annotation}, return annotation, node) of each function in `ranges`."""
    out = []
    for node in _walk(source.root):
        if node.type != "function_definition" or not _inside(node, ranges):
            continue
        annotations = {}
        for child in node.child_by_field_name("parameters").named_children:
            name = child if child.type == "identifier" else child.child_by_field_name("name")
            if name is None:
                name = next((c for c in child.named_children if c.type == "identifier"), None)
            if name is None:
                continue
            kind = child.child_by_field_name("type")
            if child.type in ("list_splat_pattern", "dictionary_splat_pattern", "typed_parameter") and kind is None:
                kind = next((c for c in child.children if c.type == "type"), None)
            stars = "*" if "list_splat" in child.type or "*" in source.node_text(child)[:1] else ""
            stars = "**" if "dictionary_splat" in child.type or source.node_text(child)[:2] == "**" else stars
            annotations[stars + name.text.decode()] = (
                source.node_text(kind) if kind is not None else None)
        returns = node.child_by_field_name("return_type")
        out.append((_name_of(node), annotations, source.node_text(returns) if returns is not None else None, node))
    return out


def check_type_hints(old: Source, new: Source, scope: str | None) -> CheckVerdict:
    kind = "add_type_hints"
    everything = [(0, len(old.data))]
    if scope:
        scopes = _definitions(old, scope, ("function_definition",))
        if not scopes:
            return unchecked(f"there is no function `{scope}` in the file", kind)
    problem = _stripped_difference(old, new)
    named = {n.start_byte for n in _walk(old.root) if n.type == "function_definition" and (scope is None or _name_of(n) == scope)}
    if problem:
        return CheckVerdict(kind, False, f"the answer changes more than annotations: {problem}")
    before, after = _signatures(old, everything), _signatures(new, [(0, len(new.data))])
    if [b[0] for b in before] != [a[0] for a in after]:
        return CheckVerdict(kind, False, "the answer changes which functions the file defines")
    missing, added_outside, changed, todo = [], [], [], 0
    for (name, params, returns, node), (_, new_params, new_returns, _) in zip(before, after):
        in_scope = node.start_byte in named
        slots = [(f"`{p}` of `{name}`", a, new_params.get(p), p not in ("self", "cls") and not p.startswith("*"))
                 for p, a in params.items()]
        # __init__ returns None by definition: `-> None` there is style, not a missing hint.
        slots.append((f"the return of `{name}`", returns, new_returns, name != "__init__"))
        for label, annotation, new_annotation, required in slots:
            if annotation is not None:
                if new_annotation != annotation:
                    changed.append(label)
            elif new_annotation is not None:
                if not in_scope:
                    added_outside.append(label)
            elif in_scope and required:
                missing.append(label)
            todo += in_scope and required and annotation is None
    if changed:
        return CheckVerdict(kind, False, f"the answer changes existing annotations: {', '.join(changed[:3])}")
    if added_outside:
        return CheckVerdict(kind, False, f"the answer annotates {added_outside[0]}, which the instruction does not ask for")
    if todo == 0:
        if _same(old, new):
            return CheckVerdict(kind, True, "nothing to do: already annotated")
    if missing:
        if _same(old, new):
            return CheckVerdict(kind, False, f"the answer is the file unchanged: {len(missing)} annotations missing")
        return CheckVerdict(kind, False, f"{len(missing)} of {todo} annotations missing: {', '.join(missing[:4])}")
    own = _annotations_naming_parameters(new, [n for (*_, o), (*_, n) in zip(before, after) if o.start_byte in named])
    if own:
        return CheckVerdict(kind, False, own)
    return unchecked(f"only annotations added ({todo}), nothing else changed; whether the types are right is not checked", kind)


def _annotations_naming_parameters(source: Source, functions: list) -> str | None:
    """An annotation that names one of its own function's parameters is no type (`req: wheel_cache`)."""
    for function in functions:
        parameters = function.child_by_field_name("parameters")
        names = {c.text.decode() for c in _walk(parameters) if c.type == "identifier" and c.parent is not None
                 and c.parent.type in ("parameters", "default_parameter", "typed_parameter", "typed_default_parameter")
                 and c.parent.child_by_field_name("type") != c}
        annotations = [c.child_by_field_name("type") for c in parameters.named_children] + [function.child_by_field_name("return_type")]
        for annotation in filter(None, annotations):
            first = next((t for t in _walk(annotation) if t.type == "identifier"), None)
            if first is not None and first.text.decode() in names - {"self", "cls"}:
                return f"line {annotation.start_point[0] + 1} annotates with `{source.node_text(annotation)}`, a parameter of `{_name_of(function)}`, not a type"
    return None


def _stripped_difference(old: Source, new: Source) -> str | None:
    """The first difference once annotations (and, in the answer, new typing imports) are cut out."""
    def keep(source: Source, spans) -> list[int]:
        dropped = {k for i, j in spans for k in range(i, j)}
        return [k for k in range(len(source.tokens)) if k not in dropped]

    a = keep(old, _annotation_spans(old))
    b = keep(new, _annotation_spans(new) + _typing_imports(new, besides=old))
    return _first_change(old, new, a, b)


# -- snippet merges --------------------------------------------------------------------------
def _is_marker(line: str) -> bool:
    return bool(lazy_marker_lines("", line))


def check_snippet_merge(original: str, answer: str, update: str) -> CheckVerdict:
    """answer = original[:a] + S1 + original[x1:y1] + S2 + ... + Sm + original[b:]: every snippet
    segment present as written, each marker a run of the original, the rest the original."""
    kind = "snippet_merge"
    # Lines compared as written, blank lines left out: where a snippet's blank lines go is layout.
    orig = [line.rstrip() for line in original.splitlines() if line.strip()]
    ans = [line.rstrip() for line in answer.splitlines() if line.strip()]
    segments: list[list[str]] = [[]]
    for line in update.splitlines():
        if _is_marker(line):
            segments.append([])
        elif line.strip():
            segments[-1].append(line.rstrip())
    segments = [s for s in segments if s]
    if not segments:
        return unchecked("the snippet has no code, only markers", kind)
    markers = lazy_marker_lines(original, answer)
    if markers:
        return CheckVerdict(kind, False, f"the answer keeps a marker ({markers[0].strip()!r})")
    if _place(segments, 0, 0, ans, orig, 0, budget=[20000], anchored=set(orig)):
        return CheckVerdict(kind, True, f"all {sum(map(len, segments))} snippet lines merged in order, the rest of the file kept")
    if _place(segments, 0, 0, ans, orig, 0, budget=[20000], anchored=set()):
        return unchecked("the snippet's lines are in the answer, but which lines of the file they replace is not what "
                         "its first and last lines say (they are in the file, and the answer does not put them there)", kind)
    missing = _first_missing(segments, ans)
    if missing is not None:
        return CheckVerdict(kind, False, f"snippet line {missing!r} is not in the answer as written")
    if ans == orig:
        return CheckVerdict(kind, False, "the answer is the file unchanged: the snippet is not merged")
    return CheckVerdict(kind, False, "the snippet's lines are in the answer, but the lines around them are not the original's (something else changed)")


def _first_missing(segments: list[list[str]], ans: list[str]) -> str | None:
    position = 0
    for segment in segments:
        for line in segment:
            try:
                position = ans.index(line, position) + 1
            except ValueError:
                return line.strip()
    return None


def _place(segments, k: int, at: int, ans: list[str], orig: list[str], orig_at: int, budget: list[int],
           anchored: set[str], region: int = 0) -> bool:
    """Place segment k at answer line >= `at`; the answer lines before it (from `at`) must be a run of
    the original starting at or after `orig_at` (for k = 0: the original's first lines). Segment k-1
    replaced the original from `region` to where that run starts: where its first or last line is a
    line of the original (in `anchored`), that replaced region must start or end with it, so a
    snippet is never pasted beside the code it rewrites."""
    budget[0] -= 1
    if budget[0] < 0:
        return False

    def fits(end: int) -> bool:
        if k == 0:
            return True
        segment, replaced = segments[k - 1], orig[region:end]
        if segment[0] in anchored and (not replaced or replaced[0] != segment[0]):
            return False
        return not (segment[-1] in anchored and (not replaced or replaced[-1] != segment[-1]))

    if k == len(segments):
        tail = ans[at:]
        if len(tail) > len(orig) - orig_at:
            return False
        return (tail == orig[len(orig) - len(tail) :] if tail else True) and fits(len(orig) - len(tail))
    segment = segments[k]
    for start in range(at, len(ans) - len(segment) + 1):
        if ans[start : start + len(segment)] != segment:
            continue
        gap = ans[at:start]
        if k == 0:
            if gap == orig[: len(gap)] and _place(segments, 1, start + len(segment), ans, orig, len(gap), budget, anchored, len(gap)):
                return True
            continue
        for found in _runs(orig, gap, orig_at):
            if fits(found) and _place(segments, k + 1, start + len(segment), ans, orig, found + len(gap), budget, anchored, found + len(gap)):
                return True
    return False


def _runs(orig: list[str], gap: list[str], start: int):
    """Positions >= start where `gap` occurs as a contiguous run of `orig` (earliest first)."""
    if not gap:
        yield start
        return
    for i in range(start, len(orig) - len(gap) + 1):
        if orig[i : i + len(gap)] == gap:
            yield i


# -- free form -------------------------------------------------------------------------------

_STAR_IMPORT = re.compile(r"^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]*\*", re.MULTILINE)


def names_left_undefined(original: str, answer: str) -> str | None:
    """The global names the answer reads that nothing in it defines (nor Python's builtins) and
    the original did not read so, as the verdict names them; None when there are none or it
    cannot be told. A misspelt variable, a helper made up on the spot, a deleted function still
    called: a NameError waiting, whatever the instruction asked."""
    before, after = undefined_globals(original), undefined_globals(answer)
    if before is None or after is None:
        return None
    new = [(name, where) for name, where in after.items() if name not in before]
    if not new:
        return None
    return ", ".join(f"`{name}`" + (f" (in `{where}`)" if where != "top" else "") for name, where in new[:3])


def undefined_globals(text: str) -> dict[str, str] | None:
    """Global names `text` reads that it never binds and Python's builtins do not have, each with
    the scope that first reads it (`top` for the module); None where that cannot be told: the
    file does not compile, or a star import brings names nobody can list."""
    import builtins

    if _STAR_IMPORT.search(text):
        return None
    top, _ = python_scopes(text)
    if top is None:
        return None
    bound, read = set(dir(builtins)), {}
    tables = [top]
    while tables:
        table = tables.pop(0)
        at_top = table.get_type() == "module"
        for symbol in table.get_symbols():
            name = symbol.get_name()
            # bound at the top, or from inside a function through `global`
            if (at_top or symbol.is_declared_global()) and (
                symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace()
            ):
                bound.add(name)
            if symbol.is_referenced() and (at_top or symbol.is_global()):
                read.setdefault(name, table.get_name())
        tables += table.get_children()
    return {name: where for name, where in read.items()
            if name not in bound and not (name.startswith("__") and name.endswith("__"))}

