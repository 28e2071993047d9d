"""Instructed edits with exact targets, made from real Python source.

Every generator takes the source of one self-contained chunk of a file (or a whole file) and
a random generator, and returns an `Edit` (before, after, instruction) or None when the source
offers nothing suitable. Edits are token-aware: renames touch NAME tokens only, never strings or
comments, and skip sources where the name also appears inside an f-string.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import io
import keyword
import random
import re
import tokenize
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from hsedit.edit.check import PERCENT_SPEC, Source, exported_strings, is_mechanical

EXISTING_CODE = "# ... existing code ..."


@dataclass(frozen=True)
class Edit:
    kind: str
    instruction: str
    before: str
    after: str
    update: str | None = None  # for snippet merges: the snippet given instead of an instruction


# -- helpers -------------------------------------------------------------------------------
def _tokens(source: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


def _start(source: str, node: ast.AST) -> tuple[int, int]:
    """Where `node` starts as (row, column in characters): ast counts columns in UTF-8 bytes,
    which differ on any line with a non-ASCII character before the node."""
    return node.lineno, _char_column(source, node.lineno, node.col_offset)


def _end(source: str, node: ast.AST) -> tuple[int, int]:
    return node.end_lineno, _char_column(source, node.end_lineno, node.end_col_offset)


def _char_column(source: str, row: int, byte_column: int) -> int:
    line = source.splitlines(keepends=True)[row - 1]
    return len(line.encode("utf-8")[:byte_column].decode("utf-8", errors="ignore"))


def _replace_spans(source: str, spans: list[tuple[tuple[int, int], tuple[int, int], str]]) -> str:
    """Replace (start(row, col), end(row, col)) spans, rows 1-based, cols in characters."""
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def offset(row: int, col: int) -> int:
        return offsets[row - 1] + col

    out, last = [], 0
    for start, end, text in sorted(spans, key=lambda span: span[0]):
        a, b = offset(*start), offset(*end)
        if a < last:
            raise ValueError("overlapping spans")
        out.append(source[last:a])
        out.append(text)
        last = b
    out.append(source[last:])
    return "".join(out)


def _names_in_fstrings(tokens: list[tokenize.TokenInfo]) -> set[str]:
    names: set[str] = set()
    for tok in tokens:
        if tok.type == tokenize.STRING and re.match(r"(?i)^[rb]*f", tok.string):
            names.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", tok.string))
    return names


def rename_tokens(source: str, old: str, new: str, rows: tuple[int, int] | None = None) -> str | None:
    """Rename bare NAME tokens `old` (not attributes, not keyword arguments); None if unsafe."""
    tokens = _tokens(source)
    if old in _names_in_fstrings(tokens):
        return None
    # Inside brackets a line break or a comment may sit between a name and its neighbours
    # (`f(\n    old=1)`): they do not count as neighbours.
    tokens = [tok for tok in tokens if tok.type not in (tokenize.NL, tokenize.COMMENT)]
    spans = []
    depth = 0
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        if tok.type != tokenize.NAME or tok.string != old:
            continue
        if rows and not rows[0] <= tok.start[0] <= rows[1]:
            continue
        previous = tokens[i - 1] if i else None
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        if previous is not None and previous.string == ".":
            continue
        is_keyword_argument = (
            depth > 0
            and following is not None
            and following.string == "="
            and previous is not None
            and previous.string in "(,"
        )
        if is_keyword_argument:
            continue
        spans.append((tok.start, tok.end, new))
    if not spans:
        return None
    return _replace_spans(source, spans)


def _all_names(source: str) -> set[str]:
    return {tok.string for tok in _tokens(source) if tok.type == tokenize.NAME}


SYNONYMS = {
    "count": "total", "total": "sum_value", "value": "amount", "values": "amounts",
    "result": "outcome", "results": "outcomes", "data": "payload", "item": "entry",
    "items": "entries", "name": "label", "names": "labels", "path": "file_path",
    "line": "row", "lines": "rows", "key": "lookup_key", "keys": "lookup_keys",
    "index": "position", "idx": "position", "i": "index", "j": "inner_index", "n": "size",
    "x": "value", "s": "text", "text": "content", "msg": "message", "err": "error",
    "e": "exc", "obj": "instance", "args": "arguments", "kwargs": "options", "buf": "buffer",
    "res": "response", "f": "handle", "fp": "file_obj", "tmp": "scratch", "start": "begin",
    "end": "finish", "size": "length", "length": "size", "parts": "pieces", "node": "element",
    "get": "fetch", "make": "build", "create": "build", "load": "read", "parse": "decode",
    "check": "verify", "find": "locate", "compute": "calculate", "handle": "process",
    "update": "refresh", "format": "render", "to": "into", "is": "looks", "has": "holds",
}  # fmt: skip
PREFIXES = ("new_", "current_", "the_", "my_")
SUFFIXES = ("_value", "_obj", "_data", "_item")
CLASS_SUFFIXES = ("Impl", "Base", "Handler", "Model")
CLASS_PREFIXES = ("Custom", "Simple", "Basic", "Default")


def new_name(old: str, taken: set[str], rng: random.Random, is_class: bool = False) -> str | None:
    for _ in range(10):
        if is_class:
            candidate = (
                rng.choice(CLASS_PREFIXES) + old.lstrip("_")
                if rng.random() < 0.5
                else old + rng.choice(CLASS_SUFFIXES)
            )
        else:
            prefix = "_" * (len(old) - len(old.lstrip("_")))
            parts = old.lstrip("_").split("_")
            swappable = [i for i, p in enumerate(parts) if p in SYNONYMS]
            if swappable and rng.random() < 0.75:
                i = rng.choice(swappable)
                parts[i] = SYNONYMS[parts[i]]
                candidate = prefix + "_".join(parts)
            elif rng.random() < 0.5:
                candidate = prefix + rng.choice(PREFIXES) + "_".join(parts)
            else:
                candidate = prefix + "_".join(parts) + rng.choice(SUFFIXES)
        if candidate.isidentifier() and not keyword.iskeyword(candidate) and candidate not in taken:
            return candidate
    return None


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def _top_level(tree: ast.Module, kind: type | tuple[type, ...]) -> list:
    return [node for node in tree.body if isinstance(node, kind)]


# -- edit kinds ----------------------------------------------------------------------------
RENAME_TEMPLATES = (
    "rename the {what} {old} to {new}",
    "Rename {old} to {new}.",
    "Please rename the {what} `{old}` to `{new}` and update every use of it.",
    "change the name of the {what} {old} to {new}",
    "{old} should be called {new}; update all references",
    "rename {old} -> {new}",
)


def rename_definition(source: str, rng: random.Random, classes: bool) -> Edit | None:
    tree = _parse(source)
    if tree is None:
        return None
    kinds = ast.ClassDef if classes else (ast.FunctionDef, ast.AsyncFunctionDef)
    candidates = _top_level(tree, kinds)
    rng.shuffle(candidates)
    taken = _all_names(source)
    for node in candidates:
        if f"'{node.name}'" in source or f'"{node.name}"' in source:
            continue  # named in a string (__all__, getattr): renaming would be ambiguous
        target = new_name(node.name, taken, rng, is_class=classes)
        after = target and rename_tokens(source, node.name, target)
        if after and _parse(after) is not None:
            what = "class" if classes else "function"
            text = rng.choice(RENAME_TEMPLATES).format(what=what, old=node.name, new=target)
            return Edit(f"rename_{what}", text, source, after)
    return None


RENAME_LOCAL_TEMPLATES = (
    "in {func}, rename the local variable {old} to {new}",
    "Rename the variable `{old}` in `{func}` to `{new}`.",
    "rename {old} to {new} inside {func}",
    "{func}: the variable {old} should be named {new}",
)


def rename_local(source: str, rng: random.Random) -> Edit | None:
    tree = _parse(source)
    if tree is None:
        return None
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    rng.shuffle(functions)
    taken = _all_names(source)
    for function in functions:
        params = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
        declared = {
            name
            for n in ast.walk(function)
            if isinstance(n, (ast.Global, ast.Nonlocal))
            for name in n.names
        }
        nested = [n for n in ast.walk(function) if n is not function and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))]
        if nested:
            continue  # a nested scope could shadow or capture the name
        locals_ = sorted(
            {
                n.id
                for n in ast.walk(function)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
            - params
            - declared
        )
        rng.shuffle(locals_)
        for old in locals_:
            target = new_name(old, taken, rng)
            rows = (function.lineno, function.end_lineno)
            after = target and rename_tokens(source, old, target, rows)
            if after and _parse(after) is not None:
                text = rng.choice(RENAME_LOCAL_TEMPLATES).format(func=function.name, old=old, new=target)
                return Edit("rename_local", text, source, after)
    return None


CONSTANT_TEMPLATES = ("change {name} to {v}", "set {name} to {v}", "Set the constant `{name}` to {v}.", "{name} should be {v}")


def set_constant(source: str, rng: random.Random) -> Edit | None:
    tree = _parse(source)
    if tree is None:
        return None
    candidates = [
        node
        for node in _top_level(tree, ast.Assign)
        if len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id.isupper()
        and isinstance(node.value, ast.Constant)
        and type(node.value.value) in (int, float, str)
        and node.value.lineno == node.value.end_lineno
    ]
    if not candidates:
        return None
    node = rng.choice(candidates)
    value = node.value.value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        new_value: object = value * 2 if value and rng.random() < 0.5 else value + rng.randint(1, 50)
    elif isinstance(value, float):
        new_value = round(value * rng.choice((0.5, 2.0, 1.5)) + 0.25, 3)
    else:
        if len(value) > 40 or "\\" in ast.get_source_segment(source, node.value):
            return None
        new_value = rng.choice(("default", "utf-8", "output", "config.ini", "v2")) if value else "none"
    literal = repr(new_value)
    original = ast.get_source_segment(source, node.value)
    if isinstance(value, str) and original.startswith('"'):
        literal = '"' + str(new_value) + '"'
    span = (_start(source, node.value), _end(source, node.value), literal)
    after = _replace_spans(source, [span])
    name = node.targets[0].id
    text = rng.choice(CONSTANT_TEMPLATES).format(name=name, v=literal)
    return Edit("set_constant", text, source, after)


DELETE_INSTRUCTIONS = (
    "delete the function {f}", "Remove `{f}`; it is not used.", "remove the {f} function", "drop {f} from this file",
)


def delete_function(source: str, rng: random.Random) -> Edit | None:
    tree = _parse(source)
    if tree is None:
        return None
    names = [tok.string for tok in _tokens(source) if tok.type == tokenize.NAME]
    # Read anywhere, f-strings' fields included (one STRING token to 3.11's tokenizer): a
    # deleted function still called is a broken file, not a deletion to learn.
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    functions = [
        node
        for node in _top_level(tree, (ast.FunctionDef, ast.AsyncFunctionDef))
        if names.count(node.name) == 1 and node.name not in read
        and f"'{node.name}'" not in source and f'"{node.name}"' not in source
    ]
    if not functions or len(tree.body) < 2:
        return None
    node = rng.choice(functions)
    lines = source.splitlines(keepends=True)
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    end = node.end_lineno  # exclusive index of the line after the function
    while end < len(lines) and not lines[end].strip():
        end += 1
    if end == len(lines):  # the last definition: drop the blank lines before it instead
        while start > 0 and not lines[start - 1].strip():
            start -= 1
    after = "".join(lines[:start] + lines[end:])
    if _parse(after) is None or not after.strip():
        return None
    text = rng.choice(DELETE_INSTRUCTIONS)
    return Edit("delete_function", text.format(f=node.name), source, after)


TYPE_HINT_TEMPLATES = (
    "add type hints to {f}", "Annotate the parameters and return type of `{f}`.", "add type annotations to the function {f}",
    "{f} needs type hints",
)


def add_type_hints(source: str, rng: random.Random) -> Edit | None:
    """The target is the original (annotated) code; the input has the annotations stripped."""
    tree = _parse(source)
    if tree is None:
        return None
    candidates = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.returns is None:
            continue
        args = [a for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs if a.arg not in ("self", "cls")]
        if not args or any(a.annotation is None for a in args):
            continue
        annotations = [a.annotation for a in args] + [node.returns]
        if all(a.lineno == a.end_lineno for a in annotations):
            candidates.append((node, args))
    if not candidates:
        return None
    node, args = rng.choice(candidates)
    # `x: int = 5` becomes `x=5` (PEP 8 spaces `=` only around an annotated default).
    defaults = dict(zip(reversed(node.args.posonlyargs + node.args.args), reversed(node.args.defaults)))
    defaults.update((a, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d is not None)
    spans = []
    for arg in args:
        row, column = _start(source, arg)
        name_end = (row, column + len(arg.arg))
        if arg in defaults:
            spans.append((name_end, _start(source, defaults[arg]), "="))
        else:
            spans.append((name_end, _end(source, arg.annotation), ""))
    # " -> Ret" sits between the closing parenthesis and the colon.
    row, returns_at = _start(source, node.returns)
    line = source.splitlines(keepends=True)[row - 1]
    arrow = line.rfind("->", 0, returns_at)
    if arrow < 0:
        return None
    start_col = len(line[:arrow].rstrip())
    spans.append(((row, start_col), _end(source, node.returns), ""))
    try:
        stripped = _replace_spans(source, spans)
    except ValueError:
        return None
    if _parse(stripped) is None or stripped == source:
        return None
    text = rng.choice(TYPE_HINT_TEMPLATES)
    return Edit("add_type_hints", text.format(f=node.name), stripped, source)


FSTRING_INSTRUCTIONS = (
    "convert the %-formatting to f-strings",
    "Use f-strings instead of % formatting.",
    "replace the old-style % string formatting with f-strings",
    "switch % formatting to f-strings",
)


def percent_to_fstring(source: str, rng: random.Random) -> Edit | None:
    tree = _parse(source)
    if tree is None:
        return None
    spans = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod)):
            continue
        if not (isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)):
            continue
        literal = ast.get_source_segment(source, node.left)
        if not literal or literal[0] not in "'\"" or literal[:3] in ('"""', "'''") or "\\" in literal:
            return None  # prefixed, triple-quoted or escaped: leave the whole chunk alone
        fmt = node.left.value
        specs = list(PERCENT_SPEC.finditer(fmt))
        if "%%" in fmt or "{" in fmt or "}" in fmt or fmt.count("%") != len(specs) or not all(map(is_mechanical, specs)):
            return None
        args = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
        texts = [ast.get_source_segment(source, a) for a in args]
        if len(specs) != len(texts) or any(t is None or "'" in t or '"' in t or "\n" in t or "{" in t for t in texts):
            return None
        parts, position = [], 0
        for spec, expr in zip(specs, texts):
            conversion = spec.group(0)[1:]  # s, d, i, r, f or .Nf
            parts.append(fmt[position : spec.start()])
            parts.append("{" + expr + ("!r" if conversion == "r" else f":{conversion}" if conversion.endswith("f") else "") + "}")
            position = spec.end()
        parts.append(fmt[position:])
        quote = literal[0]
        replacement = "f" + quote + "".join(parts) + quote
        spans.append((_start(source, node), _end(source, node), replacement))
    if not spans:
        return None
    try:
        after = _replace_spans(source, spans)
    except ValueError:
        return None
    if _parse(after) is None:
        return None
    text = rng.choice(FSTRING_INSTRUCTIONS)
    return Edit("percent_to_fstring", text, source, after)


DEBUG_PRINT_INSTRUCTIONS = (
    "remove the debug print",
    "Delete the leftover print statement.",
    "remove the debugging print in {f}",
    "get rid of the print I left in {f}",
)


def remove_debug_print(source: str, rng: random.Random) -> Edit | None:
    """The input has a debug print inserted; the target is the original."""
    tree = _parse(source)
    if tree is None:
        return None
    statements = [
        (function, stmt)
        for function in ast.walk(tree)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        for stmt in function.body
        if not isinstance(stmt, (ast.Return, ast.Raise)) and stmt.lineno == stmt.end_lineno
        and not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))
    ]
    if not statements:
        return None
    function, stmt = rng.choice(statements)
    lines = source.splitlines(keepends=True)
    indent = lines[stmt.lineno - 1][: stmt.col_offset]
    variables = [n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)] or [function.name]
    var = rng.choice(variables)
    debug = rng.choice(
        (f'print("DEBUG", {var})', f"print(f\"{{{var}=}}\")", 'print("here")', f'print("{function.name}:", {var})', f"print({var})")
    )
    noisy = "".join(lines[: stmt.end_lineno] + [indent + debug + "\n"] + lines[stmt.end_lineno :])
    if _parse(noisy) is None:
        return None
    text = rng.choice(DEBUG_PRINT_INSTRUCTIONS)
    return Edit("remove_debug_print", text.format(f=function.name), noisy, source)


ADD_PARAMETER_TEMPLATES = (
    "add a parameter {p} with default {d} to {f}", "Add an optional `{p}={d}` argument to `{f}`.",
    "give {f} a new keyword parameter {p} (default {d})",
)
# Asked as it is written in a signature, annotation included: the answer carries it.
TYPED_PARAMETER_TEMPLATES = ("add a parameter {p}: {t} = {d} to the function {f}",)


def add_parameter(source: str, rng: random.Random) -> Edit | None:
    tree = _parse(source)
    if tree is None:
        return None
    candidates = [
        node
        for node in _top_level(tree, (ast.FunctionDef, ast.AsyncFunctionDef))
        if node.args.vararg is None and node.args.kwarg is None and not node.args.kwonlyargs
        and node.args.args and node.lineno == node.args.args[-1].end_lineno
    ]
    if not candidates:
        return None
    node = rng.choice(candidates)
    taken = _all_names(source)
    options = [p for p in (("verbose", "False", "bool"), ("timeout", "None", "float | None"), ("strict", "True", "bool"),
                           ("encoding", '"utf-8"', "str"), ("limit", "None", "int | None"), ("debug", "False", "bool"))
               if p[0] not in taken]
    if not options:
        return None
    name, default, annotation = rng.choice(options)
    text = rng.choice(ADD_PARAMETER_TEMPLATES + TYPED_PARAMETER_TEMPLATES)
    written = f"{name}: {annotation} = {default}" if text in TYPED_PARAMETER_TEMPLATES else f"{name}={default}"
    last = node.args.defaults[-1] if node.args.defaults else node.args.args[-1]
    end = _end(source, last)
    after = _replace_spans(source, [(end, end, f", {written}")])
    if _parse(after) is None:
        return None
    return Edit("add_parameter", text.format(p=name, d=default, t=annotation, f=node.name), source, after)


# -- snippet merges ------------------------------------------------------------------------
def update_snippet(before: str, after: str, context: int = 2) -> str | None:
    """The changed region of `after`, with existing-code markers for what it leaves out."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    changed = [op for op in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes() if op[0] != "equal"]
    if not changed:
        return None
    first = max(0, changed[0][3] - context)
    last = min(len(b), changed[-1][4] + context)
    if last <= first:  # a pure deletion at the very end
        last = min(len(b), first + 1)
    snippet = b[first:last]
    if not snippet:
        return None
    indent = re.match(r"\s*", snippet[0]).group(0)
    out = []
    if first > 0:
        out.append(indent + EXISTING_CODE + "\n")
    out += snippet
    if not out[-1].endswith("\n"):
        out[-1] += "\n"
    if last < len(b):
        tail_indent = re.match(r"\s*", snippet[-1]).group(0)
        out.append(tail_indent + EXISTING_CODE + "\n")
    return "".join(out)


def as_snippet_merge(edit: Edit) -> Edit | None:
    if edit.kind in ("delete_function",):
        return None  # a deletion has nothing to show
    snippet = update_snippet(edit.before, edit.after)
    if snippet is None or snippet.count("\n") > 0.6 * edit.after.count("\n"):
        return None
    return Edit("snippet_merge", "", edit.before, edit.after, update=snippet)


GENERATORS: dict[str, Callable[[str, random.Random], Edit | None]] = {
    "rename_function": lambda s, r: rename_definition(s, r, classes=False),
    "rename_class": lambda s, r: rename_definition(s, r, classes=True),
    "rename_local": rename_local,
    "set_constant": set_constant,
    "delete_function": delete_function,
    "add_type_hints": add_type_hints,
    "percent_to_fstring": percent_to_fstring,
    "remove_debug_print": remove_debug_print,
    "add_parameter": add_parameter,
}


# -- whole files ---------------------------------------------------------------------------
# A rename on a whole file is asked for in more ways than on a chunk; the chunk set keeps its own
# templates so that it stays as it was.
FILE_RENAME_TEMPLATES = RENAME_TEMPLATES + (
    "rename {old} to {new}",
    "Rename `{old}` to `{new}` everywhere in this file.",
    "Rename the {what} `{old}` to `{new}`.",
    "call the {what} {new} instead of {old}",
    "replace every use of {old} with {new}",
    "rename {old} to {new} throughout the file",
    "use the name {new} for the {what} {old}",
)
MIN_FILE_RENAME_USES = 3  # a binding and two uses or more: finding every use is what is hard
LOOK_ALIKE_WEIGHT = 3  # names that the rename must leave alone elsewhere are what a model gets wrong
# A class that other classes of the file extend: the model renamed a class's uses but left it in
# `class Sub(Old):` lines (held-out renames in real files).
BASE_CLASS_WEIGHT = 3
BUILTIN_NAMES = frozenset(dir(builtins))


def _renamable(tree: ast.Module, what: str) -> set[str]:
    """Top-level functions or classes, or variables: names bound by assignment or as parameters,
    less imports (bound elsewhere), definitions and class attributes (used as attributes)."""
    if what == "function":
        return {node.name for node in _top_level(tree, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if what == "class":
        return {node.name for node in _top_level(tree, ast.ClassDef)}
    nodes = list(ast.walk(tree))
    bound = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    bound |= {n.arg for n in nodes if isinstance(n, ast.arg)}
    defined = {n.name for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    imported = {
        (alias.asname or alias.name).split(".")[0]
        for n in nodes
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for alias in n.names
    }
    class_attributes = {
        target.id
        for n in nodes
        if isinstance(n, ast.ClassDef)
        for statement in n.body
        if isinstance(statement, (ast.Assign, ast.AnnAssign))
        for target in (statement.targets if isinstance(statement, ast.Assign) else [statement.target])
        if isinstance(target, ast.Name)
    }
    return bound - defined - imported - class_attributes - {"self", "cls"}


# A string that reads as a name, a dotted path or a type: "size", "mod.Buffer", "list[Buffer]".
CODE_LIKE_STRING = re.compile(r"[\w.\[\],|]+")


def _quoted_as_code(tokens: list[tokenize.TokenInfo], name: str, exempt: frozenset = frozenset()) -> bool:
    """Whether a string that reads as code names `name` (getattr, a forward reference): whether
    such a string should follow a rename is arguable, so its names are not renamed. `exempt`:
    (row, text) of strings the rename handles itself (the `__all__` entries)."""
    word = re.compile(rf"\b{re.escape(name)}\b")
    for tok in tokens:
        if tok.type == tokenize.STRING and (tok.start[0], tok.string) not in exempt:
            body = tok.string.lstrip("rRbBuU").strip("'\"")
            if CODE_LIKE_STRING.fullmatch(body) and word.search(body):
                return True
    return False


def _renamed_exports(source: str, exported: list, old: str, new: str) -> str:
    """`source` with the `__all__` entries `exported` (tree-sitter string nodes) naming `new`."""
    data = source.encode("utf-8")
    for node in sorted(exported, key=lambda n: n.start_byte, reverse=True):
        data = data[: node.start_byte] + node.text.replace(old.encode(), new.encode()) + data[node.end_byte :]
    return data.decode("utf-8")


def _has_look_alikes(name: str, identifiers: set[str], prose: str) -> bool:
    """`size` inside `max_size` (checked for names of 3+ characters: shorter ones are inside nearly
    everything), or as a word in a comment or a string."""
    inside_longer = len(name) >= 3 and any(name in other and other != name for other in identifiers)
    return inside_longer or re.search(rf"\b{re.escape(name)}\b", prose) is not None


def rename_everywhere(source: str, rng: random.Random, what: str) -> Edit | None:
    """Rename a top-level function or class, or a variable, at every use in the file.

    Names used often, names with look-alikes the rename must leave alone, and classes other
    classes extend are picked more often. A name that also occurs as an attribute or a keyword
    argument is skipped: "everywhere" would be ambiguous there. So in the target every NAME token
    of the old name is renamed.
    """
    tree = _parse(source)
    if tree is None:
        return None
    tokens = _tokens(source)
    uses = Counter(tok.string for tok in tokens if tok.type == tokenize.NAME)
    prose = "\n".join(tok.string for tok in tokens if tok.type in (tokenize.COMMENT, tokenize.STRING))
    candidates = sorted(
        name
        for name in _renamable(tree, what)
        if uses[name] >= MIN_FILE_RENAME_USES
        and name not in BUILTIN_NAMES
        and not (name.startswith("__") and name.endswith("__"))
    )
    identifiers = set(uses)
    look_alike = {name for name in candidates if _has_look_alikes(name, identifiers, prose)}
    bases = {base.id for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
             for base in node.bases if isinstance(base, ast.Name)}
    weights = [
        uses[name]
        * (LOOK_ALIKE_WEIGHT if name in look_alike else 1)
        * (BASE_CLASS_WEIGHT if name in bases else 1)
        for name in candidates
    ]
    while candidates:
        pick = rng.choices(range(len(candidates)), weights)[0]
        old = candidates.pop(pick)
        weights.pop(pick)
        exported = exported_strings(Source(source), old)
        if _quoted_as_code(tokens, old, frozenset((n.start_point[0] + 1, n.text.decode()) for n in exported)):
            continue
        target = new_name(old, identifiers, rng, is_class=what == "class")
        after = target and rename_tokens(_renamed_exports(source, exported, old, target), old, target)
        if not after or old in _all_names(after) or _parse(after) is None:
            continue
        label = ("constant" if old.isupper() else "variable") if what == "variable" else what
        text = rng.choice(FILE_RENAME_TEMPLATES).format(what=label, old=old, new=target)
        return Edit(f"rename_{what}", text, source, after)
    return None


# Plausible names for instructions about something a file lacks.
ABSENT_VERBS = ("load", "parse", "check", "compute", "render", "find", "build", "update")
ABSENT_NOUNS = ("config", "items", "records", "header", "total", "path", "options", "buffer")


def no_change(source: str, rng: random.Random) -> Edit | None:
    """An instruction that does not apply to the file, whose target is the file as it is: a rename or
    deletion of a name it never mentions, debug prints removed where it has none, %-formatting
    converted where it has no % at all."""
    tree = _parse(source)
    if tree is None:
        return None
    names = _all_names(source)

    def absent(candidates: list[str]) -> list[str]:
        return [name for name in candidates if re.search(rf"\b{name}\b", source) is None]

    instructions = []
    missing_functions = absent([f"{verb}_{noun}" for verb in ABSENT_VERBS for noun in ABSENT_NOUNS])
    missing_variables = absent(list(ABSENT_NOUNS))
    if missing_functions:
        missing = rng.choice(missing_functions)
        instructions.append(rng.choice(DELETE_INSTRUCTIONS).format(f=missing))
    for what, missing_names in (("function", missing_functions), ("variable", missing_variables)):
        if not missing_names:
            continue
        missing = rng.choice(missing_names)
        target = new_name(missing, names, rng)
        if target:
            instructions.append(rng.choice(FILE_RENAME_TEMPLATES).format(what=what, old=missing, new=target))
    functions = [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if "print" not in names and functions:
        instructions.append(rng.choice(DEBUG_PRINT_INSTRUCTIONS).format(f=rng.choice(functions)))
    if "%" not in source:
        instructions.append(rng.choice(FSTRING_INSTRUCTIONS))
    if not instructions:
        return None
    return Edit("no_change", rng.choice(instructions), source, source)


FILE_GENERATORS: dict[str, Callable[[str, random.Random], Edit | None]] = {
    **GENERATORS,
    "rename_function": lambda s, r: rename_everywhere(s, r, "function"),
    "rename_class": lambda s, r: rename_everywhere(s, r, "class"),
    "rename_variable": lambda s, r: rename_everywhere(s, r, "variable"),
    "no_change": no_change,
}
