"""Settings from `[tool.hsedit]` in pyproject.toml, checked once, for every command and the hooks.

    [tool.hsedit]
    model = "embedded"            # as --model
    drafter = "hybrid"            # as --drafter
    max_deletion = 0.5            # as --max-deletion: the write guard's limit
    server = "http://127.0.0.1:8421"  # as --server: edit on a running `hsedit serve`
    scope = "auto"                # as --scope: auto, file or regions
    dtype = "auto"                # as --dtype: auto (bf16 where the hardware has it), bfloat16, float32
    daemon = true                 # false: as --no-daemon, the engine starts in each command's own process
    keep_alive = 10               # minutes the background engine waits idle before it exits
    compile_behind = true         # false: the background engine stays eager (no compiled twin)
    [tool.hsedit.instructions]    # the hooks: fnmatch pattern -> instruction; the first match applies
    "src/*.py" = "remove debug print statements"

A mistake here (an unknown key or drafter, a value of the wrong type) is one line and exit 2,
like a bad command-line option. Precedence everywhere: the command-line flag, then the
environment (`HSEDIT_MODEL`, `HSEDIT_DRAFTER`, `HSEDIT_SERVER`, `HSEDIT_SCOPE`), then `[tool.hsedit]`, then the
default. A server's API key comes from `HSEDIT_API_KEY` only: a secret has no place in a file
that is committed.
Imports nothing heavy: the pre-commit environment has no torch or vLLM.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hsedit.drafting.chain import HYBRID, check_drafter
from hsedit.edit.guard import DEFAULT_MAX_DELETION
from hsedit.engine.options import AUTO_DTYPE, DTYPES
from hsedit.errors import UsageError

AUTO, FILE, REGIONS = "auto", "file", "regions"
SCOPES = (AUTO, FILE, REGIONS)  # --scope: what one edit sends the model (hsedit/scope.py)


KEEP_ALIVE_MINUTES = 10.0


def check_switch(value: Any, where: str) -> bool:
    """An on/off setting from the environment: 1/0, true/false, yes/no, on/off."""
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"{where} takes 1 or 0 (true/false), not {value!r}")


def check_minutes(value: Any, where: str) -> float:
    try:
        minutes = float(value)
    except (TypeError, ValueError):
        minutes = -1.0
    if isinstance(value, bool) or not minutes > 0:
        raise UsageError(f"{where} must be a number of minutes above 0, not {value!r}")
    return minutes


def check_dtype(dtype: Any, where: str = "--dtype") -> str:
    if dtype not in DTYPES:
        raise UsageError(f"{where} takes {', '.join(DTYPES)}, not {dtype!r}")
    return dtype


def check_scope(scope: Any, where: str = "--scope") -> str:
    if scope not in SCOPES:
        raise UsageError(f"{where} takes {', '.join(SCOPES)}, not {scope!r}")
    return scope

KNOWN_KEYS = ("model", "drafter", "max_deletion", "server", "scope", "dtype", "daemon", "keep_alive",
              "compile_behind", "instructions")
ENVIRONMENT = {
    "model": "HSEDIT_MODEL", "drafter": "HSEDIT_DRAFTER", "server": "HSEDIT_SERVER", "scope": "HSEDIT_SCOPE",
    "dtype": "HSEDIT_DTYPE", "daemon": "HSEDIT_DAEMON", "keep_alive": "HSEDIT_KEEP_ALIVE",
    "compile_behind": "HSEDIT_COMPILE_BEHIND",
}
API_KEY_VARIABLE = "HSEDIT_API_KEY"  # a server's key, for its clients and for `hsedit serve`


@dataclass(frozen=True)
class ProjectConfig:
    instructions: tuple[tuple[str, str], ...] = ()  # (pattern, instruction) in file order
    model: str | None = None
    drafter: str | None = None
    max_deletion: float | None = None
    server: str | None = None
    scope: str | None = None
    dtype: str | None = None
    daemon: bool | None = None
    keep_alive: float | None = None  # minutes
    compile_behind: bool | None = None
    source: Path | None = None  # the pyproject.toml it came from

    def resolve(self, name: str, flag: Any, default: Any) -> Any:
        """One setting: the flag if given, else the environment, else this file, else `default`."""
        if flag is not None:
            return flag
        variable = ENVIRONMENT.get(name)
        if variable and os.environ.get(variable):
            value = os.environ[variable]
            checks = {"drafter": check_drafter, "scope": check_scope, "dtype": check_dtype,
                      "daemon": check_switch, "keep_alive": check_minutes, "compile_behind": check_switch}
            return checks[name](value, variable) if name in checks else value
        value = getattr(self, name)
        return default if value is None else value

    def drafter_or_default(self, flag: str | None) -> str:
        return check_drafter(self.resolve("drafter", flag, HYBRID))

    def daemon_or_default(self, flag: bool | None) -> bool:
        """Whether edits go to the warm background engine (flag, HSEDIT_DAEMON, [tool.hsedit] daemon)."""
        return bool(self.resolve("daemon", flag, True))

    def compile_behind_or_default(self, flag: bool | None) -> bool:
        """Whether the background engine, once idle, starts a compiled twin of itself and hands
        over to it (hsedit/daemon.py)."""
        return bool(self.resolve("compile_behind", flag, True))

    def keep_alive_or_default(self, flag: float | None) -> float:
        """Seconds the background engine stays up idle."""
        return 60 * float(self.resolve("keep_alive", flag, KEEP_ALIVE_MINUTES))

    def dtype_or_default(self, flag: str | None) -> str:
        return check_dtype(self.resolve("dtype", flag, AUTO_DTYPE))

    def scope_or_default(self, flag: str | None) -> str:
        return check_scope(self.resolve("scope", flag, AUTO))

    def max_deletion_or_default(self, flag: float | None) -> float:
        return float(self.resolve("max_deletion", flag, DEFAULT_MAX_DELETION))


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml at or above `start` (the working directory)."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def project_config() -> ProjectConfig:
    """The settings of the project the working directory is in."""
    return load_config(find_pyproject())


def load_config(pyproject: Path | None) -> ProjectConfig:
    """`[tool.hsedit]` of `pyproject` (none, or no such table: all defaults)."""
    if pyproject is None or not pyproject.is_file():
        return ProjectConfig()
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{pyproject}: not valid TOML ({exc})") from exc
    tool = data.get("tool", {})
    section = tool.get("hsedit", {}) if isinstance(tool, dict) else {}
    where = f"{pyproject}: [tool.hsedit]"
    if not isinstance(section, dict):
        raise UsageError(f"{where} must be a table")
    unknown = [key for key in section if key not in KNOWN_KEYS]
    if unknown:
        raise UsageError(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(KNOWN_KEYS)}")
    instructions = section.get("instructions", {})
    if not isinstance(instructions, dict):
        raise UsageError(f'{where}.instructions must be a table of "pattern" = "instruction" lines')
    for pattern, text in instructions.items():
        if not pattern.strip():
            raise UsageError(f"{where}.instructions has an empty pattern")
        if not isinstance(text, str) or not text.strip():
            raise UsageError(f"{where}.instructions {pattern!r} needs a non-empty instruction")
    model = section.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise UsageError(f"{where} model must be a model name or path (a string), not {model!r}")
    drafter = section.get("drafter")
    if drafter is not None:
        check_drafter(drafter, f"{where} drafter")
    max_deletion = section.get("max_deletion")
    if max_deletion is not None:
        max_deletion = check_share(max_deletion, f"{where} max_deletion")
    server = section.get("server")
    if server is not None and (not isinstance(server, str) or not server.strip()):
        raise UsageError(f"{where} server must be a URL such as \"http://127.0.0.1:8421\", not {server!r}")
    scope = section.get("scope")
    if scope is not None:
        check_scope(scope, f"{where} scope")
    dtype = section.get("dtype")
    if dtype is not None:
        check_dtype(dtype, f"{where} dtype")
    daemon = section.get("daemon")
    if daemon is not None and not isinstance(daemon, bool):
        raise UsageError(f"{where} daemon must be true or false, not {daemon!r}")
    keep_alive = section.get("keep_alive")
    if keep_alive is not None:
        keep_alive = check_minutes(keep_alive, f"{where} keep_alive")
    compile_behind = section.get("compile_behind")
    if compile_behind is not None and not isinstance(compile_behind, bool):
        raise UsageError(f"{where} compile_behind must be true or false, not {compile_behind!r}")
    return ProjectConfig(tuple(instructions.items()), model, drafter, max_deletion, server, scope, dtype, daemon,
                         keep_alive, compile_behind, pyproject)


def hook_config(root: Path) -> ProjectConfig:
    """The hooks' settings (pyproject.toml at the repository root, instructions required)."""
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        raise UsageError(f"no {pyproject.name} here: the hook reads its instructions from [tool.hsedit]")
    config = load_config(pyproject)
    if not config.instructions:
        raise UsageError(f'{pyproject}: add [tool.hsedit.instructions] with "pattern" = "instruction" lines')
    return config


def check_share(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise UsageError(f"{where} must be a number from 0 to 1, not {value!r}")
    return float(value)
