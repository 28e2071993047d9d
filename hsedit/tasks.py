"""The task-file format shared by `hsedit bench` and `hsedit batch`: one JSON object a line.

Edits: {"path": ..., "instruction": ...} or {"path": ..., "update": SNIPPET} (a lazy-snippet
merge), paths relative to the task file. Chat (bench only): {"prompt": ...}.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from hsedit.errors import UsageError


def task_lines(task_file: Path) -> Iterator[tuple[int, str, dict]]:
    """(line number, raw line, object) for each non-blank line; one-line errors name the line."""
    if not task_file.is_file():
        raise UsageError(f"no such task file: {task_file}")
    found = False
    for number, line in enumerate(task_file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{task_file}:{number}: not JSON ({exc.msg})") from exc
        if not isinstance(item, dict):
            raise UsageError(f"{task_file}:{number}: expected a JSON object")
        found = True
        yield number, line, item
    if not found:
        raise UsageError(f"{task_file}: no tasks")


def is_edit(item: dict) -> bool:
    return isinstance(item.get("path"), str) and (
        isinstance(item.get("instruction"), str) or isinstance(item.get("update"), str)
    )
