"""pre-commit hooks: edit staged files by per-pattern instructions from `[tool.hsedit]`.

    [tool.hsedit.instructions]    # fnmatch pattern -> instruction; the first match applies
    "src/*.py" = "remove debug print statements"

(`model`, `drafter` and `max_deletion` in `[tool.hsedit]` apply too: see hsedit/config.py.)
`check` prints the diff and fails when an edit would change a staged file; `fix` writes the
files (atomically, only outputs that parse and pass the write guard) and fails so the user
re-stages them. An edit whose output does not parse, or that the guard refuses, never fails the
hook: the file stays as it is and a warning says why.
"""

from __future__ import annotations

import fnmatch
import hashlib
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import importlib.util
import os

from hsedit.apply import EditRunner
from hsedit.batch import FAILED, OK, BatchTask, run_batch
from hsedit.config import ProjectConfig, hook_config
from hsedit.errors import UsageError

PYTHON_VARIABLE = "HSEDIT_PYTHON"  # the interpreter of an environment with hsedit's engine


def instruction_for(config: ProjectConfig, path: str) -> str | None:
    return next((text for pattern, text in config.instructions if fnmatch.fnmatch(path, pattern)), None)


def hook_tasks(files: Sequence[str], config: ProjectConfig, root: Path) -> list[BatchTask]:
    tasks = []
    for name in dict.fromkeys(files):
        instruction = instruction_for(config, Path(name).as_posix())
        if instruction is None:
            continue
        key = hashlib.sha1(f"{name}\0{instruction}".encode()).hexdigest()[:16]
        tasks.append(BatchTask(key, (root / name).resolve(), name, instruction, None))
    return tasks


def hook_command(mode: str, files: Sequence[str], root: Path, say: Callable[[str], None]) -> int:
    """`hsedit hook check|fix FILES`: the exit status for pre-commit. pre-commit installs hsedit
    alone into an environment of its own; without a server to edit on, the hook runs again
    under HSEDIT_PYTHON, the interpreter of the environment `make setup` (or
    `pip install hsedit[cpu]`) made, which has the engine."""
    from hsedit.runner import open_runner

    config = hook_config(root)  # a mistake in [tool.hsedit] is one line, before anything starts
    on_server = config.resolve("server", None, None) is not None
    if not on_server and importlib.util.find_spec("vllm") is None:
        python = os.environ.get(PYTHON_VARIABLE)
        if not python:
            raise UsageError("the hook needs vLLM or a server: set HSEDIT_SERVER (or [tool.hsedit] server) to a "
                             f"running `hsedit serve`, or {PYTHON_VARIABLE} to the python of an environment with "
                             "hsedit[cpu] or hsedit[gpu] installed")
        os.execv(python, [python, "-m", "hsedit.cli", "hook", mode, *files])
    return run_hook(lambda: open_runner(config), config, files, fix=mode == "fix", root=root, say=say)


def run_hook(
    runner_for: Callable[[], EditRunner],
    config: ProjectConfig,
    files: Sequence[str],
    *,
    fix: bool,
    root: Path,
    say: Callable[[str], None],
) -> int:
    """Exit status for pre-commit: 1 when a file would change (check) or was changed (fix).
    `config` is `config.hook_config(root)`; the runner (an engine start, or a server's client) is
    made only if a file matches."""
    tasks = hook_tasks(files, config, root)
    if not tasks:
        return 0
    runner = runner_for()
    with tempfile.TemporaryDirectory() as scratch:
        outcomes = run_batch(
            runner, tasks, Path(scratch) / "results.jsonl", write=fix,
            max_deletion=config.max_deletion_or_default(None), scope=config.scope_or_default(None),
        )
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
