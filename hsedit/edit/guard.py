"""The write guard: answers that would destroy the user's code are refused, whatever they parse to.

An empty file parses; so does a file with half its lines gone or with its body replaced by
`# ... existing code ...`. A small model does all three now and then (it closes its answer
early, or answers lazily), and a diff or `--write` would pass the damage on. The guard looks at
the answer against the original and the instruction, and says why it refuses, in one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Share of the file's lines an answer may drop when the instruction does not ask to delete.
DEFAULT_MAX_DELETION = 0.5

# Instructions that ask for lines to go: the deletion limit does not apply to them.
_DELETION_WORDS = re.compile(
    r"\b(delete|deleting|remove|removing|drop|dropping|strip|erase|clear|empty|cut|trim|"
    r"get rid|eliminate|prune|purge|shorten|strip out|take out)\b",
    re.IGNORECASE,
)

# A comment standing in for code the model did not write out: "# ... existing code ...",
# "// rest of the file unchanged", "<!-- ... -->"-style placeholders.
_COMMENT = r"^\s*(#|//|/\*|\*|<!--|--|;|%)\s*"
_LAZY_MARKER = re.compile(
    _COMMENT + r"(\.\.\.|…)?\s*\(?\s*("
    r"existing code|existing (imports|methods|functions|fields|logic|implementation)|"
    r"rest of (the )?(code|file|class|function|module|method|implementation|body)|"
    r"(code|everything|the rest|all) (else )?(remains|stays|is) (the same|unchanged|as before)|"
    r"unchanged (code|lines|methods|functions)|other (methods|functions|code) (unchanged|here|as before)|"
    r"same as before|previous code|keep existing"
    r")",
    re.IGNORECASE,
)
_ELLIPSIS_ONLY = re.compile(_COMMENT + r"(\.\.\.|…)\s*(\*/|-->)?\s*$")


@dataclass(frozen=True)
class GuardVerdict:
    ok: bool
    reason: str = ""

    def as_dict(self) -> dict:
        return {"ok": self.ok, "reason": self.reason}


ALLOWED = GuardVerdict(True)


def asks_for_deletion(instruction: str) -> bool:
    return bool(_DELETION_WORDS.search(instruction or ""))


def lazy_marker_lines(original: str, answer: str) -> list[str]:
    """Lines of the answer that are placeholder comments and were not already in the original."""
    before = set(original.splitlines())
    return [
        line
        for line in answer.splitlines()
        if line not in before and (_LAZY_MARKER.match(line) or _ELLIPSIS_ONLY.match(line))
    ]


def check_answer(
    original: str, answer: str, instruction: str, *, max_deletion: float = DEFAULT_MAX_DELETION
) -> GuardVerdict:
    """Would writing `answer` over `original` destroy code the instruction did not ask to remove?

    `original` and `answer` are the file's text (LF line ends). `max_deletion` is the share of
    the original's lines the answer may be shorter by (1.0 turns the check off).
    """
    old_lines = original.splitlines()
    new_lines = answer.splitlines()
    if original.strip() and not answer.strip():
        return GuardVerdict(False, f"the answer is empty: it would delete all {len(old_lines)} lines of the file")
    lost = len(old_lines) - len(new_lines)
    if old_lines and lost > max_deletion * len(old_lines) and not asks_for_deletion(instruction):
        return GuardVerdict(
            False,
            f"the answer is {lost} of {len(old_lines)} lines shorter ({lost / len(old_lines):.0%}) "
            f"and the instruction does not ask to delete anything (limit: {max_deletion:.0%})",
        )
    markers = lazy_marker_lines(original, answer)
    if markers:
        return GuardVerdict(
            False, f"the answer has a placeholder instead of code ({markers[0].strip()!r}): the rest would be lost"
        )
    return ALLOWED
