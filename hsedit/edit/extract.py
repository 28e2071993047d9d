"""Recover the rewritten file from the model's answer: fences, prose after it, newline at the end."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Extracted:
    text: str
    closed: bool  # the closing fence was found (otherwise the answer may be cut short)


def _is_fence(line: str) -> bool:
    return line.rstrip().startswith("```")


def extract_file(completion: str, original: str) -> Extracted:
    """`completion` is what came after the prompt's opening fence."""
    lines = completion.splitlines(keepends=True)
    # The answer already sits inside an opening fence; a model that opens another one anyway
    # (an empty line or two, then ```lang) gets that one dropped too.
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    if start < len(lines) and _is_fence(lines[start]) and lines[start].strip() != "```":
        lines = lines[start + 1 :]
    closing = next((i for i, line in enumerate(lines) if line.strip() == "```"), None)
    body = "".join(lines if closing is None else lines[:closing])
    # Keep the original's convention for the final newline.
    if original.endswith("\n") and body and not body.endswith("\n"):
        body += "\n"
    elif not original.endswith("\n") and body.endswith("\n"):
        body = body[:-1]
    return Extracted(body, closed=closing is not None)
