"""Record which installed files the held-out sets were cut from, and whether they still hold them.

    python -m hsedit.train.finetune.record_sources > hsedit/train/finetune/heldout_sources.json

The held-out sets were generated from this machine's Python install (dataset.source_roots: the
standard library and site-packages), which changes as packages are installed or upgraded, so a set
cannot always be generated again. This names, for every source path the sets use, the distribution
that installs it (from the dist-info RECORD files) and checks the examples' text against the file
installed now. It only reads; it needs nothing but the standard library.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import sys
import sysconfig
from collections import Counter
from importlib import metadata
from pathlib import Path
from platform import python_version

HERE = Path(__file__).resolve().parent
# Each set's generator as dataset.py names it, and whether the install of 2026-12-06 made the set again.
SETS = {
    "heldout.jsonl": "not named in dataset.py (chunks of eval-split files)",
    "heldout_files.jsonl": "dataset.heldout_whole_files(seed=0); not made again on 2026-12-06",
    "heldout_regions.jsonl": "dataset.generate_regions(seed=0, limit_per_kind=40, split='eval'); not tried",
    "heldout_renames_small.jsonl": "dataset.heldout_renames(SMALL_FILES, 18); made again byte for byte",
    "heldout_renames_large.jsonl": "dataset.heldout_renames(LARGE_FILES, 16); not made again on 2026-12-06",
}
# How an installed file holds an example, best first; a path gets its examples' worst.
MATCHES = {
    "whole": "the example's before or after text is the whole installed file (the same sha256)",
    "excerpt": "the example's before or after text is a run of the installed file",
    "lines": "every line of the example's before or after text is a line of the installed file",
    "differs": "the installed file holds neither text: it changed since the set was made",
    "missing": "no installed file at this path",
}


def match(example: dict, text: str | None) -> str:
    """How the installed `text` holds the example: a key of MATCHES."""
    if text is None:
        return "missing"
    sides = (example["before"], example["after"])
    if text in sides:
        return "whole"
    if any(side in text for side in sides):
        return "excerpt"
    lines = set(text.splitlines())
    if any(set(side.splitlines()) <= lines for side in sides):
        return "lines"
    return "differs"


def owners(purelib: Path) -> dict[str, tuple[str, str]]:
    """Path relative to site-packages -> (distribution, version), from each RECORD."""
    found = {}
    for dist in metadata.distributions(path=[str(purelib)]):
        for file in dist.files or ():
            found[file.as_posix()] = (dist.metadata["Name"], dist.version)
    return found


def record() -> dict:
    paths = sysconfig.get_paths()
    stdlib, purelib = Path(paths["stdlib"]), Path(paths["purelib"])
    by_path: dict[str, list[tuple[str, dict]]] = {}
    for name in SETS:
        for line in (HERE / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                example = json.loads(line)
                by_path.setdefault(example["path"], []).append((name, example))
    installed_by = owners(purelib)
    sources = {}
    for path, examples in sorted(by_path.items()):
        entry: dict = {"examples": dict(sorted(Counter(name for name, _ in examples).items()))}
        for root, owner in ((stdlib, ("python-stdlib", python_version())), (purelib, installed_by.get(path))):
            if (root / path).is_file():
                data = (root / path).read_bytes()
                entry["distribution"], entry["version"] = owner or ("not in any RECORD", None)
                entry["installed_sha256"] = hashlib.sha256(data).hexdigest()
                text = data.decode("utf-8")
                break
        else:
            entry["distribution"], entry["version"], text = None, None, None
        found = [match(example, text) for _, example in examples]
        entry["match"] = max(found, key=list(MATCHES).index)
        files = [example for _, example in examples if example.get("scope") == "file"]
        if files:  # a whole file, or its top: the same sha256 as installed_sha256 when the file is unchanged
            befores = {hashlib.sha256(example["before"].encode()).hexdigest() for example in files}
            entry["file_scope_before_sha256"] = sorted(befores)
        sources[path] = entry
    return {
        "about": "Where the held-out sets' examples come from: written by"
                 " python -m hsedit.train.finetune.record_sources (hsedit/train/finetune/record_sources.py),"
                 " which reads the install it runs in and the sets.",
        "checked": datetime.date.today().isoformat(),
        "python": python_version(),
        "roots": ["stdlib (python-stdlib)", "site-packages (the distribution whose RECORD lists the path)"],
        "sets": SETS,
        "match": MATCHES,
        "sources": sources,
    }  # fmt: skip


def dumps(recorded: dict) -> str:
    """Indented, but one line per source: a changed file shows as one changed line."""
    head = json.dumps({**recorded, "sources": {}}, indent=1, ensure_ascii=False)[: -len("{}\n}")]
    rows = [f"  {json.dumps(path)}: {json.dumps(entry)}" for path, entry in recorded["sources"].items()]
    return head + "{\n" + ",\n".join(rows) + "\n }\n}\n"


if __name__ == "__main__":
    sys.stdout.write(dumps(record()))
