"""`hsedit calibrate`: fit the copy acceptance model for a target on its own general-text outputs.

The target answers general prompts (chat, problem statements, code prompts; never editing
data) through the copy drafter alone, with full 15-token chains; every verified chain is a
training row. A fifth of the prompts is held out. Edit prompts are then run the same way and
only scored, to show how the fit carries over to the workload it is for.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hsedit.drafting.calibration import auc, ece, log_loss
from hsedit.drafting.chain import COPY
from hsedit.drafting.copy_acceptance import CopyAcceptanceModel, VerifiedChain, fit_model, labelled_positions
from hsedit.engine.engine import Engine, GenerationRequest

MAX_ANSWER_TOKENS = 256


def shared_prompt_files() -> list[Path]:
    """The development prompt sets (../shared/data next to the checkout), where present."""
    root = Path(__file__).resolve().parent.parent.parent.parent / "shared" / "data"
    return [p for p in (root / n for n in ("mt-bench.jsonl", "swe-bench.jsonl", "humaneval.jsonl")) if p.is_file()]


def verified_copy_chains(engine: Engine, prompts: Sequence[str | list[int]], batch: int = 16) -> list[list[VerifiedChain]]:
    """Per prompt, every copy chain the target verified while answering it (greedy)."""
    out = []
    for start in range(0, len(prompts), batch):
        requests = [GenerationRequest(p, max_tokens=MAX_ANSWER_TOKENS) for p in prompts[start : start + batch]]
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
    def of(cls, model: CopyAcceptanceModel, chains: Sequence[VerifiedChain]) -> CalibrationScore:
        rows, labels, _ = labelled_positions(chains)
        p = model.predict_rows(rows)
        return cls(len(labels), float(labels.mean()) if len(labels) else float("nan"),
                   log_loss(p, labels), ece(p, labels), auc(p, labels))


def split_prompts(prompts: Sequence[str], heldout_fraction: float = 0.2) -> tuple[list[str], list[str]]:
    """A stable split by prompt text (the same prompt always falls on the same side)."""
    fit, held = [], []
    for p in prompts:
        (held if zlib.crc32(p.encode()) % 1000 < heldout_fraction * 1000 else fit).append(p)
    return fit, held


def calibrate(
    engine: Engine,
    general_prompts: Sequence[str],
    edit_prompts: Sequence[str],
    model_name: str,
    log: Callable[[str], None] = print,
) -> tuple[CopyAcceptanceModel, dict]:
    fit_texts, held_texts = split_prompts(general_prompts)
    log(f"answering {len(fit_texts)} + {len(held_texts)} general prompts through the copy drafter")
    fit_chains = [c for per in verified_copy_chains(engine, [engine.chat_prompt(t) for t in fit_texts]) for c in per]
    held_chains = [c for per in verified_copy_chains(engine, [engine.chat_prompt(t) for t in held_texts]) for c in per]
    log(f"running {len(edit_prompts)} edit prompts (scored only)")
    edit_chains = [c for per in verified_copy_chains(engine, list(edit_prompts)) for c in per]
    model = fit_model(fit_chains, model=model_name, fit_on=f"{len(fit_texts)} general-text prompts")
    report = {
        "model": model_name,
        "coefficients": dict(zip(("bias", "log_match", "agree", "log1p_extent", "position", "first"), model.coefficients)),
        "fit": CalibrationScore.of(model, fit_chains).__dict__,
        "heldout_general": CalibrationScore.of(model, held_chains).__dict__,
        "edits_never_fit": CalibrationScore.of(model, edit_chains).__dict__,
        "chains": {"fit": len(fit_chains), "heldout_general": len(held_chains), "edits": len(edit_chains)},
    }
    return model, report


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


def edit_prompts_from_heldout(engine: Engine, limit: int) -> list[str]:
    """Apply prompts for the shipped held-out edits (never used for any fitting)."""
    from hsedit.edit.prompt import ApplyPrompt
    from hsedit.train.finetune.dataset import HELDOUT, load

    examples = load(HELDOUT, split="eval")
    random.Random(0).shuffle(examples)
    return [
        ApplyPrompt.build(e.path, e.before, e.instruction, e.update).render(engine.tokenizer)
        for e in examples[:limit]
    ]
