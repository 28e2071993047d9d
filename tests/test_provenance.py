"""Third-party benchmark data says where it came from, and what its generator makes is what is committed."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load_generator():
    spec = importlib.util.spec_from_file_location("bench_make_workloads", BENCHMARKS / "make_workloads.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # benchmarks/ ships in the wheel as it is
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes
    return module


mw = _load_generator()


def _tables(markdown: str) -> list[list[dict[str, str]]]:
    """Each Markdown table as rows keyed by its header cells."""
    tables, header, rows = [], None, []
    for line in [*markdown.splitlines(), ""]:
        if not line.startswith("|"):
            if header:
                tables.append(rows)
            header, rows = None, []
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("-: "):
            rows.append(dict(zip(header, cells)))
    return tables


def _rows_by_file(table: list[dict[str, str]], column: str) -> dict[str, dict[str, str]]:
    return {name: row for row in table for name in re.findall(r"`([^`]+)`", row[column])}


def _check_source_row(row: dict[str, str], source) -> None:
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", row["upstream repository"]), row
    assert row["tag or commit"], row
    assert row["licence"], row
    text = re.fullmatch(r"`(licenses/[\w.-]+)`.*", row["licence text"])
    assert text and (BENCHMARKS / text.group(1)).stat().st_size > 500, row
    assert source.distribution in row["distribution and version"], row
    assert any(version in row["distribution and version"] for version in source.versions), row
    assert source.path in row["path in the distribution"], row
    lines = "whole" if source.first is None else f"{source.first}-{source.last}"
    assert row["lines"] == lines, row


def test_every_benchmark_file_has_its_source_repository_tag_and_licence():
    tables = _tables((BENCHMARKS / "PROVENANCE.md").read_text(encoding="utf-8"))
    rows = _rows_by_file(tables[0], "file")
    files = BENCHMARKS / "files"
    committed = sorted(path.relative_to(files).as_posix() for path in files.rglob("*.py"))
    assert committed == sorted(mw.EXCERPTS), "benchmarks/files and make_workloads.EXCERPTS differ"
    assert sorted(rows) == committed, "benchmarks/files and PROVENANCE.md's table differ"
    for name in committed:
        _check_source_row(rows[name], mw.EXCERPTS[name])


def test_the_heavy_updates_donors_have_their_source_recorded():
    tables = _tables((BENCHMARKS / "PROVENANCE.md").read_text(encoding="utf-8"))
    donors = _rows_by_file(next(t for t in tables if "update of" in t[0]), "update of")
    assert sorted(donors) == sorted(mw.HEAVY_DONORS)
    for name, donor in mw.HEAVY_DONORS.items():
        if isinstance(donor, str):
            assert f"files/{donor}" in donors[name]["path in the distribution"]
        else:
            _check_source_row(donors[name], donor)


def test_snippet_workload_is_rebuilt_from_the_repository_alone():
    committed = (BENCHMARKS / "snippet.jsonl").read_text(encoding="utf-8")
    assert mw.snippet_jsonl(BENCHMARKS / "files") == committed, "an edit generator changed how it draws"


def test_mixed_workload_is_light_and_chat_alternating():
    light, chat, mixed = ((BENCHMARKS / f"{name}.jsonl").read_text(encoding="utf-8")
                          for name in ("light", "chat", "mixed"))  # fmt: skip
    assert mw.mixed_jsonl(light, chat) == mixed


def test_heavy_workload_is_rebuilt_from_the_files_and_the_recorded_donors():
    try:
        rebuilt = mw.heavy_jsonl(BENCHMARKS / "files")
    except mw.Unavailable as why:
        pytest.skip(str(why))
    assert rebuilt == (BENCHMARKS / "heavy.jsonl").read_text(encoding="utf-8")


def test_chat_workload_is_rebuilt_from_the_recorded_mt_bench_lines():
    try:
        rebuilt = mw.chat_jsonl()
    except mw.Unavailable as why:
        pytest.skip(str(why))
    assert rebuilt == (BENCHMARKS / "chat.jsonl").read_text(encoding="utf-8")


def test_excerpts_are_the_recorded_lines_of_the_installed_sources():
    checked = 0
    for name, source in mw.EXCERPTS.items():
        try:
            text = mw.installed_text(source)
        except mw.Unavailable:
            continue
        assert text == (BENCHMARKS / "files" / name).read_text(encoding="utf-8"), name
        checked += 1
    if not checked:
        pytest.skip("none of the recorded versions is installed")


def _written(root: Path) -> dict[str, tuple[str, int]]:
    """Content and modification time of every file: rewriting the same bytes shows too."""
    return {p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}  # fmt: skip


def test_rebuild_writes_only_into_its_folder_and_matches_what_is_committed(tmp_path):
    before = _written(BENCHMARKS)
    outcome = mw.rebuild(tmp_path)
    assert _written(BENCHMARKS) == before
    assert {"snippet.jsonl", "mixed.jsonl"} <= {path for path, said in outcome.items() if said == "same"}
    assert not [path for path, said in outcome.items() if said == "differs"], outcome


def test_every_held_out_source_path_has_its_distribution_recorded():
    finetune = BENCHMARKS.parent / "hsedit" / "train" / "finetune"
    recorded = json.loads((finetune / "heldout_sources.json").read_text(encoding="utf-8"))
    sets = sorted(path.name for path in finetune.glob("heldout*.jsonl"))
    assert sorted(recorded["sets"]) == sets, "a held-out set without its generator in record_sources.SETS"
    lines = [line for name in sets for line in (finetune / name).read_text(encoding="utf-8").splitlines()]
    paths = {json.loads(line)["path"] for line in lines if line.strip()}
    assert sorted(recorded["sources"]) == sorted(paths), "run hsedit/train/finetune/record_sources.py again"
    for path, entry in recorded["sources"].items():
        assert entry["distribution"] and entry["version"] and entry["match"] in recorded["match"], path
