"""How far two bf16 computations of the same positions lie apart: each step that decodes (plain,
one token) or verifies (hybrid, a chain), against one prefill of prompt + answer, on the renames by
regions and chat at a batch size. Per position, the largest shift of the margin between the emitted
token and another token both list in their top 3. usage: bf16_noise.py OUT.json [batch]"""
import json
import sys
from dataclasses import replace

from hsedit.bench.judge import NOISE_TOP, margin_shifts
from hsedit.bench.run import _request
from hsedit.bench.workloads import chosen_workloads, groups
from hsedit.engine.engine import EngineOptions, shared_engine

out_path = sys.argv[1]
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 4


def run_group(engine, tasks):
    """(prompt ids, answer ids, the steps' log-probabilities) per task, the group run together."""
    requests = [replace(_request(engine, task), logprobs=NOISE_TOP) for task in tasks]
    results = []
    for request, result in zip(requests, engine.generate(requests), strict=True):
        results.append((engine.token_ids(request.prompt), result.token_ids, result.logprobs))
    return results


workloads = chosen_workloads(None, "large", ("regions",)) + chosen_workloads(None, "chat", ("file",))
plain = shared_engine(EngineOptions(drafter="none"))
hybrid = shared_engine(EngineOptions(drafter="hybrid"))
report = {}
for name, engine in (("plain", plain), ("hybrid", hybrid)):
    rows = []
    for w in workloads:
        for group in groups(w.tasks, batch):
            for prompt, answer, logprobs in run_group(engine, group):
                scored = plain.answer_logprobs(prompt, answer, NOISE_TOP)
                gaps = [max(s.values()) - s[token] for token, s in zip(answer, scored)]
                for shift, gap in zip(margin_shifts(answer, logprobs, scored), gaps, strict=True):
                    rows.append((w.name, shift, gap))
    values = sorted(r[1] for r in rows)
    report[name] = {
        "positions": len(rows),
        "max_shift": values[-1],
        "p999": values[int(0.999 * (len(values) - 1))],
        "p99": values[int(0.99 * (len(values) - 1))],
        "over": {str(t): sum(v > t + 1e-4 for v in values) for t in (0.125, 0.25, 0.5, 0.75, 1.0)},
        "max_gap": max(r[2] for r in rows),
        "gaps_over": {str(t): sum(r[2] > t + 1e-4 for r in rows) for t in (0.0, 0.125, 0.25, 0.5, 0.75)},
    }
    print(name, json.dumps(report[name]), flush=True)
with open(out_path, "w") as out:
    json.dump(report, out, indent=1)
