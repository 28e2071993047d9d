"""pre-commit hooks: edit staged files by per-pattern instructions from `[tool.hsedit]`.

    [tool.hsedit]
    model = "embedded"            # optional, as --model
    [tool.hsedit.instructions]    # fnmatch pattern -> instruction; the first match applies
    "src/*.py" = "remove debug print statements"

`check` prints the diff and fails when an edit would change a staged file; `fix` writes the
files (atomically, only outputs that parse) and fails so the user re-stages them. An edit whose
output does not parse never fails the hook: the file stays as it is and a warning says why.
"""

from __future__ import annotations

import fnmatch
import hashlib
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hsedit.batch import FAILED, OK, BatchTask, run_batch
from hsedit.errors import UsageError


@dataclass(frozen=True)
class HookConfig:
    instructions: tuple[tuple[str, str], ...]  # (pattern, instruction) in file order
    model: str | None = None
    drafter: str = "hybrid"

    def instruction_for(self, path: str) -> str | None:
        return next((text for pattern, text in self.instructions if fnmatch.fnmatch(path, pattern)), None)


def load_config(pyproject: Path) -> HookConfig:
    if not pyproject.is_file():
        raise UsageError(f"no {pyproject.name} here: the hook reads its instructions from [tool.hsedit]")
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{pyproject}: not valid TOML ({exc})") from exc
    section = data.get("tool", {}).get("hsedit", {})
    instructions = section.get("instructions", {})
    if not isinstance(instructions, dict) or not instructions:
        raise UsageError(f'{pyproject}: add [tool.hsedit.instructions] with "pattern" = "instruction" lines')
    bad = [k for k, v in instructions.items() if not isinstance(v, str) or not v.strip()]
    if bad:
        raise UsageError(f"{pyproject}: [tool.hsedit.instructions] {bad[0]!r} needs a non-empty instruction")
    return HookConfig(tuple(instructions.items()), section.get("model"), section.get("drafter", "hybrid"))


def hook_tasks(files: Sequence[str], config: HookConfig, root: Path) -> list[BatchTask]:
    tasks = []
    for name in dict.fromkeys(files):
        instruction = config.instruction_for(Path(name).as_posix())
        if instruction is None:
            continue
        key = hashlib.sha1(f"{name}\0{instruction}".encode()).hexdigest()[:16]
        tasks.append(BatchTask(key, (root / name).resolve(), name, instruction, None))
    return tasks


def run_hook(
    engine_for: Callable[[HookConfig], object],
    files: Sequence[str],
    *,
    fix: bool,
    root: Path,
    say: Callable[[str], None],
) -> int:
    """Exit status for pre-commit: 1 when a file would change (check) or was changed (fix)."""
    config = load_config(root / "pyproject.toml")
    tasks = hook_tasks(files, config, root)
    if not tasks:
        return 0
    engine = engine_for(config)
    with tempfile.TemporaryDirectory() as scratch:
        outcomes = run_batch(engine, tasks, Path(scratch) / "results.jsonl", write=fix)
    changed = False
    for outcome in outcomes:
        if outcome.status == OK:
            changed = True
            if fix:
                say(f"hsedit: rewrote {outcome.path}")
            else:
                say(outcome.diff.rstrip("\n"))
        elif outcome.status == FAILED:
            say(f"hsedit: warning: {outcome.path} left as it is: {outcome.error}")
    if changed and not fix:
        say("hsedit: the edits above would change staged files (run the fix hook, or apply them)")
    return 1 if changed else 0
