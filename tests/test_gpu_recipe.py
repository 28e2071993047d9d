"""The GPU training recipe (hsedit/train/gpu_recipe.py), run here on the CPU: the model cut to
fit the calls, carried part by part, joined and checked, both models trained where vLLM,
typer and rich do not exist, and the results brought back in files under the limit."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hsedit.engine.provision import default_gguf
from hsedit.train import gpu_recipe
from hsedit.train.drafter.data import Sequence_
from hsedit.train.finetune.dataset import HELDOUT


def test_a_cut_file_joins_back_and_a_damaged_part_is_named(tmp_path):
    data = bytes(range(256)) * 1000
    (tmp_path / "model.gguf").write_bytes(data)
    (tmp_path / "parts").mkdir()
    parts = gpu_recipe.split_file(tmp_path / "model.gguf", tmp_path / "parts", 100_000)
    assert len(parts) == 3
    paths = [tmp_path / "parts" / p["file"] for p in parts]
    joined = gpu_recipe.join_parts(paths, tmp_path / "joined", gpu_recipe.sha256(tmp_path / "model.gguf"))
    assert joined.read_bytes() == data
    paths[1].write_bytes(b"x" + paths[1].read_bytes()[1:])
    with pytest.raises(gpu_recipe.RecipeError, match="damaged"):
        gpu_recipe.join_parts(paths, tmp_path / "joined", gpu_recipe.sha256(tmp_path / "model.gguf"))
    assert not (tmp_path / "joined").exists()


def test_what_comes_back_is_under_the_limit_summed_and_rejoined(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_recipe, "RETURN_LIMIT", 1000)
    work = tmp_path / "work"
    (work / "apply-lora").mkdir(parents=True)
    big = bytes(range(256)) * 20
    (work / "apply-lora" / "adapter_model.safetensors").write_bytes(big)
    (work / "report.json").write_text("{}")
    gpu_recipe.write_returnable(work, tmp_path / "out")
    returned = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert all(p.stat().st_size <= 1000 or p.name in ("SHA256SUMS", "joins.json") for p in returned)
    written = gpu_recipe.unpack(tmp_path / "out", tmp_path / "into")
    assert (tmp_path / "into" / "apply-lora" / "adapter_model.safetensors").read_bytes() == big
    assert {p.relative_to(tmp_path / "into").as_posix() for p in written} == {"report.json", "apply-lora/adapter_model.safetensors"}
    part = next(p for p in returned if ".part-" in p.name)
    part.write_bytes(b"?" + part.read_bytes()[1:])
    with pytest.raises(gpu_recipe.RecipeError, match="damaged"):
        gpu_recipe.unpack(tmp_path / "out", tmp_path / "again")


BLOCK_IMPORTS = "import sys\nfor name in ('vllm', 'typer', 'rich'):\n    sys.modules[name] = None\n"


def test_the_recipe_trains_both_models_without_vllm_and_they_come_back(tmp_path, monkeypatch):
    """pack (3 parts) -> receive 0, receive 1 -> train (with the last part) -> unpack: the
    adapter and the drafter load, the drafter records the new adapter's target."""
    from transformers import AutoTokenizer

    from hsedit.drafting.dspark import load_drafter
    from hsedit.engine.provision import convert_gguf, merged_model_dir

    gguf = default_gguf()
    examples = [json.loads(line) for line in HELDOUT.read_text().splitlines()[:3]]
    (tmp_path / "edits.jsonl").write_text("".join(json.dumps({**e, "split": "train"}) + "\n" for e in examples))
    tokenizer = AutoTokenizer.from_pretrained(convert_gguf(gguf))
    sequences = []
    for text in ("def add(a, b):\n    return a + b\n" * 3, "The answer is forty-two, as it was before.\n" * 4):
        ids = torch.tensor(tokenizer.encode(text))
        mask = torch.zeros(len(ids), dtype=torch.bool)
        mask[len(ids) // 3 :] = True
        sequences.append(Sequence_(ids, mask, torch.empty(0), torch.empty(0), "chat"))
    torch.save({"key": "test", "sequences": sequences}, tmp_path / "dspark-data.pt")

    # Here: a tree so big that the model needs three calls.
    monkeypatch.chdir(tmp_path)
    tree = gpu_recipe.CALL_LIMIT - gpu_recipe.MARGIN - (gguf.stat().st_size // 3 + (1 << 20)) - (1 << 20)
    manifest = gpu_recipe.pack(tmp_path / "edits.jsonl", tmp_path / "dspark-data.pt", gguf, tree=tree)
    assert len(manifest["gguf"]["parts"]) == 3 and len(gpu_recipe.calls(manifest)) == 3

    # There: each call sees only what it carries (the manifest, its part, the last one the data).
    repo = Path(__file__).resolve().parent.parent
    received = tmp_path / "received"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(repo)}
    for index, part in enumerate(manifest["gguf"]["parts"]):
        call = tmp_path / f"call-{index}"
        (call / ".device").mkdir(parents=True)
        carried = [gpu_recipe.MANIFEST, part["file"]]
        if index == 2:
            carried += ["apply.jsonl", "dspark-sequences.pt"]
        for name in carried:
            (call / ".device" / name).write_bytes((tmp_path / ".device" / name).read_bytes())
        if index < 2:
            code = BLOCK_IMPORTS + (
                "import hsedit.train.gpu_recipe as r\nfrom pathlib import Path\n"
                f"print(r.receive({index}, received=Path({str(received)!r})))\n")
            done = subprocess.run([sys.executable, "-c", code], cwd=call, env=env, capture_output=True, text=True)
        else:
            code = BLOCK_IMPORTS + (
                "import hsedit.train.gpu_recipe as r, json\nfrom pathlib import Path\n"
                f"print(json.dumps(r.train(0.6, Path({str(tmp_path / 'OUT')!r}), received=Path({str(received)!r}))))\n")
            done = subprocess.run([sys.executable, "-c", code], cwd=call, env=env, capture_output=True,
                                  text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["apply"]["tokens_seen"] > 0 and report["dspark"]["steps"] > 0
    returned = [p for p in (tmp_path / "OUT").rglob("*") if p.is_file()]
    assert all(p.stat().st_size <= gpu_recipe.RETURN_LIMIT for p in returned)

    # Here again: checked, rejoined, loadable.
    gpu_recipe.unpack(tmp_path / "OUT", tmp_path / "models")
    adapter = tmp_path / "models" / "apply-lora"
    assert (adapter / "adapter_config.json").is_file() and (adapter / "adapter_model.safetensors").stat().st_size > gpu_recipe.RETURN_LIMIT
    drafter = load_drafter(tmp_path / "models" / "dspark")
    assert drafter.config.anchor_feature
    assert drafter.config.target == merged_model_dir(convert_gguf(gguf), adapter).name
