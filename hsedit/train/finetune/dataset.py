"""The apply model's training and evaluation data, from Python source available offline.

Source files (30–300 lines, no tests, nothing generated) come from the standard library and
the installed site-packages. Each is cut into self-contained chunks at top-level statement
boundaries (what an editor shows the model as "the file"), and edit generators turn chunks
into (before, after, instruction) examples. Whole files (or their top, cut after a top-level
statement) make examples too, `scope="file"`, since a real edit shows the model a whole file.
Whole source files are held out for evaluation: a file's split is fixed by a hash of its path,
so no file is in both.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import sysconfig
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from hsedit.edit.intent import Rename, parse_intent
from hsedit.edit.regions import REGION_TOKENS
from hsedit.tasks import task_lines
from hsedit.train.finetune.edits import (
    FILE_GENERATORS, GENERATORS, Edit, as_snippet_merge, no_change, rename_tokens,
)

MIN_FILE_LINES, MAX_FILE_LINES = 30, 300
MIN_CHUNK_LINES, MAX_CHUNK_LINES = 12, 45
MAX_LINE_LENGTH = 110
HELD_OUT_PERCENT = 12
SNIPPET_MERGE_SHARE = 0.2

MIN_WHOLE_FILE_LINES, MAX_WHOLE_FILE_LINES = 50, 200
WHOLE_FILE_LINES = (MIN_WHOLE_FILE_LINES, MAX_WHOLE_FILE_LINES)
# Short whole files, the size of this project's demo files (25-48 lines): a model trained on regions
# of that size and on whole files of 50 lines or more answered a short file's first lines only.
SHORT_FILE_LINES = (20, MIN_WHOLE_FILE_LINES - 1)
# The apply model's context is 8,192 tokens and an example holds the file twice, in the prompt and
# again as the answer, besides the instruction and the prompt template: files of up to ~2,400
# tokens leave room for both and for an answer that grows. Tokens are estimated from characters,
# so generating data needs no tokenizer: Python source runs 3.7 characters a token (median) through
# SmolLM2's tokenizer, and 3.2 errs on the safe side.
CHARS_PER_TOKEN = 3.2
MAX_WHOLE_FILE_TOKENS = 2400
NO_CHANGE_SHARE = 0.1  # whole files given an instruction that does not apply: the answer is the input

HELDOUT = Path(__file__).resolve().parent / "heldout.jsonl"  # the shipped evaluation set (chunks)
# The whole-file evaluation set: heldout_whole_files(seed=0) from this project's Python install.
HELDOUT_FILES = Path(__file__).resolve().parent / "heldout_files.jsonl"
# The region evaluation set: generate_regions(seed=0, limit_per_kind=40, split="eval").
HELDOUT_REGIONS = Path(__file__).resolve().parent / "heldout_regions.jsonl"
# Examples per kind in HELDOUT_FILES: renames first, as whole-file renames are what the model failed.
HELDOUT_FILE_QUOTAS = {
    "rename_function": 10, "rename_class": 8, "rename_local": 8, "rename_variable": 10, "no_change": 6,
    "snippet_merge": 4, "set_constant": 3, "delete_function": 3, "add_type_hints": 3,
    "percent_to_fstring": 3, "remove_debug_print": 3, "add_parameter": 3,
}  # fmt: skip
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
    # "chunk" (a run of statements), "file" (a whole file, or its top) or "region" (a region of a
    # file as `hsedit apply --scope regions` shows it: hsedit/edit/regions.py)
    scope: str = "chunk"


def source_roots() -> list[Path]:
    paths = sysconfig.get_paths()
    roots = [Path(paths["stdlib"]), Path(paths["purelib"])]
    return [root for root in dict.fromkeys(roots) if root.is_dir()]


def split_of(relative: str) -> str:
    digest = int(hashlib.sha1(relative.encode()).hexdigest(), 16)
    return "eval" if digest % 100 < HELD_OUT_PERCENT else "train"


def source_files(
    roots: list[Path] | None = None, lines_between: tuple[int, int] = (MIN_FILE_LINES, MAX_FILE_LINES)
) -> Iterator[tuple[str, str]]:
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
            if not lines_between[0] <= len(lines) <= lines_between[1]:
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
        cap = limit_per_kind if split == "train" else _eval_cap(limit_per_kind)
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


def _eval_cap(limit_per_kind: int) -> int:
    return max(6, limit_per_kind * HELD_OUT_PERCENT // 100)


def _example(edit: Edit, path: str, split: str, scope: str = "chunk") -> Example:
    return Example(edit.kind, path, edit.instruction, edit.before, edit.after, edit.update, split, scope)


def estimated_tokens(text: str) -> int:
    return round(len(text) / CHARS_PER_TOKEN)


def _fits_whole(text: str, bounds: tuple[int, int]) -> bool:
    fits_lines = bounds[0] <= len(text.splitlines()) <= bounds[1]
    return fits_lines and estimated_tokens(text) <= MAX_WHOLE_FILE_TOKENS


def whole_file(text: str, bounds: tuple[int, int] = WHOLE_FILE_LINES) -> str | None:
    """The file itself if its line count is within `bounds` and it fits the token budget; for a
    larger one, its longest top (whole top-level statements from the first) that does; else None.
    A top of whole statements is a complete module, as an edited file would be."""
    if _fits_whole(text, bounds):
        return text
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    lines = text.splitlines(keepends=True)
    best = None
    for node in tree.body:
        top = "".join(lines[: node.end_lineno])
        if node.end_lineno > bounds[1] or estimated_tokens(top) > MAX_WHOLE_FILE_TOKENS:
            break
        best = top
    return best if best is not None and _fits_whole(best, bounds) else None


def generate_whole_files(
    seed: int = 0,
    limit_per_kind: int = 60,
    max_files: int | None = None,
    files: Iterable[tuple[str, str]] | None = None,
    bounds: tuple[int, int] = WHOLE_FILE_LINES,
) -> list[Example]:
    """Whole-file examples of files (or their tops) of `bounds` lines: up to `limit_per_kind` per
    kind from train files, the held-out share from eval files. `files` ((relative path, text)
    pairs) defaults to `source_files()`."""
    # NO_CHANGE_SHARE of the examples once every other kind (snippet_merge too) is full.
    limited_kinds = len(FILE_GENERATORS)  # all but no_change, and snippet_merge
    no_change_per_limit = limited_kinds * NO_CHANGE_SHARE / (1 - NO_CHANGE_SHARE)

    def cap(split: str, kind: str) -> int:
        limit = limit_per_kind if split == "train" else _eval_cap(limit_per_kind)
        return round(limit * no_change_per_limit) if kind == "no_change" else limit

    return _whole_file_examples(seed, cap, max_files, files, bounds)


# This project's demo files and their task file (`make demo`, `hsedit batch`): whole files the
# shipped adapter answers whole (shipping.DEMO_FILE_GUARD).
DEMO_DIR = Path(__file__).resolve().parents[3] / "examples"


def demo_file_examples(directory: Path = DEMO_DIR) -> list[Example]:
    """The renames of `directory/tasks.jsonl`, each a whole-file example whose answer is its file
    renamed token by token; none where the directory is not there (an installed wheel)."""
    tasks = directory / "tasks.jsonl"
    if not tasks.is_file():
        return []
    examples = []
    for _, _, task in task_lines(tasks):
        if not isinstance(task.get("instruction"), str):
            continue
        intent = parse_intent(task["instruction"])
        if not isinstance(intent, Rename) or intent.scope is not None:
            continue
        before = (directory / task["path"]).read_text(encoding="utf-8")
        after = rename_tokens(before, intent.old, intent.new)
        if after is None or after == before:
            continue
        kind = "rename_class" if intent.old[:1].isupper() else "rename_function"
        examples.append(Example(kind, task["path"], task["instruction"], before, after, None, "eval", "file"))
    return examples


def heldout_whole_files(seed: int = 0, files: Iterable[tuple[str, str]] | None = None) -> list[Example]:
    """The whole-file evaluation set (what HELDOUT_FILES holds): eval files only, HELDOUT_FILE_QUOTAS
    examples per kind, the same ones for the same seed and Python install."""
    return _whole_file_examples(
        seed, lambda split, kind: HELDOUT_FILE_QUOTAS.get(kind, 0) if split == "eval" else 0, None, files
    )


def _whole_file_examples(
    seed: int,
    cap: Callable[[str, str], int],
    max_files: int | None,
    files: Iterable[tuple[str, str]] | None,
    bounds: tuple[int, int] = WHOLE_FILE_LINES,
) -> list[Example]:
    """One example per usable file, until every (split, kind) has `cap(split, kind)` of them."""
    rng = random.Random(seed)
    counts: Counter[tuple[str, str]] = Counter()
    examples: list[Example] = []
    edit_kinds = [kind for kind in FILE_GENERATORS if kind != "no_change"]
    all_kinds = [*FILE_GENERATORS, "snippet_merge"]

    def is_open(split: str, kind: str) -> bool:
        return counts[(split, kind)] < cap(split, kind)

    ordered = list(source_files() if files is None else files)
    rng.shuffle(ordered)
    for relative, text in ordered[:max_files]:
        if not any(is_open(split, kind) for split in ("train", "eval") for kind in all_kinds):
            break
        split = split_of(relative)
        open_kinds = [kind for kind in edit_kinds if is_open(split, kind)]
        piece = whole_file(text, bounds) if open_kinds or is_open(split, "no_change") else None
        if piece is None:
            continue
        edit = None
        if is_open(split, "no_change") and (not open_kinds or rng.random() < NO_CHANGE_SHARE):
            edit = no_change(piece, rng)
        else:
            rng.shuffle(open_kinds)
            open_kinds.sort(key=lambda kind: counts[(split, kind)] / cap(split, kind))  # least filled first
            for kind in open_kinds:
                edit = FILE_GENERATORS[kind](piece, rng)
                if edit is not None and edit.before != edit.after:
                    break
                edit = None
            if edit is not None and rng.random() < SNIPPET_MERGE_SHARE and is_open(split, "snippet_merge"):
                edit = as_snippet_merge(edit) or edit
        if edit is None:
            continue
        counts[(split, edit.kind)] += 1
        examples.append(_example(edit, relative, split, scope="file"))
    return examples


def save(examples: list[Example], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for example in examples:
            handle.write(json.dumps(asdict(example)) + "\n")


def heldout_sample(count: int, seed: int = 0) -> list[Example]:
    """`count` examples of the shipped held-out split, the same ones for the same seed."""
    import random

    heldout = load(HELDOUT, split="eval")
    return random.Random(seed).sample(heldout, min(count, len(heldout)))


def load(path: str | Path, split: str | None = None, per_kind: int | None = None) -> list[Example]:
    """The examples of a file (of one split), with `per_kind`: only the first so many of each kind."""
    with open(path, encoding="utf-8") as handle:
        rows = [Example(**json.loads(line)) for line in handle if line.strip()]
    rows = [row for row in rows if split is None or row.split == split]
    if per_kind is None:
        return rows
    seen: Counter[str] = Counter()
    kept = []
    for row in rows:
        seen[row.kind] += 1
        if seen[row.kind] <= per_kind:
            kept.append(row)
    return kept


# -- regions ---------------------------------------------------------------------------------
# Files of any size give region examples: a region shows the model the same few dozen lines
# whatever the file's length. Each whole-file edit gives at most this many of its regions.
REGION_FILE_LINES = (30, 1500)
REGIONS_PER_EDIT = 3
REGION_KINDS = ("rename_function", "rename_class", "rename_variable", "rename_local", "set_constant",
                "delete_function", "add_type_hints", "percent_to_fstring", "remove_debug_print", "add_parameter",
                "snippet_merge")


def generate_regions(
    seed: int = 0,
    limit_per_kind: int = 100,
    split: str = "train",
    files: Iterable[tuple[str, str]] | None = None,
    finer_share: float = 0.0,
) -> list[Example]:
    """Region examples of one split: a whole-file edit made by a generator, cut and picked exactly
    as `hsedit apply --scope regions` cuts and picks (`region_examples`), up to `limit_per_kind`
    examples per edit kind (an edit's regions count for its kind). A `finer_share` of the edits
    is cut at one of the finer budgets a failing region is asked again at (`scope.RETRY_BUDGETS`),
    so the pieces retries send are pieces the model has seen."""
    from hsedit.scope import RETRY_BUDGETS

    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    examples: list[Example] = []
    ordered = [(r, t) for r, t in (source_files(lines_between=REGION_FILE_LINES) if files is None else files)
               if split_of(r) == split]
    rng.shuffle(ordered)
    for relative, text in ordered:
        open_kinds = [k for k in REGION_KINDS if counts[k] < limit_per_kind]
        if not open_kinds:
            break
        rng.shuffle(open_kinds)
        open_kinds.sort(key=lambda kind: counts[kind])
        for kind in open_kinds:
            edit = _whole_file_edit(text, kind, rng)
            if edit is None:
                continue
            budget = REGION_TOKENS
            if finer_share and rng.random() < finer_share:
                budget = rng.choice(RETRY_BUDGETS[1:])
            made = region_examples(edit, relative, split, rng, budget)
            if made:
                counts[kind] += len(made)
                examples += made
                break
    return examples


def _whole_file_edit(text: str, kind: str, rng: random.Random) -> Edit | None:
    if kind == "snippet_merge":
        for other in rng.sample(list(FILE_GENERATORS), len(FILE_GENERATORS)):
            if other == "no_change":
                continue
            edit = FILE_GENERATORS[other](text, rng)
            if edit is not None and edit.before != edit.after:
                return as_snippet_merge(edit)
        return None
    edit = FILE_GENERATORS[kind](text, rng)
    return edit if edit is not None and edit.before != edit.after else None


def region_examples(edit: Edit, path: str, split: str, rng: random.Random,
                    budget: int = REGION_TOKENS) -> list[Example]:
    """The regions `hsedit apply` would send for this edit, each with its exact answer (the whole
    file's target, line for line, under the same head), kept only where the instruction check
    passes that answer on the region: what inference asks, what it accepts. Regions the edit does
    not change stay in, answered as they are: inference sends them too (a deletion's neighbour)."""
    from hsedit.edit.check import Source, check_intent, rename_reach
    from hsedit.edit.intent import FreeForm, Rename, parse_intent
    from hsedit.edit.regions import regions_for

    intent = parse_intent(edit.instruction, edit.update)
    if isinstance(intent, FreeForm):
        return []
    before_lines = edit.before.splitlines(keepends=True)
    after_lines = edit.after.splitlines(keepends=True)
    line_map = _line_map(before_lines, after_lines)
    reach = rename_reach(Source(edit.before), intent.old) if isinstance(intent, Rename) and not intent.scope else None
    made = []
    regions = regions_for(edit.before, intent, budget)
    for region in rng.sample(regions, min(REGIONS_PER_EDIT, len(regions))):
        spans = [*region.head, (region.start, region.end)]
        mapped = [_mapped(line_map, a, b) for a, b in spans]
        if any(m is None for m in mapped):
            continue  # a change straddles the region's edge: no clean answer for it alone
        after = "".join("".join(after_lines[a:b]) for a, b in mapped)
        verdict = check_intent(path if path.endswith(".py") else path + ".py", region.shown, after, intent,
                               reach=reach, whole_file=False)
        if verdict.ok is False:
            continue
        made.append(Example(_kind_of(edit), path, edit.instruction, region.shown, after, edit.update, split, "region"))
    return made


def _kind_of(edit: Edit) -> str:
    return edit.kind if edit.update is None else "snippet_merge"


def _line_map(before: list[str], after: list[str]) -> dict[int, int | None]:
    """Each line boundary of `before` (0..len) to the same boundary in `after`, None inside a change."""
    import difflib

    boundary: dict[int, int | None] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1 + 1):
                boundary[i1 + k] = j1 + k
        else:
            boundary.setdefault(i1, j1)
            for k in range(i1 + 1, i2):
                boundary[k] = None
            boundary[i2] = j2
    return boundary


def _mapped(line_map: dict[int, int | None], start: int, end: int) -> tuple[int, int] | None:
    a, b = line_map.get(start), line_map.get(end)
    return None if a is None or b is None else (a, b)


# -- held-out renames through `hsedit apply` ---------------------------------------------------
# Whole real files of held-out paths, a name renamed at every use: what a user asks of a file,
# measured end to end (cut, regions, checks, splice) rather than on one region's answer.
SMALL_FILES, LARGE_FILES = (47, 300), (470, 1035)
HELDOUT_RENAMES = {
    "small": Path(__file__).resolve().parent / "heldout_renames_small.jsonl",
    "large": Path(__file__).resolve().parent / "heldout_renames_large.jsonl",
}


def heldout_renames(lines_between: tuple[int, int], count: int, seed: int = 0,
                    files: Iterable[tuple[str, str]] | None = None) -> list[Example]:
    """`count` renames (functions, classes and variables in turn) in eval-split files of that many lines."""
    from hsedit.train.finetune.edits import rename_everywhere

    rng = random.Random(seed)
    ordered = [(r, t) for r, t in (source_files(lines_between=lines_between) if files is None else files)
               if split_of(r) == "eval"]
    rng.shuffle(ordered)
    examples: list[Example] = []
    whats = ("function", "class", "variable")
    for relative, text in ordered:
        if len(examples) >= count:
            break
        edit = rename_everywhere(text, rng, whats[len(examples) % len(whats)])
        if edit is not None:
            examples.append(_example(edit, relative, "eval", scope="file"))
    return examples
