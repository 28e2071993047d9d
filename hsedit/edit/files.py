"""Reading the user's file with clear refusals, and writing it back atomically."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hsedit.errors import InputFileError


@dataclass(frozen=True)
class SourceFile:
    path: Path
    text: str  # with "\n" line ends; the original convention is in `crlf`
    crlf: bool

    def restore_newlines(self, text: str) -> str:
        return text.replace("\n", "\r\n") if self.crlf else text


def read_source(path: str | Path) -> SourceFile:
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"no such file: {path}")
    if path.is_dir():
        raise InputFileError(f"is a directory, not a file: {path}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if b"\x00" in data[:8192]:
        raise InputFileError(f"binary file, not text: {path}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"not UTF-8 text (bad byte at offset {exc.start}): {path}") from exc
    crlf = "\r\n" in text
    return SourceFile(path, text.replace("\r\n", "\n") if crlf else text, crlf)


def atomic_write(path: str | Path, text: str) -> None:
    """Replace `path` with `text` in one rename: a crash or Ctrl-C leaves the old file or the new one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".hsedit-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
