"""Does the new text parse? tree-sitter for the languages we ship a grammar for."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
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


def validate(path: str | Path, text: str) -> Validation:
    language = CHECKED_SUFFIXES.get(Path(path).suffix.lower())
    if language is None:
        return Validation(None, True, f"no syntax check for {Path(path).suffix or 'this file type'}")
    tree = parser(language).parse(text.encode("utf-8"))
    problem = _first_problem(tree.root_node)
    if problem is None:
        return Validation(language, True)
    line, column = problem.start_point
    kind = f"missing {problem.type}" if problem.is_missing else "syntax error"
    return Validation(language, False, f"{kind} at line {line + 1}, column {column + 1}")


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
