"""Unified diffs that `git apply` accepts, and their line counts (read back with unidiff)."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from unidiff import PatchSet

NO_NEWLINE = "\\ No newline at end of file\n"


def unified_diff(old: str, new: str, path: str) -> str:
    """Empty when nothing changed. Paths get git's a/ and b/ prefixes."""
    if old == new:
        return ""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    out = []
    for line in lines:
        if line.endswith("\n"):
            out.append(line)
        else:  # the last line of a file without a final newline
            out.append(line + "\n" + NO_NEWLINE)
    return "".join(out)


@dataclass(frozen=True)
class DiffSummary:
    files: int
    added: int
    removed: int


def summarize(diff: str) -> DiffSummary:
    patch = PatchSet(diff)
    return DiffSummary(len(patch), patch.added, patch.removed)


_WORDS = re.compile(r"\w+|[^\w\s]")


def edit_distance(before: str, after: str) -> float:
    """Share of the text an edit changed: 1 - similarity of the word/punctuation sequences
    (0: identical, 1: nothing in common). Independent of any tokenizer."""
    a, b = _WORDS.findall(before), _WORDS.findall(after)
    if not a and not b:
        return 0.0
    return 1.0 - difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
