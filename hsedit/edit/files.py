"""Reading the user's file with clear refusals, and writing it back without harming anything.

What is read is remembered exactly: each line's own ending (LF or CRLF), whether the last line
has one, a UTF-8 byte-order mark, and the file's identity (content hash, size, mtime, inode).
The model sees plain LF text; `SourceFile.restore` puts every untouched line's own ending back.
`write_if_unchanged` replaces the file in one rename, through symlinks, keeping mode, owner and
group, and only if the file is still the one that was read: an edit never overwrites a change
the user made while it ran.
"""

from __future__ import annotations

import codecs
import difflib
import hashlib
import os
import stat
import tempfile
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from hsedit.errors import FileChangedError, InputFileError

LF, CRLF = "\n", "\r\n"


@dataclass(frozen=True)
class FileIdentity:
    """The file as it was read. Just before a write its content and inode must still match;
    size and mtime are kept for the record (a touch that changes nothing loses nothing)."""

    sha256: str
    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, target: Path, data: bytes) -> FileIdentity:
        info = target.stat()
        return cls(hashlib.sha256(data).hexdigest(), info.st_size, info.st_mtime_ns, info.st_ino)

    def describe_change(self, target: Path) -> str | None:
        """None while the file is as read; else what changed, in a few words."""
        try:
            info = target.stat()
            data = target.read_bytes()
        except FileNotFoundError:
            return "it was deleted"
        except OSError as exc:
            return f"it can no longer be read ({exc.strerror or exc})"
        if hashlib.sha256(data).hexdigest() != self.sha256:
            return "its content changed"
        if info.st_ino != self.inode:
            return "it was replaced by another file"
        return None  # same bytes, same file: a touch without a change loses nothing


@dataclass(frozen=True)
class SourceFile:
    path: Path  # as the user named it (may be a symlink)
    text: str  # what the model sees: LF line ends, no byte-order mark
    endings: tuple[str, ...] = ()  # each line's own ending as read: LF, CRLF, or "" (last line)
    bom: bool = False
    identity: FileIdentity | None = None  # None for text that never came from disk

    @classmethod
    def from_raw(cls, path: str | Path, raw: str) -> SourceFile:
        """Text as decoded from a file (or sent to the server): any line ends, kept for restore."""
        return cls(Path(path), raw.replace(CRLF, LF), _endings(raw))

    @classmethod
    def from_text(cls, path: str | Path, text: str) -> SourceFile:
        """An in-memory file with LF line ends (evaluation data, tests)."""
        return cls(Path(path), text, _endings(text))

    @property
    def target(self) -> Path:
        """The file that is really written: symlinks are followed, never replaced."""
        return Path(os.path.realpath(self.path))

    @property
    def original(self) -> str:
        """The file's text exactly as read."""
        return self.restore(self.text)

    @property
    def dominant_ending(self) -> str:
        counts = Counter(e for e in self.endings if e)
        return CRLF if counts[CRLF] > counts[LF] else LF

    def restore(self, new_text: str) -> str:
        """`new_text` (LF) with the file's conventions: each line the edit kept keeps its own
        ending; new or changed lines take the file's dominant one; the BOM comes back."""
        old_lines = self.text.splitlines(keepends=True)
        new_lines = new_text.splitlines(keepends=True)
        # new line index -> the old line whose ending it keeps: the same line where the edit kept
        # it, the line at the same place in a block of replaced lines.
        source_line: dict[int, int] = {}
        matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag in ("equal", "replace"):
                for j in range(j1, j2):
                    source_line[j] = i1 + min(j - j1, i2 - i1 - 1)
        out = []
        for index, line in enumerate(new_lines):
            if line.endswith(LF):
                old_ending = self.endings[source_line[index]] if index in source_line else ""
                line = line[:-1] + (old_ending or self.dominant_ending)
            out.append(line)
        return ("\ufeff" if self.bom else "") + "".join(out)


def _endings(text: str) -> tuple[str, ...]:
    return tuple(CRLF if line.endswith(CRLF) else LF if line.endswith(LF) else "" for line in text.splitlines(keepends=True))


def read_source(path: str | Path) -> SourceFile:
    path = Path(path)
    if not path.exists():
        kind = "broken symlink" if path.is_symlink() else "no such file"
        raise InputFileError(f"{kind}: {path}")
    if path.is_dir():
        raise InputFileError(f"is a directory, not a file: {path}")
    target = Path(os.path.realpath(path))
    try:
        data = target.read_bytes()
        identity = FileIdentity.of(target, data)
    except OSError as exc:
        raise InputFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if b"\x00" in data[:8192]:
        raise InputFileError(f"binary file, not text: {path}")
    bom = data.startswith(codecs.BOM_UTF8)
    try:
        raw = data[len(codecs.BOM_UTF8) :].decode("utf-8") if bom else data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"not UTF-8 text (bad byte at offset {exc.start}): {path}") from exc
    return replace(SourceFile.from_raw(path, raw), bom=bom, identity=identity)


def check_writable(source: SourceFile) -> None:
    """Refuse before any work when the file cannot (or should not) be replaced."""
    target = source.target
    if not os.stat(target).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise InputFileError(f"{source.path} is read-only; nothing written (make it writable first)")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise InputFileError(f"cannot write in {target.parent}: permission denied")


def write_if_unchanged(source: SourceFile, text: str) -> None:
    """Replace `source`'s file with `text` unless it changed since it was read.

    If it changed, nothing is written and the new text is kept beside it as FILE.hsedit-new, so
    the answer is not lost either; FileChangedError says where.
    """
    check_writable(source)
    target = source.target

    def unchanged() -> None:
        change = source.identity.describe_change(target) if source.identity else None
        if change is None:
            return
        sidecar = target.with_name(target.name + ".hsedit-new")
        atomic_write(sidecar, text)
        raise FileChangedError(
            f"{source.path} changed while the edit ran ({change}): nothing written; the new version is in {sidecar}"
        )

    atomic_write(target, text, before_replace=unchanged)


def atomic_write(path: str | Path, text: str, *, before_replace=None) -> None:
    """Replace `path` with `text` in one rename: a crash or Ctrl-C leaves the old file or the new one.

    A symlink is followed (its target is replaced, the link stays); mode bits, owner and group
    are kept where permitted; the directory is synced so the rename itself survives a crash.
    `before_replace` runs after the new text is on disk and just before the rename: the last
    moment to refuse.
    """
    path = Path(os.path.realpath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".hsedit-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            if path.exists():
                info = path.stat()
                os.chmod(tmp, stat.S_IMODE(info.st_mode))
                try:
                    os.chown(tmp, info.st_uid, info.st_gid)
                except PermissionError:
                    pass  # an ordinary user cannot give files away; the mode bits are kept
            os.fsync(handle.fileno())
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # some platforms cannot open directories; the rename is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
