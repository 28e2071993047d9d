"""Does the new text parse? tree-sitter for the languages we ship a grammar for, and for Python
also Python's own parser wherever it reads the original: tree-sitter's grammar is lenient about
indentation (a line indented too deep, or dedented to no enclosing level, parses), and a file
Python refuses to import is as broken as one with an unbalanced bracket."""

from __future__ import annotations

import symtable
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

CHECKED_SUFFIXES = {".py": "python", ".pyi": "python"}


@dataclass(frozen=True)
class Validation:
    language: str | None  # None: no parser for this file type, nothing was checked
    ok: bool
    message: str = ""

    @property
    def checked(self) -> bool:
        return self.language is not None


@cache
def parser(language: str = "python"):
    """The one tree-sitter parser of each language hsedit reads (validation, the instruction
    check, the region split)."""
    import tree_sitter_python
    from tree_sitter import Language, Parser

    grammars = {"python": tree_sitter_python.language}
    return Parser(Language(grammars[language]()))


def validate(path: str | Path, text: str, original: str) -> Validation:
    """Whether `text`, the new version of `original`, parses. Python's own parser is asked only
    where it reads `original`: a file written for a newer Python than hsedit's is not refused
    for syntax this one does not know."""
    language = CHECKED_SUFFIXES.get(Path(path).suffix.lower())
    if language is None:
        return Validation(None, True, f"no syntax check for {Path(path).suffix or 'this file type'}")
    tree = parser(language).parse(text.encode("utf-8"))
    problem = _first_problem(tree.root_node)
    if problem is not None:
        line, column = problem.start_point
        kind = f"missing {problem.type}" if problem.is_missing else "syntax error"
        return Validation(language, False, f"{kind} at line {line + 1}, column {column + 1}")
    if language == "python" and _python_reads(original):
        error = python_scopes(text)[1]
        if error is not None:
            return Validation(language, False, error)
    return Validation(language, True)


@lru_cache(maxsize=8)  # a server validates many files: only the latest few are kept
def _python_reads(original: str) -> bool:
    """Whether this Python parses `original`: asked once per file, however many answers for it
    are validated (a region's every attempt is)."""
    return python_scopes(original)[1] is None


@lru_cache(maxsize=8)  # an answer is validated, then checked for the names it reads: one analysis
def python_scopes(text: str) -> tuple[symtable.SymbolTable | None, str | None]:
    """(Python's symbol table of `text`, None) where its parser and scope analysis accept it,
    else (None, what they say is wrong: a duplicate parameter or a `nonlocal` with nothing to
    bind parses, yet Python refuses to import the file), or (None, None) where this Python cannot
    tell (a null byte, nesting too deep: tree-sitter's word stands). Never compiled to code or
    run; its warnings (invalid escapes) are not the user's business here."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return symtable.symtable(text, "<hsedit>", "exec"), None
    except SyntaxError as error:
        kind = "indentation error" if isinstance(error, IndentationError) else "syntax error"
        return None, f"{kind} at line {error.lineno}: {error.msg}"
    except (ValueError, RecursionError, MemoryError):
        return None, None


def _first_problem(node):
    if node.type == "ERROR" or node.is_missing:
        return node
    if not node.has_error:
        return None
    for child in node.children:
        found = _first_problem(child)
        if found is not None:
            return found
    return node
