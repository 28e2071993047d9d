"""The bench's results: a `Cell` per workload, batch size and method, summed over its runs, and
the `BenchReport` of one run with its ratios (always against methods of the same run)."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hsedit.bench.methods import method_name, variant_of
from hsedit.drafting.chain import COPY, DSPARK, HYBRID, NO_DRAFTER, VLLM_NGRAM
from hsedit.engine.provision import DrafterTarget

if TYPE_CHECKING:
    from hsedit.bench.judge import Noise


@dataclass
class Cell:
    """One method on one workload at one batch size, summed over its runs."""

    workload: str
    batch_size: int
    method: str
    scope: str = "file"
    runs: int = 0  # times the whole workload ran (its groups, once each)
    file_tokens: int = 0  # tokens of the files its edits rewrote, summed over runs
    tokens: int = 0
    seconds: float = 0.0
    # the same per round ([repeats]): the rounds pair with other methods' for a ratio's spread
    round_tokens: list[int] = field(default_factory=list)
    round_seconds: list[float] = field(default_factory=list)
    request_steps: int = 0  # engine steps summed over requests
    drafted: Counter = field(default_factory=Counter)  # per drafter
    accepted: Counter = field(default_factory=Counter)
    proposer_seconds: float = 0.0
    proposer_steps: int = 0
    model_drafted: int = 0  # request-steps the DSpark pass ran for
    model_skipped: int = 0  # request-steps the hybrid's cost rule skipped it
    # per drafter: [times slot k was verified, times it was accepted], k = 1, 2, ...
    positions: dict = field(default_factory=dict)
    # Exactness against plain decoding of the same dtype and batch (`judge.py`): outputs compared,
    # those token-identical, those that differ but are greedy within the dtype's tolerance (near
    # ties), and those outside it (`mismatches`: a drafter that changed the answer).
    outputs: int = 0
    identical: int = 0
    near_ties: list[str] = field(default_factory=list)
    worst_gap: float = 0.0  # nats below the top choice, over the outputs that differ
    plain_worst_gap: float = 0.0  # the same for plain decoding's own answers to those tasks
    mismatches: list[str] = field(default_factory=list)
    sampled_differs: list[str] = field(default_factory=list)  # sampled outputs not identical (judge.py)
    skipped: str | None = None  # why the method could not run
    # sha256 of every output's token ids in task order (the first round): equal digests across
    # two runs or two versions of hsedit mean token-identical outputs.
    output_sha256: str | None = None
    # The all-accepted limit of the same groups (prefill + answers in maximal chains), and the
    # time until every group's first token (prefill, mostly), both summed over runs.
    limit_seconds: float = 0.0
    prefill_seconds: float = 0.0
    processed_tokens: int = 0  # prompt (less the prefix cache's) + answer tokens the target ran, whatever the drafts
    machine_seconds: float = 0.0  # those tokens at the machine's measured peak (set by run_bench)

    @property
    def machine_share(self) -> float | None:
        """Share of the hardware's limit reached: the target's FLOPs at the machine's peak / actual time."""
        return self.machine_seconds / self.seconds if self.seconds and self.machine_seconds else None

    @property
    def seconds_per_run(self) -> float | None:
        return self.seconds / self.runs if self.runs else None

    @property
    def of_file(self) -> float | None:
        """Tokens generated over the tokens of the files edited."""
        return self.tokens / self.file_tokens if self.file_tokens else None

    @property
    def limit_share(self) -> float | None:
        """Share of the all-accepted limit reached: limit time / actual time."""
        return self.limit_seconds / self.seconds if self.seconds and self.limit_seconds else None

    @property
    def prefill_share(self) -> float | None:
        return self.prefill_seconds / self.seconds if self.seconds else None

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.request_steps if self.request_steps else 0.0

    @property
    def proposer_ms_per_step(self) -> float | None:
        return 1000 * self.proposer_seconds / self.proposer_steps if self.proposer_steps else None

    @property
    def model_run_share(self) -> float | None:
        """Share of request-steps the model drafter ran for (None: the method has none)."""
        total = self.model_drafted + self.model_skipped
        return self.model_drafted / total if total else None

    def acceptance_by_position(self) -> dict[str, list[float]]:
        """Per drafter: P(slot k accepted | slots before it accepted), as verification found it."""
        out = {}
        for name, (verified, accepted) in sorted(self.positions.items()):
            reached = [k for k, v in enumerate(verified) if v]
            out[name] = [round(accepted[k] / verified[k], 3) for k in range(reached[-1] + 1)] if reached else []
        return out

    def acceptance(self) -> dict[str, tuple[int, int]]:
        return {name: (self.accepted[name], self.drafted[name]) for name in sorted(self.drafted) if self.drafted[name]}


@dataclass
class BenchReport:
    cells: list[Cell]
    workloads: dict[str, list[str]]  # workload -> task names
    edit_distance: dict[str, float | None]  # workload -> mean over its plain outputs
    refused: dict[str, list[str]]  # workload -> edits whose plain output the write guard refuses
    check_failed: dict[str, list[str]]  # workload -> edits whose plain output fails the instruction check
    batch_sizes: list[int]
    repeats: int
    methods: list[str]
    # the plain engine's one-token step time (its cost table): the yardstick for proposer time
    plain_step_ms: float | None = None
    # per method: its engine's cost table, [(scheduled tokens, ms)], as profiled at its start
    cost_tables: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    # per method with a DSpark drafter: whether it was trained for the target (DrafterTarget)
    dspark_targets: dict[str, DrafterTarget] = field(default_factory=dict)

    # per dtype: how far below the top choice an emitted token may lie and still be greedy
    tolerance: dict[str, float] = field(default_factory=dict)
    # per dtype below float32 (greedy runs): plain decoding's own noise in this run (judge.Noise)
    noise: dict[str, Noise] = field(default_factory=dict)
    temperature: float = 0.0  # above 0: every request sampled, seeded by its task's position

    @property
    def exact(self) -> bool:
        """No output outside its dtype's tolerance of greedy decoding."""
        return not any(c.mismatches for c in self.cells)

    def cell(self, workload: str, batch_size: int, method: str) -> Cell | None:
        return next(
            (c for c in self.cells if (c.workload, c.batch_size, c.method) == (workload, batch_size, method)), None
        )

    def ratio_to_best(self, cell: Cell, family: str) -> float | None:
        """Against the fastest of a drafter's settings (`vllm-ngram`, `vllm-ngram@63`, ...)."""
        rivals = [c for c in self.cells if (c.workload, c.batch_size) == (cell.workload, cell.batch_size)
                  and method_name(c.method) == family and variant_of(c.method) == variant_of(cell.method)
                  and c.tokens_per_second]
        if not rivals or not cell.tokens_per_second:
            return None
        return cell.tokens_per_second / max(c.tokens_per_second for c in rivals)

    def beside(self, cell: Cell, method: str) -> Cell | None:
        """`method` (a drafter name) on the cell's workload and batch, in the cell's variant."""
        variant = variant_of(cell.method)
        return self.cell(cell.workload, cell.batch_size, f"{method}:{variant}" if variant else method)

    def best_single(self, cell: Cell) -> Cell | None:
        """The faster of the hybrid's two parts, copy and DSpark, in the cell's variant."""
        parts = [self.beside(cell, part) for part in (COPY, DSPARK)]
        parts = [c for c in parts if c is not None and c.tokens_per_second]
        return max(parts, key=lambda c: c.tokens_per_second) if parts else None

    def ratio_to_best_single(self, cell: Cell) -> PairedRatio | None:
        """A hybrid against its better part: the ratio of the whole run, and its 95% interval from
        the rounds, each round's hybrid paired with the same round's part (the machine's drift
        between rounds moves both). None for other methods, or where neither part ran."""
        best = self.best_single(cell) if method_name(cell.method) == HYBRID else None
        if best is None or not cell.tokens_per_second:
            return None
        rounds = zip(cell.round_tokens, cell.round_seconds, best.round_tokens, best.round_seconds)
        return PairedRatio(cell.tokens_per_second / best.tokens_per_second,
                           [(t / s) / (bt / bs) for t, s, bt, bs in rounds if t and s and bt and bs],
                           same_answers=cell.round_tokens == best.round_tokens)

    def ratio(self, cell: Cell, baseline: str) -> float | None:
        """Against `baseline` (a drafter name) in the cell's own variant (dtype, mode)."""
        base = self.beside(cell, baseline)
        if base is None or not base.tokens_per_second or not cell.tokens_per_second:
            return None
        return cell.tokens_per_second / base.tokens_per_second

    def as_dict(self) -> dict:
        return {
            "workloads": self.workloads,
            "edit_distance": {k: _round(v) for k, v in self.edit_distance.items()},
            "refused_by_guard": self.refused,
            "check_failed": self.check_failed,
            "batch_sizes": self.batch_sizes,
            "repeats": self.repeats,
            "exact": self.exact,
            "greedy_tolerance_nats": self.tolerance,
            "plain_noise": {dtype: {"positions": n.positions, "largest_shift_nats": _round(n.largest_shift),
                                    "over_rounding_bound": n.over_bound} for dtype, n in self.noise.items()},
            "temperature": self.temperature,
            "plain_step_ms": _round(self.plain_step_ms),
            "cost_tables_ms": self.cost_tables,
            "dspark_targets": {method: target.as_dict() for method, target in self.dspark_targets.items()},
            "rows": [
                {
                    "workload": c.workload,
                    "batch_size": c.batch_size,
                    "method": c.method,
                    "scope": c.scope,
                    "seconds_per_run": _round(c.seconds_per_run),
                    "tokens_of_file": _round(c.of_file),
                    "skipped": c.skipped,
                    "tokens": c.tokens,
                    "seconds": round(c.seconds, 3),
                    "round_tokens": c.round_tokens,
                    "round_seconds": [round(s, 3) for s in c.round_seconds],
                    "tokens_per_second": round(c.tokens_per_second, 3),
                    "ratio_to_plain": _round(self.ratio(c, NO_DRAFTER)),
                    "ratio_to_dspark": _round(self.ratio(c, DSPARK)),
                    "ratio_to_copy": _round(self.ratio(c, COPY)),
                    "tokens_per_step": round(c.tokens_per_step, 3),
                    "acceptance": {k: {"accepted": a, "drafted": d} for k, (a, d) in c.acceptance().items()},
                    "acceptance_by_position": c.acceptance_by_position(),
                    "proposer_ms_per_step": _round(c.proposer_ms_per_step),
                    "limit_seconds": _round(c.limit_seconds),
                    "limit_share": _round(c.limit_share),
                    "machine_seconds": _round(c.machine_seconds),
                    "machine_share": _round(c.machine_share),
                    "prefill_share": _round(c.prefill_share),
                    "ratio_to_best_vllm_ngram": _round(self.ratio_to_best(c, VLLM_NGRAM)),
                    "ratio_to_best_single": _as_dict(self.ratio_to_best_single(c)),
                    "dspark_run_share": _round(c.model_run_share),
                    "outputs": c.outputs,
                    "identical": c.identical,
                    "near_ties": c.near_ties,
                    "sampled_differs": c.sampled_differs,
                    "worst_gap_nats": _round(c.worst_gap),
                    "plain_worst_gap_nats": _round(c.plain_worst_gap),
                    "mismatches": c.mismatches,
                    "output_sha256": c.output_sha256,
                }
                for c in self.cells
            ],
        }


# Student's t, two-sided 95%, by degrees of freedom (rounds less one); 1.96 past 30.
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


@dataclass
class PairedRatio:
    """A speed ratio over a run, with the per-round ratios behind it and their 95% interval
    (geometric: a round twice as fast and one half as fast cancel)."""

    whole: float
    rounds: list[float] = field(default_factory=list)
    # Both wrote answers of the same length in every round. Where they did not (greedy paths
    # parted at a near tie, which bf16 makes), their token rates time different work: on a mixed
    # batch a chat answer 100 tokens longer adds 100 slow steps, whatever the drafter.
    same_answers: bool = True

    @property
    def interval(self) -> tuple[float, float] | None:
        if len(self.rounds) < 2:
            return None
        logs = [math.log(r) for r in self.rounds]
        t = T_975[len(logs) - 2] if len(logs) - 1 <= len(T_975) else 1.96
        half = t * statistics.stdev(logs) / math.sqrt(len(logs))
        centre = statistics.fmean(logs)
        return math.exp(centre - half), math.exp(centre + half)

    @property
    def trails(self) -> bool | None:
        """Below 1.0 beyond the rounds' noise (None: one round cannot tell, nor rounds of
        different answers)."""
        return None if self.interval is None or not self.same_answers else self.interval[1] < 1.0

    def as_dict(self) -> dict:
        interval = self.interval
        return {"whole": _round(self.whole), "rounds": [_round(r) for r in self.rounds],
                "interval_95": [_round(v) for v in interval] if interval else None, "trails": self.trails,
                "same_answers": self.same_answers}


def _as_dict(ratio: PairedRatio | None) -> dict | None:
    return ratio.as_dict() if ratio is not None else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
