"""`hsedit calibrate`: fit the copy acceptance model for a target on its own general-text outputs.

The target answers general prompts (chat, problem statements, code prompts; never editing
data) through the copy drafter alone, with full 15-token chains; every verified chain is a
training row. A fifth of the prompts is held out. Edit prompts are then run the same way, each
with the predicted output `hsedit apply` sends (the intent's mechanical part done, else the code
it edits): on four fifths one logit shift is fit, what a request with a reference starts from
(an edit copies what its answer repeats, so its copies survive more often than the coefficients
say), and the rest scores it.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from hsedit.drafting.calibration import auc, ece, log_loss
from hsedit.drafting.chain import COPY
from hsedit.drafting.copy_acceptance import CopyAcceptanceModel, VerifiedChain, fit_model, labelled_positions, map_offset
from hsedit.engine.engine import Engine, GenerationRequest

MAX_ANSWER_TOKENS = 256


def shared_prompt_files() -> list[Path]:
    """The development prompt sets (../shared/data next to the checkout), where present."""
    root = Path(__file__).resolve().parent.parent.parent.parent / "shared" / "data"
    return [p for p in (root / n for n in ("mt-bench.jsonl", "swe-bench.jsonl", "humaneval.jsonl")) if p.is_file()]


def verified_copy_chains(engine: Engine, prompts: Sequence[str | list[int]], batch: int = 16,
                         references: Sequence[str] | None = None) -> list[list[VerifiedChain]]:
    """Per prompt, every copy chain the target verified while answering it (greedy); with
    `references`, each prompt's answer is predicted to repeat its reference (as edits are)."""
    out = []
    for start in range(0, len(prompts), batch):
        requests = [GenerationRequest(p, max_tokens=MAX_ANSWER_TOKENS,
                                      prediction=references[start + i] if references is not None else None)
                    for i, p in enumerate(prompts[start : start + batch])]
        for result in engine.generate(requests):
            out.append([
                VerifiedChain(step.copy_features, step.drafted, step.matched)
                for step in result.stats.steps
                if step.source == COPY and step.copy_features is not None and step.drafted
            ])
    return out


@dataclass
class CalibrationScore:
    positions: int
    accepted_rate: float
    log_loss: float
    ece: float
    auc: float

    @classmethod
    def of(cls, model: CopyAcceptanceModel, chains: Sequence[VerifiedChain], offset: float = 0.0) -> CalibrationScore:
        rows, labels, _ = labelled_positions(chains)
        p = model.predict_rows(rows, offset)
        return cls(len(labels), float(labels.mean()) if len(labels) else float("nan"),
                   log_loss(p, labels), ece(p, labels), auc(p, labels))


def split_prompts(prompts: Sequence[str], heldout_fraction: float = 0.2) -> tuple[list[str], list[str]]:
    """A stable split by prompt text (the same prompt always falls on the same side)."""
    fit, held = [], []
    for p in prompts:
        (held if zlib.crc32(p.encode()) % 1000 < heldout_fraction * 1000 else fit).append(p)
    return fit, held


@dataclass(frozen=True)
class EditPrompt:
    prompt: str  # the rendered apply prompt
    reference: str  # the answer's predicted output, as `hsedit apply` sends it


def calibrate(
    engine: Engine,
    general_prompts: Sequence[str],
    edit_prompts: Sequence[EditPrompt],
    model_name: str,
    log: Callable[[str], None] = print,
) -> tuple[CopyAcceptanceModel, dict]:
    """The coefficients, fit on general text; the shift of requests with a reference, fit on part
    of the edits; each scored on what it was not fit on."""
    fit_texts, held_texts = split_prompts(general_prompts)
    log(f"answering {len(fit_texts)} + {len(held_texts)} general prompts through the copy drafter")
    fit_chains = [c for per in verified_copy_chains(engine, [engine.chat_prompt(t) for t in fit_texts]) for c in per]
    held_chains = [c for per in verified_copy_chains(engine, [engine.chat_prompt(t) for t in held_texts]) for c in per]
    held_prompts = set(split_prompts([e.prompt for e in edit_prompts])[1])
    edits_fit = [e for e in edit_prompts if e.prompt not in held_prompts]
    edits_held = [e for e in edit_prompts if e.prompt in held_prompts]
    log(f"running {len(edits_fit)} + {len(edits_held)} edit prompts (the shift of an edit's copies)")

    def edit_chains(edits: Sequence[EditPrompt]) -> list[VerifiedChain]:
        per = verified_copy_chains(engine, [e.prompt for e in edits], references=[e.reference for e in edits])
        return [c for chains in per for c in chains]

    fit_edit_chains, held_edit_chains = edit_chains(edits_fit), edit_chains(edits_held)
    general = fit_model(fit_chains, model=model_name, fit_on=f"{len(fit_texts)} general-text prompts")
    shift = reference_shift(general, fit_edit_chains)
    model = replace(general, reference_offset=shift,
                    fit_on=f"{len(fit_texts)} general-text prompts; the reference shift on {len(edits_fit)} edits")
    report = {
        "model": model_name,
        "coefficients": dict(zip(("bias", "log_match", "agree", "log1p_extent", "position", "first"), model.coefficients)),
        "reference_offset": shift,
        "fit": CalibrationScore.of(model, fit_chains).__dict__,
        "heldout_general": CalibrationScore.of(model, held_chains).__dict__,
        "edits_fit_shift": CalibrationScore.of(model, fit_edit_chains, shift).__dict__,
        "heldout_edits_unshifted": CalibrationScore.of(model, held_edit_chains).__dict__,
        "heldout_edits": CalibrationScore.of(model, held_edit_chains, shift).__dict__,
        "chains": {"fit": len(fit_chains), "heldout_general": len(held_chains), "edits_fit": len(fit_edit_chains),
                   "heldout_edits": len(held_edit_chains)},
    }
    return model, report


def reference_shift(model: CopyAcceptanceModel, chains: Sequence[VerifiedChain]) -> float:
    """The logit shift that best fits edits' verified copies under the general-text coefficients
    (0 without any: nothing says edits differ)."""
    rows, labels, _ = labelled_positions(chains)
    if not len(labels) or labels.min() == labels.max():
        return 0.0
    return map_offset(rows @ np.asarray(model.coefficients), labels, prior=0.0, prior_positions=0.0)


def save_fitted(model: CopyAcceptanceModel, target_model: str | None, out: Path | None = None) -> Path:
    """Save fitted coefficients where the hybrid drafter of `target_model` reads them (hsedit's
    cache), or to `out`."""
    from hsedit.engine.provision import copy_acceptance_path

    target = out or copy_acceptance_path(target_model)
    target.parent.mkdir(parents=True, exist_ok=True)
    model.save(target)
    return target


def read_general_prompts(paths: Sequence[Path], limit: int | None, seed: int = 0) -> list[str]:
    from hsedit.train.drafter.data import read_prompts

    prompts = read_prompts(paths, None, seed)
    random.Random(seed).shuffle(prompts)
    return prompts[:limit] if limit else prompts


def edit_prompts_from_heldout(engine: Engine, limit: int) -> list[EditPrompt]:
    """Apply prompts for the shipped held-out edits (the apply model is never fit on them), each
    with the predicted output `hsedit apply` sends."""
    from hsedit.edit.intent import parse_intent
    from hsedit.edit.predict import answer_reference
    from hsedit.edit.prompt import ApplyPrompt
    from hsedit.train.finetune.dataset import HELDOUT, load

    examples = load(HELDOUT, split="eval")
    random.Random(0).shuffle(examples)
    prompts = []
    for e in examples[:limit]:
        prompt = ApplyPrompt.build(e.path, e.before, e.instruction, e.update).render(engine.tokenizer)
        prompts.append(EditPrompt(prompt, answer_reference(parse_intent(e.instruction, e.update), e.before)))
    return prompts
