"""Write a held-out rename set as an `hsedit bench --tasks` workload (files and a task file).

    python benchmarks/heldout_tasks.py small OUT_DIR [--limit N]   # then: hsedit bench --tasks OUT_DIR/tasks.jsonl

The sets are hsedit/train/finetune/heldout_renames_{small,large}.jsonl: renames in whole real
files of held-out paths (never trained on). Each file is written under OUT_DIR by its path.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hsedit.train.finetune.dataset import HELDOUT_RENAMES, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set", choices=sorted(HELDOUT_RENAMES))
    parser.add_argument("out", type=Path)
    parser.add_argument("--limit", type=int, default=None, help="only the first N renames")
    args = parser.parse_args()
    lines = []
    for k, example in enumerate(load(HELDOUT_RENAMES[args.set])[: args.limit]):
        path = Path(f"{k:02d}") / example.path  # two renames may share a path
        (args.out / path).parent.mkdir(parents=True, exist_ok=True)
        (args.out / path).write_text(example.before)
        lines.append(json.dumps({"path": str(path), "instruction": example.instruction}))
    (args.out / "tasks.jsonl").write_text("\n".join(lines) + "\n")
    print(f"{len(lines)} tasks: {args.out / 'tasks.jsonl'}")


if __name__ == "__main__":
    main()
