"""How far two bf16 computations of the same positions lie apart: each step that decodes (plain,
one token) or verifies (hybrid, a chain), against one prefill of prompt + answer, on the renames by
regions and chat at a batch size. Per position, the largest shift of the margin between the emitted
token and another token both list in their top 3. usage: bf16_noise.py OUT.json [batch]"""
import json
import sys
import time

from vllm import SamplingParams
from vllm.sampling_params import RequestOutputKind

from hsedit.bench.run import _request
from hsedit.bench.workloads import chosen_workloads, groups
from hsedit.engine import vllm_proposer
from hsedit.engine.engine import EngineOptions, shared_engine

out_path = sys.argv[1]
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 4
TOP = 3


def run_group(engine, tasks):
    ids = []
    for task in tasks:
        req = _request(engine, task)
        prompt = list(req.prompt) if not isinstance(req.prompt, str) else engine.tokenizer.encode(req.prompt)
        extra = {}
        if req.prediction and engine.proposer is not None:
            p = req.prediction
            extra[vllm_proposer.PREDICTION_ARG] = [int(t) for t in (engine.tokenizer.encode(p) if isinstance(p, str) else p)]
        params = SamplingParams(temperature=0.0, max_tokens=req.max_tokens, stop=req.stop, logprobs=TOP,
                                output_kind=RequestOutputKind.FINAL_ONLY, extra_args=extra or None)
        rid = f"noise-{time.monotonic_ns()}-{len(ids)}"
        engine.core.add_request(rid, {"prompt_token_ids": prompt}, params)
        ids.append((rid, prompt))
    done = {}
    while len(done) < len(ids):
        for o in engine.core.step():
            if o.finished:
                done[o.request_id] = o
    results = []
    for rid, prompt in ids:
        o = done[rid].outputs[0]
        results.append((prompt, list(o.token_ids), o.logprobs))
    return results


def shifts(answer, stepped, scored):
    """Per position: the largest |margin shift| between the emitted token and another token both
    computations list, and the prefill's gap of the emitted token (nats below its top choice)."""
    out = []
    for tok, a, lb in zip(answer, stepped, scored):
        la = {t: v.logprob for t, v in a.items()}
        worst = 0.0
        for other in set(la) & set(lb):
            if other == tok:
                continue
            worst = max(worst, abs((la[tok] - la[other]) - (lb[tok] - lb[other])))
        gap = max(lb.values()) - lb[tok]
        out.append((worst, gap))
    return out


workloads = chosen_workloads(None, "large", ("regions",)) + chosen_workloads(None, "chat", ("file",))
plain = shared_engine(EngineOptions(drafter="none"))
hybrid = shared_engine(EngineOptions(drafter="hybrid"))
report = {}
for name, engine in (("plain", plain), ("hybrid", hybrid)):
    rows = []
    for w in workloads:
        for group in groups(w.tasks, batch):
            for prompt, answer, logprobs in run_group(engine, group):
                scored = plain.answer_logprobs(prompt, answer, TOP)
                for worst, gap in shifts(answer, logprobs, scored):
                    rows.append((w.name, worst, gap))
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
