"""`hsedit bench`: workloads, batching, the report and the plot."""

import json

import pytest
import torch
from typer.testing import CliRunner

from hsedit.bench import (
    BUILTIN_WORKLOADS,
    BenchTask,
    groups,
    all_accepted_limit,
    builtin_dir,
    builtin_workloads,
    check_method,
    compiled,
    dtype_of,
    max_draft_of,
    method_name,
    plain_for,
    run_bench,
)
from hsedit.cli import app
from hsedit.edit.diff import edit_distance
from hsedit.errors import UsageError

BENCHMARKS = builtin_dir()

runner = CliRunner()


def test_groups_fill_every_batch_and_keep_task_order():
    tasks = [BenchTask(str(i), chat=str(i)) for i in range(3)]
    assert [[t.name for t in g] for g in groups(tasks, 1)] == [["0"], ["1"], ["2"]]
    assert [[t.name for t in g] for g in groups(tasks, 2)] == [["0", "1"], ["2", "0"]]
    assert [[t.name for t in g] for g in groups(tasks, 4)] == [["0", "1", "2", "0"]]


def test_the_builtin_workloads_load_from_the_repository():
    loaded = {w.name: w for w in builtin_workloads()}
    assert set(loaded) == set(BUILTIN_WORKLOADS)
    assert all(len(w.tasks) >= 4 for w in loaded.values())
    assert all(t.chat for t in loaded["chat"].tasks)
    edits = loaded["light"].tasks + loaded["heavy"].tasks + loaded["snippet"].tasks
    assert all(t.job and not t.job.instruction for t in edits)  # lazy-snippet merges
    # mixed: light edits and chat prompts alternating, so any batch of 4 or 16 holds half of each
    mixed = loaded["mixed"].tasks
    assert [bool(t.chat) for t in mixed] == [False, True] * (len(mixed) // 2)
    assert {t.name for t in mixed if t.job} == {t.name for t in loaded["light"].tasks}


def test_edit_distance():
    assert edit_distance("a = 1\n", "a = 1\n") == 0.0
    assert edit_distance("x = 1", "y = 2") == pytest.approx(2 / 3)  # 'x', '1' changed of 'x = 1'
    assert edit_distance("", "") == 0.0 and edit_distance("a", "") == 1.0


def test_bad_batch_sizes_and_workloads_are_usage_errors():
    assert runner.invoke(app, ["bench", "--batch-size", "0"]).exit_code == 2
    assert runner.invoke(app, ["bench", "--batch-size", "two"]).exit_code == 2
    assert runner.invoke(app, ["bench", "--workloads", "huge"]).exit_code == 2
    assert runner.invoke(app, ["bench", "--drafters", "magic"]).exit_code == 2
    assert runner.invoke(app, ["bench", "--drafters", "hybrid@x"]).exit_code == 2
    assert runner.invoke(app, ["bench", "--drafters", "hybrid@0"]).exit_code == 2


def test_a_method_names_its_drafter_and_maximum_draft():
    assert check_method("hybrid@15") == "hybrid@15"
    assert check_method("ngram@15") == "copy@15"  # the copy drafter's old name
    assert (method_name("vllm-ngram@63"), max_draft_of("vllm-ngram@63")) == ("vllm-ngram", 63)
    assert (method_name("hybrid"), max_draft_of("hybrid")) == ("hybrid", None)


def test_a_method_names_its_engine_variant_and_is_judged_within_it():
    assert check_method("hybrid@31:compiled") == "hybrid@31:compiled"
    assert check_method("hybrid:compiled+float32") == "hybrid:float32+compiled"  # one spelling
    assert check_method("hybrid:auto") == "hybrid"
    for method, dtype, mode, plain in (("hybrid", "auto", False, "none"), ("hybrid:float32", "float32", False, "none:float32"),
                                       ("copy@15:compiled", "auto", True, "none:compiled"),
                                       ("hybrid:bfloat16+compiled", "bfloat16", True, "none:bfloat16+compiled")):
        assert (dtype_of(method), compiled(method), plain_for(method)) == (dtype, mode, plain)
    for bad in ("hybrid:compiled+compiled", "hybrid:float32+bfloat16", "hybrid:fast"):
        with pytest.raises(UsageError):
            check_method(bad)


def test_the_all_accepted_limit_is_one_prefill_then_full_chains():
    from hsedit.engine.costs import CostTable

    table = CostTable.from_samples({1: 0.010, 16: 0.020, 64: 0.050})
    # One request: 64 answer tokens 16 at a time (the first comes with the prefill): 4 steps of 16.
    assert all_accepted_limit(table, [64], 16) == pytest.approx(4 * 0.020)
    # Two requests: 2 steps with both (32 tokens each), then 2 with the longer alone.
    assert all_accepted_limit(table, [33, 64], 16) == pytest.approx(2 * table.step_time(32) + 2 * 0.020)


@pytest.mark.engine
def test_a_small_bench_runs_batches_checks_exactness_and_plots(tmp_path, plain_engine, copy_engine):
    light = builtin_workloads(["light"])[0]
    small = type(light)("light", light.tasks[:2])
    report = run_bench([small], ["none", "copy"], batch_sizes=[1, 2])
    assert report.exact
    rows = {(c.batch_size, c.method): c for c in report.cells}
    assert set(rows) == {(1, "none"), (1, "copy"), (2, "none"), (2, "copy")}
    assert rows[(2, "none")].tokens == rows[(1, "none")].tokens  # same two tasks, run together
    assert rows[(1, "copy")].accepted["copy"] > 0
    assert report.ratio(rows[(1, "copy")], "none") > 0
    assert report.edit_distance["light"] is not None and 0.0 <= report.edit_distance["light"] < 1.0
    positions = rows[(1, "copy")].acceptance_by_position()["copy"]
    assert positions and all(0.0 <= p <= 1.0 for p in positions)

    from hsedit.plot import plot_report

    png = plot_report(report, tmp_path / "bench.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(json.dumps(report.as_dict()))
    assert data["exact"] and len(data["rows"]) == 4
    # token-identical outputs, the same digest; another batch size is another composition
    assert rows[(1, "copy")].output_sha256 == rows[(1, "none")].output_sha256
    assert rows[(2, "copy")].output_sha256 == rows[(2, "none")].output_sha256
    for cell in report.cells:
        assert cell.limit_seconds > 0 and cell.limit_share > 0 and 0 < cell.prefill_share < 1
    plain, copy = rows[(1, "none")], rows[(1, "copy")]
    assert copy.limit_seconds < plain.limit_seconds  # a 15-token chain's limit is below one token a step's
    for cell in report.cells:  # one round: its figures are the cell's
        assert cell.round_tokens == [cell.tokens] and cell.round_seconds == pytest.approx([cell.seconds])

    # sampled: every request seeded by its task, drafted, and the same answers as plain decoding's
    sampled = run_bench([small], ["none", "copy"], batch_sizes=[1], temperature=0.8)
    assert sampled.exact and sampled.as_dict()["temperature"] == 0.8
    cells = {c.method: c for c in sampled.cells}
    assert cells["copy"].identical == cells["copy"].outputs == 2 and cells["copy"].accepted["copy"] > 0
    assert cells["copy"].output_sha256 != rows[(1, "copy")].output_sha256  # not the greedy answers


@pytest.mark.engine
def test_vllm_ngram_at_two_settings_runs_side_by_side_in_child_processes(plain_engine):
    """One vLLM built-in engine per process is all vLLM 0.32 on CPU allows once numba loads:
    each setting runs in its own process, in the same interleaved run, exact against plain."""
    light = builtin_workloads(["light"])[0]
    small = type(light)("light", light.tasks[:1])
    report = run_bench([small], ["none", "vllm-ngram", "vllm-ngram@31"], batch_sizes=[1])
    assert report.exact, [c.mismatches for c in report.cells]
    rows = {c.method: c for c in report.cells}
    assert not any(c.skipped for c in rows.values()), [c.skipped for c in rows.values()]
    assert rows["vllm-ngram"].accepted["vllm-ngram"] > 0 and rows["vllm-ngram@31"].accepted["vllm-ngram"] > 0
    assert report.ratio_to_best(rows["vllm-ngram@31"], "vllm-ngram") <= 1.0


class DivergingEngine:
    """A real engine behind a broken drafter: the first answer of every batch comes back with
    its last token changed, as a drafter that let a wrong token through would leave it."""

    def __init__(self, engine):
        self._engine = engine

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def generate(self, requests):
        results = self._engine.generate(requests)
        first = results[0]
        first.token_ids = first.token_ids[:-1] + [first.token_ids[-1] + 1]
        return results


@pytest.mark.engine
def test_an_output_that_differs_from_plain_decoding_fails_the_bench(tmp_path, monkeypatch, plain_engine, copy_engine):
    import hsedit.bench

    light = builtin_workloads(["light"])[0]
    small = type(light)("light", light.tasks[:1])
    engines = {"none": plain_engine, "copy": DivergingEngine(copy_engine)}
    report = run_bench([small], ["none", "copy"], batch_sizes=[1], engine_for=engines.__getitem__)
    rows = {c.method: c for c in report.cells}
    assert not report.exact and report.as_dict()["exact"] is False
    assert rows["copy"].mismatches == [small.tasks[0].name] and rows["none"].mismatches == []
    assert rows["copy"].output_sha256 != rows["none"].output_sha256
    # The command says which method, batch and workload differed, and exits 1.
    task_file = tmp_path / "one.jsonl"
    task = json.loads((BENCHMARKS / "light.jsonl").read_text().splitlines()[0])
    (tmp_path / task["path"]).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / task["path"]).write_text((BENCHMARKS / task["path"]).read_text())
    task_file.write_text(json.dumps(task) + "\n")
    monkeypatch.setattr(hsedit.bench, "engine_for_method", lambda method, model=None, dspark=None: engines[method])
    result = runner.invoke(app, ["bench", "--tasks", str(task_file), "--drafters", "copy", "--batch-size", "1"])
    assert result.exit_code == 1, result.output
    assert "outputs differ from plain decoding: copy at batch 1 on one" in " ".join(result.output.split())


def test_acceptance_by_position_covers_chains_of_any_length():
    """A 31-token copy chain kept whole, then one cut after 20: positions 1-31 are all counted
    (a fixed-size table once dropped everything past the 16th)."""
    from hsedit.bench.report import Cell
    from hsedit.bench.run import _count
    from hsedit.drafting.chain import StepRecord
    from hsedit.engine.requests import Generation
    from hsedit.engine.stats import RequestStats

    steps = [StepRecord("copy", 31, 31, tuple(range(32))), StepRecord("copy", 31, 20, tuple(range(21)))]
    cell = Cell("light", 1, "hybrid")
    _count(cell, Generation(stats=RequestStats(steps=steps)))
    by_position = cell.acceptance_by_position()["copy"]
    assert len(by_position) == 31
    assert by_position[:20] == [1.0] * 20 and by_position[20] == 0.5 and by_position[21:] == [1.0] * 10
    assert cell.tokens == 32 + 21 and cell.acceptance() == {"copy": (51, 62)}


class _ScoredEngine:
    """The plain engine's scoring of an answer (`Engine.greedy_gaps`), given: the judging is the
    logic under test here; tests/test_dtype.py scores real answers with the real engine."""

    def __init__(self, gaps):
        self.gaps, self.tokenizer = gaps, None

    def token_ids(self, prompt):
        return list(prompt)

    def greedy_gaps(self, prompt_ids, answer_ids):
        return self.gaps[tuple(answer_ids)]


def test_outputs_are_identical_greedy_within_tolerance_or_changed():
    from hsedit.bench.judge import Output, judge_exactness
    from hsedit.bench.report import Cell
    from hsedit.engine.requests import Generation, GenerationRequest

    def output(name, ids):
        return Output(BenchTask(name, chat=name), GenerationRequest([1, 2, 3]), Generation(token_ids=list(ids)))

    plain = [output("a", [5, 6]), output("b", [7, 8]), output("c", [9, 9])]
    drafted = [output("a", [5, 6]), output("b", [7, 4]), output("c", [9, 3])]
    cell = Cell("chat", 1, "hybrid")
    scores = {(7, 4): [0.0, 0.2], (9, 3): [0.0, 6.5], (7, 8): [0.125, 0.0], (9, 9): [0.0, 0.0]}
    judge_exactness(cell, drafted, plain, _ScoredEngine(scores), tolerance=0.25)
    assert (cell.outputs, cell.identical, cell.near_ties, cell.mismatches) == (3, 1, ["b"], ["c"])
    assert cell.worst_gap == 6.5
    assert cell.plain_worst_gap == 0.125  # plain decoding's own answers where they differ, scored alike
    # sampled outputs have no greedy near ties: each difference from plain decoding, same seed, is listed
    sampled = Cell("chat", 1, "hybrid")
    judge_exactness(sampled, drafted, plain, _ScoredEngine({}), tolerance=None)
    assert (sampled.identical, sampled.near_ties, sampled.mismatches, sampled.sampled_differs) == (1, [], [], ["b", "c"])


def test_a_gap_exactly_at_the_tolerance_is_within_it():
    """bf16 logits exactly 0.5 apart (the bf16 tolerance) read a hair above 0.5 as float32
    log-probabilities; the judge takes that as 0.5, and a gap one bf16 step further as outside."""
    from hsedit.engine.engine import GREEDY_TOLERANCE, within_greedy_tolerance

    tolerance = GREEDY_TOLERANCE["bfloat16"]
    logits = torch.tensor([10.0, 10.0 - tolerance, 9.0], dtype=torch.bfloat16)  # [vocab]
    logprobs = logits.float().log_softmax(-1)
    gap = float(logprobs[0] - logprobs[1])
    assert gap > tolerance  # 0.50000006
    assert within_greedy_tolerance(gap, tolerance)
    one_step_further = torch.tensor([10.0, 10.0 - tolerance - 0.0625, 9.0], dtype=torch.bfloat16)
    further = one_step_further.float().log_softmax(-1)
    assert not within_greedy_tolerance(float(further[0] - further[1]), tolerance)


def test_a_hybrid_is_paired_with_its_better_part_round_by_round():
    """The better part is the faster of copy and DSpark over the run; each round's hybrid is set
    against that part's same round, and the 95% interval of those ratios says whether the hybrid
    trails beyond the rounds' noise."""
    from hsedit.bench.report import BenchReport, Cell, PairedRatio

    def cell(method, tokens, seconds):
        c = Cell("chat", 4, method, tokens=sum(tokens), seconds=sum(seconds))
        c.round_tokens, c.round_seconds = list(tokens), list(seconds)
        return c

    copy = cell("copy", [100, 100, 100], [1.0, 1.25, 1.0])  # the better part: 85.7 tok/s
    dspark = cell("dspark", [100, 100, 100], [2.0, 2.0, 2.0])
    hybrid = cell("hybrid", [100, 100, 100], [1.1, 1.35, 1.1])  # behind copy in every round
    report = BenchReport([copy, dspark, hybrid, cell("none", [10], [1.0])], {}, {}, {}, {}, [4], 3, [])
    assert report.best_single(hybrid) is copy
    paired = report.ratio_to_best_single(hybrid)
    assert paired.whole == pytest.approx(300 / 3.55 / (300 / 3.25))
    assert paired.rounds == pytest.approx([1.0 / 1.1, 1.25 / 1.35, 1.0 / 1.1])
    low, high = paired.interval
    assert low < paired.whole < high < 1.0 and paired.trails
    assert report.ratio_to_best_single(copy) is None  # only a hybrid has parts
    # one round cannot tell; rounds either side of 1.0 do not trail
    assert PairedRatio(0.9, [0.9]).trails is None and PairedRatio(0.9, [0.9]).interval is None
    assert PairedRatio(0.98, [0.9, 1.08]).trails is False
    row = next(r for r in report.as_dict()["rows"] if r["method"] == "hybrid")
    assert row["ratio_to_best_single"]["trails"] is True and len(row["ratio_to_best_single"]["rounds"]) == 3
    assert row["ratio_to_best_single"]["same_answers"] is True
    # answers of another length in a round (a near tie parted the paths): different work, no verdict
    longer = cell("hybrid", [100, 130, 100], [1.1, 1.75, 1.1])
    other = BenchReport([copy, dspark, longer], {}, {}, {}, {}, [4], 3, []).ratio_to_best_single(longer)
    assert other.interval[1] < 1.0 and not other.same_answers and other.trails is None


def test_the_tolerance_grows_to_the_noise_plain_decoding_shows_in_the_run():
    """A margin shift is measured against every runner-up both computations list; the tolerance
    is the dtype's rounding bound, or the largest shift plain decoding showed where larger."""
    from hsedit.bench.judge import Noise, margin_shifts, tolerance_for
    from hsedit.engine.engine import GREEDY_TOLERANCE

    answer = [5, 6]
    stepped = [{5: -0.1, 7: -2.5, 8: -3.0}, {6: -0.5, 9: -1.0}]
    scored = [{5: -0.2, 7: -3.0, 9: -4.0}, {6: -0.75, 2: -0.7}]  # position 2 shares no runner-up
    shifts = margin_shifts(answer, stepped, scored)
    assert shifts == pytest.approx([0.4, 0.0])  # 2.4 apart when stepped, 2.8 when scored
    bound = GREEDY_TOLERANCE["bfloat16"]
    noise = Noise()
    noise.add(shifts, bound)
    noise.add([0.875], bound)
    assert (noise.positions, noise.largest_shift, noise.over_bound) == (3, 0.875, 1)
    assert tolerance_for("bfloat16", noise) == 0.875
    assert tolerance_for("bfloat16", Noise(1, 0.125)) == bound == tolerance_for("bfloat16")
