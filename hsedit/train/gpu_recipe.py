"""Training both models on a lent GPU, where only torch, transformers and peft are installed
(vLLM does not travel there): what goes over, how it is trained, how the result comes back.

The device runs a copy of this working tree; each call carries at most 64 MiB in all (the tree
included) and brings back files of at most 16 MiB. So:

    here    python -m hsedit.train.gpu_recipe pack --apply-data EDITS.jsonl --dspark-data DATA.pt
            # .device/: the base GGUF in parts that fit beside the tree, the apply model's
            # examples, the DSpark drafter's token sequences (the target's features are
            # recomputed there), and a manifest with every sha256
    there   python -m hsedit.train.gpu_recipe receive K          # one call per part but the last,
                                                                  # carrying .device/part-K (the
                                                                  # machine stays warm ~30 s)
    there   python -m hsedit.train.gpu_recipe train --minutes 9  # carrying the last part: joins and
            # checks the GGUF, trains the apply adapter (LoRA, from the shipped one) and then a
            # DSpark drafter for the new target, writes them to $OUT in files under 15 MiB + SHA256SUMS
    here    python -m hsedit.train.gpu_recipe unpack FILES_AT --into DIR
            # checks the sums, joins what was split: DIR/apply-lora and DIR/dspark

Then the shipping rule as for a CPU-trained model: `hsedit finetune eval` on the held-out sets,
and only a better model replaces hsedit/models/ (the drafter with it: it records its target).
Standard library, torch, transformers and peft only: nothing here imports vLLM, typer or rich.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

CALL_LIMIT = 64 << 20  # bytes a device call carries, the working tree included
RETURN_LIMIT = 15 << 20  # each file brought back stays under the 16 MiB limit
MARGIN = 4 << 20  # for what the tree gains between packing and the calls
PACK_DIR = Path(".device")  # git-ignored: named in `carry`
RECEIVED = Path("/tmp/hsedit-device")  # where parts wait on the device between calls
MANIFEST = "manifest.json"
SUMS = "SHA256SUMS"
APPLY_SHARE = 0.6  # of the training minutes; the drafter gets the rest (after its features)


class RecipeError(Exception):
    """One line for the user: what is wrong and what to do."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_bytes(root: Path = Path(".")) -> int:
    """What a call carries of the working tree: tracked and untracked files git does not ignore."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root,
                           capture_output=True, check=True).stdout.decode().split("\0")
    return sum((root / n).stat().st_size for n in names if n and (root / n).is_file())


def split_file(path: Path, out_dir: Path, part_size: int) -> list[dict]:
    """`path` cut into parts of `part_size` bytes in out_dir: [{file, sha256}] in order."""
    parts = []
    with path.open("rb") as handle:
        for index in range(math.ceil(path.stat().st_size / part_size)):
            part = out_dir / f"{path.name}.part-{index:03d}"
            part.write_bytes(handle.read(part_size))
            parts.append({"file": part.name, "sha256": sha256(part)})
    return parts


def join_parts(parts: list[Path], target: Path, expected_sha256: str) -> Path:
    with target.open("wb") as out:
        for part in parts:
            with part.open("rb") as handle:
                shutil.copyfileobj(handle, out)
    if sha256(target) != expected_sha256:
        target.unlink()
        raise RecipeError(f"{target.name}: the joined parts do not match their sha256 (a part is damaged): pack again")
    return target


# -- here ---------------------------------------------------------------------------------
def pack(apply_data: Path, dspark_data: Path, gguf: Path, out: Path = PACK_DIR, tree: int | None = None) -> dict:
    """Fill `out` with what the device needs, the GGUF cut to fit beside the tree in each call."""
    import torch

    for given in (apply_data, dspark_data, gguf):
        if not given.is_file():
            raise RecipeError(f"not found: {given}")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.copyfile(apply_data, out / "apply.jsonl")
    # The drafter's sequences without their features (the bulk): the device recomputes them.
    saved = torch.load(dspark_data, weights_only=False)
    sequences = [(s.input_ids.tolist(), int(s.loss_mask.nonzero()[0]) if s.loss_mask.any() else len(s.input_ids), s.kind)
                 for s in saved["sequences"]]
    torch.save(sequences, out / "dspark-sequences.pt")
    fixed = sum(f.stat().st_size for f in out.iterdir())
    tree = tree_bytes() if tree is None else tree
    part_size = CALL_LIMIT - tree - fixed - MARGIN
    if part_size < (1 << 20):
        raise RecipeError(f"the working tree ({tree >> 20} MiB) leaves no room for the model in a 64 MiB call")
    manifest = {
        "gguf": {"name": gguf.name, "size": gguf.stat().st_size, "sha256": sha256(gguf),
                 "parts": split_file(gguf, out, part_size)},
        "apply_data": {"file": "apply.jsonl", "sha256": sha256(out / "apply.jsonl")},
        "dspark_sequences": {"file": "dspark-sequences.pt", "sha256": sha256(out / "dspark-sequences.pt"),
                             "count": len(sequences)},
        "packed_at": time.time(),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def calls(manifest: dict) -> list[str]:
    """The device calls, in order, and what each carries."""
    parts = [p["file"] for p in manifest["gguf"]["parts"]]
    steps = [f"carry [.device/{MANIFEST}, .device/{p}]: python -m hsedit.train.gpu_recipe receive {i}"
             for i, p in enumerate(parts[:-1])]
    steps.append(f"carry [.device/{MANIFEST}, .device/{parts[-1]}, .device/apply.jsonl, .device/dspark-sequences.pt]: "
                 "python -m hsedit.train.gpu_recipe train --minutes 9")
    return steps


def unpack(files_at: Path, into: Path) -> list[Path]:
    """Check what came back against its SHA256SUMS, join split files, lay the models out in `into`."""
    sums_file = files_at / SUMS
    if not sums_file.is_file():
        raise RecipeError(f"no {SUMS} in {files_at}: the device run did not finish (read its output)")
    expected = dict(line.split("  ", 1)[::-1] for line in sums_file.read_text().splitlines() if line)
    for name, digest in expected.items():
        if not (files_at / name).is_file() or sha256(files_at / name) != digest:
            raise RecipeError(f"{name} is missing or damaged: fetch the files again")
    joins = json.loads((files_at / "joins.json").read_text()) if (files_at / "joins.json").is_file() else {}
    into.mkdir(parents=True, exist_ok=True)
    written = []
    for name in expected:
        if name in (SUMS, "joins.json") or ".part-" in name:
            continue
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(files_at / name, target)
        written.append(target)
    for name, whole in joins.items():
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        written.append(join_parts([files_at / p for p in whole["parts"]], target, whole["sha256"]))
    return written


# -- there --------------------------------------------------------------------------------
def receive(index: int, pack_dir: Path = PACK_DIR, received: Path = RECEIVED) -> Path:
    """Keep part `index` (carried in this call) for the training call."""
    manifest = json.loads((pack_dir / MANIFEST).read_text())
    part = manifest["gguf"]["parts"][index]
    source = pack_dir / part["file"]
    if not source.is_file() or sha256(source) != part["sha256"]:
        raise RecipeError(f"{source} is missing or damaged: carry it in this call")
    received.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, received / part["file"])
    return received / part["file"]


def assemble_gguf(pack_dir: Path = PACK_DIR, received: Path = RECEIVED) -> Path:
    """The GGUF from the parts kept by earlier calls and the one carried now, checked."""
    manifest = json.loads((pack_dir / MANIFEST).read_text())["gguf"]
    parts = []
    for part in manifest["parts"]:
        here = pack_dir / part["file"] if (pack_dir / part["file"]).is_file() else received / part["file"]
        if not here.is_file():
            raise RecipeError(f"part {part['file']} is on neither side: run its `receive` call first "
                              "(within ~30 s of the last, or the machine starts fresh)")
        parts.append(here)
    (received / "gguf").mkdir(parents=True, exist_ok=True)
    return join_parts(parts, received / "gguf" / manifest["name"], manifest["sha256"])


def train(minutes: float, out: Path, pack_dir: Path = PACK_DIR, received: Path = RECEIVED,
          device: str | None = None, log=print) -> dict:
    """Both models within `minutes`: the apply adapter first (the drafter is for its target)."""
    import torch

    os.environ["HSEDIT_CACHE"] = str(received / "cache")  # the model conversions, on the device
    from hsedit.engine.provision import DEFAULT_ADAPTER, convert_gguf, merged_model
    from hsedit.train.drafter.data import target_features, target_weights
    from hsedit.train.drafter.train import DrafterTrainConfig, drafter_config, train_and_save
    from hsedit.train.finetune.train import TrainConfig
    from hsedit.train.finetune.train import train as train_adapter

    started = time.monotonic()
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    manifest = json.loads((pack_dir / MANIFEST).read_text())
    for entry in (manifest["apply_data"], manifest["dspark_sequences"]):
        if sha256(pack_dir / entry["file"]) != entry["sha256"]:
            raise RecipeError(f"{entry['file']} is damaged: pack and carry it again")
    try:
        base = convert_gguf(assemble_gguf(pack_dir, received))
    except Exception as exc:  # transformers without `gguf`, most often
        raise RecipeError(f"cannot convert the GGUF on this machine: {exc}".splitlines()[0]) from exc
    work = received / "out"
    shutil.rmtree(work, ignore_errors=True)
    adapter_dir = work / "apply-lora"  # the shipped adapter's name: the target identity follows it
    apply_minutes = max(0.1, minutes * APPLY_SHARE - (time.monotonic() - started) / 60)
    apply_report = train_adapter(TrainConfig(
        data=str(pack_dir / "apply.jsonl"), base_model=str(base), output=str(adapter_dir),
        init_adapter=str(DEFAULT_ADAPTER), learning_rate=2e-4, accumulation=8, max_tokens=6000, epochs=100.0,
        time_budget_s=apply_minutes * 60, bf16=True, device=device,
    ), log=log)
    shutil.copyfile(DEFAULT_ADAPTER / "adapter_config.json", adapter_dir / "adapter_config.json")
    target_dir = merged_model(base, adapter_dir)
    sequences = torch.load(pack_dir / "dspark-sequences.pt", weights_only=False)
    # The shipped drafter's shape: the anchor input, drafting among the 4,096 most frequent tokens.
    config = DrafterTrainConfig(output=str(work / "dspark"), device=device, anchor_feature=True, draft_vocab=4096)
    cfg = drafter_config(config, str(target_dir))
    prepared = target_features(str(target_dir), cfg, sequences, log, device=device)
    # The last minute is for the evaluation on the held-out blocks and writing the files.
    config = replace(config, minutes=max(0.1, minutes - (time.monotonic() - started) / 60 - 1.0))
    _, drafter_report = train_and_save(config, cfg, prepared, target_weights(str(target_dir)), log)
    report = {"device": device, "minutes": round((time.monotonic() - started) / 60, 2),
              "apply": {k: v for k, v in apply_report.items() if k != "config"},
              "dspark": {k: v for k, v in drafter_report.items() if k in ("steps", "blocks_total", "ablation")}}
    (work / "report.json").write_text(json.dumps(report, indent=1))
    write_returnable(work, out)
    return report


def write_returnable(work: Path, out: Path) -> None:
    """Every file of `work` into `out`, those over RETURN_LIMIT cut into parts, with SHA256SUMS
    and joins.json (how to put the cut ones back together)."""
    out.mkdir(parents=True, exist_ok=True)
    joins = {}
    for path in sorted(p for p in work.rglob("*") if p.is_file()):
        name = path.relative_to(work).as_posix()
        flat = out / name
        flat.parent.mkdir(parents=True, exist_ok=True)
        if path.stat().st_size <= RETURN_LIMIT:
            shutil.copyfile(path, flat)
            continue
        parts = split_file(path, flat.parent, RETURN_LIMIT)
        prefix = flat.parent.relative_to(out).as_posix()
        joins[name] = {"sha256": sha256(path), "parts": [f"{prefix}/{p['file']}".lstrip("./") for p in parts]}
    (out / "joins.json").write_text(json.dumps(joins, indent=1))
    lines = [f"{sha256(p)}  {p.relative_to(out).as_posix()}" for p in sorted(out.rglob("*")) if p.is_file()]
    (out / SUMS).write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hsedit.train.gpu_recipe", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("pack", help="here: fill .device/ for the device calls")
    p.add_argument("--apply-data", type=Path, required=True, help="the apply model's examples (hsedit finetune data)")
    p.add_argument("--dspark-data", type=Path, required=True, help="a `hsedit drafter train --data-cache` file")
    p.add_argument("--gguf", type=Path, default=None, help="the base GGUF (default: the embedded model's)")
    r = commands.add_parser("receive", help="there: keep a carried part for the training call")
    r.add_argument("index", type=int)
    t = commands.add_parser("train", help="there: join the model, train both, write $OUT")
    t.add_argument("--minutes", type=float, default=9.0)
    t.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    u = commands.add_parser("unpack", help="here: check and lay out what came back")
    u.add_argument("files_at", type=Path)
    u.add_argument("--into", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "pack":
            from hsedit.engine.provision import default_gguf

            manifest = pack(args.apply_data, args.dspark_data, args.gguf or default_gguf())
            print("\n".join(calls(manifest)))
        elif args.command == "receive":
            print(f"kept {receive(args.index)}")
        elif args.command == "train":
            print(json.dumps(train(args.minutes, args.out)))
        else:
            for path in unpack(args.files_at, args.into):
                print(path)
    except RecipeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
