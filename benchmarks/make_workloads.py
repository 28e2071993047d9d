"""Regenerate the built-in benchmark workloads from installed Python source (no network).

    python benchmarks/make_workloads.py

Files come from the held-out split of the apply model's data generator (never trained on):
- light:   instructed edits whose exact result differs from the input by 15-20% (edit distance),
- heavy:   lazy-snippet merges that replace most of the file (60-70%): the update carries new
           functions taken from elsewhere in the same module,
- snippet: lazy-snippet merges of one small change,
- chat:    MT-Bench first turns (copied from ../shared/data; Apache-2.0).

Written by hand afterwards (this script does not make them):
- light.jsonl: the small model left the instructed edits this script chose unchanged, so "light"
  measured copying only. It now holds lazy-snippet updates (add a parameter, a check, an
  abstract method; 8-22% of the file) that the model does apply, on three of the chosen files
  and on 01_interfaces.py (the model left its update of 05_causal_conv1d.py unchanged). The
  update of 08_async_utils.py is left unapplied by the model too, so the workload's measured
  edit distance is the mean of three real edits and one copy.
- mixed.jsonl: light edits and chat prompts alternating, so every batch of 4 or 16 holds half
  of each: the hybrid's per-request choice and its batch allocation work together.
The chosen source excerpts are written to benchmarks/files/ (Python Software Foundation
License / the packages' own permissive licenses), so the workloads are fixed once generated.
"""

from __future__ import annotations

import ast
import json
import random
from pathlib import Path

from hsedit.edit.diff import edit_distance
from hsedit.train.finetune.dataset import chunks, source_files, split_of
from hsedit.train.finetune.edits import EXISTING_CODE, GENERATORS, as_snippet_merge

HERE = Path(__file__).resolve().parent
PER_WORKLOAD = 4
LIGHT, HEAVY = (0.15, 0.20), (0.60, 0.70)
MAX_LINES = 40


def functions(source: str) -> list[tuple[int, int]]:
    """(first line, last line) of each top-level function or class, 1-based."""
    tree = ast.parse(source)
    return [(n.lineno, n.end_lineno) for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]


def heavy_merge(chunk: str, donor: str) -> tuple[str, str] | None:
    """Replace all but the first definition of `chunk` with the definitions of `donor`."""
    mine, theirs = functions(chunk), functions(donor)
    if len(mine) < 2 or not theirs:
        return None
    lines, donor_lines = chunk.splitlines(keepends=True), donor.splitlines(keepends=True)
    keep_until = mine[0][1]
    new_part = "".join(donor_lines[theirs[0][0] - 1 : theirs[-1][1]])
    after = "".join(lines[:keep_until]) + "\n\n" + new_part
    update = EXISTING_CODE + "\n\n" + new_part
    try:
        ast.parse(after)
    except SyntaxError:
        return None
    return after, update


def main() -> None:
    rng = random.Random(7)
    files = [(r, t) for r, t in source_files() if split_of(r) == "eval"]
    rng.shuffle(files)
    found: dict[str, list[dict]] = {"light": [], "heavy": [], "snippet": []}
    previous_chunk = None
    for relative, text in files:
        if all(len(v) >= PER_WORKLOAD for v in found.values()):
            break
        for chunk in chunks(text, rng):
            if chunk.count("\n") > MAX_LINES:
                continue
            name = f"{sum(len(v) for v in found.values()):02d}_{Path(relative).stem}.py"
            if len(found["heavy"]) < PER_WORKLOAD and previous_chunk is not None:
                made = heavy_merge(chunk, previous_chunk)
                if made and HEAVY[0] <= edit_distance(chunk, made[0]) <= HEAVY[1]:
                    found["heavy"].append({"name": name, "code": chunk, "task": {"update": made[1]}})
                    previous_chunk = chunk
                    continue
            previous_chunk = chunk
            kinds = list(GENERATORS)
            rng.shuffle(kinds)
            for kind in kinds:
                edit = GENERATORS[kind](chunk, rng)
                if edit is None or edit.before == edit.after:
                    continue
                distance = edit_distance(edit.before, edit.after)
                if len(found["light"]) < PER_WORKLOAD and LIGHT[0] <= distance <= LIGHT[1]:
                    found["light"].append({"name": name, "code": chunk, "task": {"instruction": edit.instruction}})
                    break
                merge = as_snippet_merge(edit)
                if merge is not None and len(found["snippet"]) < PER_WORKLOAD and distance < LIGHT[0]:
                    found["snippet"].append({"name": name, "code": chunk, "task": {"update": merge.update}})
                    break
    for old in (HERE / "files").glob("*.py"):
        old.unlink()
    for workload, items in found.items():
        with open(HERE / f"{workload}.jsonl", "w", encoding="utf-8") as out:
            for item in items:
                (HERE / "files" / item["name"]).write_text(item["code"], encoding="utf-8")
                out.write(json.dumps({"path": f"files/{item['name']}", **item["task"]}) + "\n")
        print(workload, len(items))
    shared = HERE.parent.parent / "shared" / "data" / "mt-bench.jsonl"
    prompts = [json.loads(line)["turns"][0] for line in shared.read_text().splitlines() if line.strip()]
    rng.shuffle(prompts)
    with open(HERE / "chat.jsonl", "w", encoding="utf-8") as out:
        for prompt in prompts[:PER_WORKLOAD + 2]:
            out.write(json.dumps({"prompt": prompt}) + "\n")


if __name__ == "__main__":
    main()
