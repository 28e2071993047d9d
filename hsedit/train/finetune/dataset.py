"""The apply model's training and evaluation data, from Python source available offline.

Source files (30–300 lines, no tests, nothing generated) come from the standard library and
the installed site-packages. Each is cut into self-contained chunks at top-level statement
boundaries (what an editor shows the model as "the file"), and edit generators turn chunks
into (before, after, instruction) examples. Whole source files are held out for evaluation:
a file's split is fixed by a hash of its path, so no file is in both.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import sysconfig
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from hsedit.train.finetune.edits import GENERATORS, Edit, as_snippet_merge

MIN_FILE_LINES, MAX_FILE_LINES = 30, 300
MIN_CHUNK_LINES, MAX_CHUNK_LINES = 12, 45
MAX_LINE_LENGTH = 110
HELD_OUT_PERCENT = 12
SNIPPET_MERGE_SHARE = 0.2

HELDOUT = Path(__file__).resolve().parent / "heldout.jsonl"  # the shipped evaluation set
SKIP_PARTS = {"test", "tests", "testing", "idle_test", "site-packages/pip", "__pycache__", "_vendor", "vendored"}


@dataclass(frozen=True)
class Example:
    kind: str
    path: str  # the file as the prompt names it (relative to its library root)
    instruction: str
    before: str
    after: str
    update: str | None
    split: str  # "train" or "eval"


def source_roots() -> list[Path]:
    paths = sysconfig.get_paths()
    roots = [Path(paths["stdlib"]), Path(paths["purelib"])]
    return [root for root in dict.fromkeys(roots) if root.is_dir()]


def split_of(relative: str) -> str:
    digest = int(hashlib.sha1(relative.encode()).hexdigest(), 16)
    return "eval" if digest % 100 < HELD_OUT_PERCENT else "train"


def source_files(roots: list[Path] | None = None) -> Iterator[tuple[str, str]]:
    """(relative path, text) of usable source files, in a stable order."""
    for root in roots or source_roots():
        for path in sorted(root.rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            parts = set(relative.split("/"))
            if parts & SKIP_PARTS or path.name.startswith("test_") or "site-packages" in relative:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            lines = text.splitlines()
            if not MIN_FILE_LINES <= len(lines) <= MAX_FILE_LINES:
                continue
            head = "\n".join(lines[:5]).lower()
            if "generated" in head or "do not edit" in head:
                continue
            if any(len(line) > MAX_LINE_LENGTH or "\t" in line for line in lines):
                continue
            yield relative, text


def chunks(text: str, rng: random.Random) -> list[str]:
    """Runs of whole top-level statements, each MIN..MAX_CHUNK_LINES long, that parse alone."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    lines = text.splitlines(keepends=True)
    starts = []
    for node in tree.body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        starts.append((first - 1, node.end_lineno))
    out, i = [], 0
    while i < len(starts):
        j = i
        target = rng.randint(MIN_CHUNK_LINES, MAX_CHUNK_LINES)
        while j + 1 < len(starts) and starts[j + 1][1] - starts[i][0] <= target:
            j += 1
        begin, end = starts[i][0], starts[j][1]
        if MIN_CHUNK_LINES <= end - begin <= MAX_CHUNK_LINES:
            chunk = "".join(lines[begin:end])
            try:
                ast.parse(chunk)
                out.append(chunk)
            except SyntaxError:
                pass
        i = j + 1
    return out


def generate(seed: int = 0, limit_per_kind: int = 150, max_files: int | None = None) -> list[Example]:
    rng = random.Random(seed)
    counts: Counter[tuple[str, str]] = Counter()
    examples: list[Example] = []
    files = list(source_files())
    rng.shuffle(files)
    for relative, text in files[:max_files]:
        split = split_of(relative)
        cap = limit_per_kind if split == "train" else max(6, limit_per_kind * HELD_OUT_PERCENT // 100)
        for chunk in chunks(text, rng):
            kinds = list(GENERATORS)
            rng.shuffle(kinds)
            for kind in kinds:
                if counts[(split, kind)] >= cap:
                    continue
                edit = GENERATORS[kind](chunk, rng)
                if edit is None or edit.before == edit.after:
                    continue
                if rng.random() < SNIPPET_MERGE_SHARE and counts[(split, "snippet_merge")] < cap:
                    edit = as_snippet_merge(edit) or edit
                counts[(split, edit.kind)] += 1
                examples.append(_example(edit, relative, split))
                break  # one edit per chunk keeps examples varied
    return examples


def _example(edit: Edit, path: str, split: str) -> Example:
    return Example(edit.kind, path, edit.instruction, edit.before, edit.after, edit.update, split)


def save(examples: list[Example], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for example in examples:
            handle.write(json.dumps(asdict(example)) + "\n")


def heldout_sample(count: int, seed: int = 0) -> list[Example]:
    """`count` examples of the shipped held-out split, the same ones for the same seed."""
    import random

    heldout = load(HELDOUT, split="eval")
    return random.Random(seed).sample(heldout, min(count, len(heldout)))


def load(path: str | Path, split: str | None = None) -> list[Example]:
    with open(path, encoding="utf-8") as handle:
        rows = [Example(**json.loads(line)) for line in handle if line.strip()]
    return [row for row in rows if split is None or row.split == split]
