"""`hsedit bench`: drafting methods side by side on the same workloads, interleaved in one run.

The machine is noisy, so for every workload and batch size the methods take turns (the order
rotates) and speed is reported as ratios from the same run. A batch size b runs b requests
concurrently in one engine (the workload's tasks, repeated if there are fewer than b). Every
output is judged against plain decoding of the same variant at the same batch size: token for
token, and where it differs, by the plain engine's own log-probabilities (one prefill of prompt
and answer) — greedy decoding within the dtype's tolerance (kernels that are not
batch-invariant, and bf16's coarse rounding, can flip a near tie) or a drafter that changed the
output, which is a bug, not a speedup. The tolerance is the dtype's rounding bound
(`GREEDY_TOLERANCE`) or, where larger, the noise the run measures in plain decoding itself: after
the timed rounds plain decoding runs once more keeping each step's log-probabilities, and every
position is scored again by one prefill; the largest shift of a margin between the two is how
far the dtype alone moves a choice (`judge.Noise`; `--no-noise` skips it).

A method is a drafter name, optionally with its maximum draft and its engine variant, the
target's dtype and/or vLLM's compiled mode: `hybrid@15`, `vllm-ngram@63`, `hybrid:float32`,
`hybrid:compiled`, `none:float32+compiled` (without: the engine's defaults, 31 for the hybrid
and 15 for the others, `--dtype auto`, eager). Every variant in use gets its own plain
decoding, which its methods are compared with and checked against.

A workload runs at each scope asked for (`--scope file,regions`): the whole file per edit, or
the regions `hsedit apply --scope regions` sends, each region a request. `s/run` is the time the
workload's requests took at that batch size, so two scopes of one workload compare by it;
`of file` is the tokens generated over the tokens of the files edited. Every row also gets two
limits: the all-accepted limit of its workload (prefilling each group's prompts, as measured,
plus verifying its answers in maximal chains, from the cost table: no drafter can finish
sooner), and the machine's (the target's FLOPs for every prompt and answer token at the peak a
matmul probe measures).

    workloads.py  what runs (built-in workloads, task files, scopes)
    methods.py    method specs and their engines;  children.py  vLLM's drafters in child processes
    run.py        the interleaved runs and the limits;  judge.py  exactness and answers
    report.py     the cells and the report
"""

from hsedit.bench.methods import (
    DEFAULT_METHODS,
    UnavailableMethod,
    check_method,
    compiled,
    dtype_of,
    engine_for_method,
    max_draft_of,
    method_name,
    plain_for,
    suffix_package_dir,
)
from hsedit.bench.report import BenchReport, Cell
from hsedit.bench.run import all_accepted_limit, run_bench
from hsedit.bench.workloads import (
    BUILTIN_WORKLOADS,
    BenchTask,
    Workload,
    builtin_dir,
    builtin_workloads,
    chosen_workloads,
    groups,
    in_regions,
    load_tasks,
)

__all__ = [
    "BUILTIN_WORKLOADS", "DEFAULT_METHODS", "BenchReport", "BenchTask", "Cell", "UnavailableMethod", "Workload",
    "all_accepted_limit", "builtin_dir", "builtin_workloads", "check_method", "chosen_workloads", "compiled", "dtype_of",
    "engine_for_method", "groups", "in_regions", "load_tasks", "max_draft_of", "method_name", "plain_for",
    "run_bench", "suffix_package_dir",
]
