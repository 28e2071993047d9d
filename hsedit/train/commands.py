"""The training commands (`hsedit finetune …`, `hsedit calibrate`, `hsedit drafter …`): argument
handling and printing; the work is in hsedit.train's modules, imported when a command runs.
`hsedit.cli` registers them; nothing at runtime imports this."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from hsedit.drafting.chain import COPY
from hsedit.errors import UsageError


def register(app: typer.Typer) -> None:
    app.add_typer(finetune_app, name="finetune")
    app.add_typer(drafter_app, name="drafter")
    app.command()(calibrate)


finetune_app = typer.Typer(no_args_is_help=True, help="Make, train and evaluate the apply model.")


@finetune_app.command("data")
def finetune_data(
    out: Annotated[Path, typer.Option(help="JSON-lines file to write.")],
    per_kind: Annotated[int, typer.Option(help="Training examples per edit kind.", min=1)] = 70,
    file_per_kind: Annotated[int, typer.Option(help="Whole-file examples per edit kind (50-200-line files), besides the chunks.", min=0)] = 0,
    short_file_per_kind: Annotated[int, typer.Option(help="Whole-file examples per edit kind of short files (20-49 lines, the size of the demo files).", min=0)] = 0,
    region_per_kind: Annotated[int, typer.Option(help="Region examples per edit kind (regions of files of any size, cut and picked as `apply --scope regions` does), besides the chunks.", min=0)] = 0,
    finer_share: Annotated[float, typer.Option(help="Share of the region edits cut at the finer budgets a failing region is asked again at (pieces of ~15 lines, single statements).", min=0.0, max=1.0)] = 0.0,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:
    """Generate instructed edits with exact targets from installed Python source."""
    from collections import Counter

    from hsedit.train.finetune.dataset import (
        SHORT_FILE_LINES,
        generate,
        generate_regions,
        generate_whole_files,
        save,
    )

    examples = generate(seed=seed, limit_per_kind=per_kind)
    if file_per_kind:
        examples += generate_whole_files(seed=seed, limit_per_kind=file_per_kind)
    if short_file_per_kind:
        examples += generate_whole_files(seed=seed + 1, limit_per_kind=short_file_per_kind,
                                         bounds=SHORT_FILE_LINES)
    if region_per_kind:
        examples += generate_regions(seed=seed, limit_per_kind=region_per_kind, finer_share=finer_share)
    save(examples, out)
    counts = Counter((e.split, e.scope, e.kind) for e in examples)
    for (split, scope, kind), n in sorted(counts.items()):
        typer.echo(f"{split:5} {scope:6} {kind:20} {n}")


@finetune_app.command("train")
def finetune_train(
    data: Annotated[Path, typer.Option(help="Examples from `hsedit finetune data`.")],
    out: Annotated[Path, typer.Option(help="Directory for the LoRA adapter.")],
    base: Annotated[str, typer.Option(help="Base model (name, HF directory or .gguf).")] = "embedded-base",
    minutes: Annotated[Optional[float], typer.Option(help="Stop (and save) after this long.")] = None,
    epochs: Annotated[float, typer.Option(min=0.01)] = 1.0,
    rank: Annotated[int, typer.Option(min=1)] = 16,
    learning_rate: Annotated[float, typer.Option()] = 4e-4,
    max_tokens: Annotated[int, typer.Option(help="Skip examples longer than this (prompt + answer); whole files need ~6000.", min=64)] = 1024,
    init_adapter: Annotated[Optional[Path], typer.Option(help="Continue training this adapter (e.g. hsedit/models/apply-lora) instead of a new one.")] = None,
    bf16: Annotated[bool, typer.Option(help="bf16 autocast (faster on GPUs and on CPUs with AVX512-BF16 or AMX; refused on other CPUs, where it is ~100x slower).")] = False,
    checkpoint: Annotated[Optional[Path], typer.Option(help="Resume from and save to this directory (adapter, optimizer, data position, RNG): runs accumulate.")] = None,
    budget_tokens: Annotated[Optional[int], typer.Option(help="With --checkpoint: decay the learning rate over this many tokens, counted over every run.", min=1)] = None,
    changed_weight: Annotated[float, typer.Option(help="Loss weight of the answer's tokens on changed lines (and the few after each change) against 1 for copied lines.", min=0.0)] = 1.0,
    wrong_turn_weight: Annotated[float, typer.Option(help="Loss weight (in answer tokens) of the unlikelihood of each wrong turn: the original's next token where the edit departs from it, the closing fence at a line start. 0: off.", min=0.0)] = 0.0,
    end_weight: Annotated[float, typer.Option(help="Loss weight of the answer's closing fence against 1 for the other tokens (with --wrong-turn-weight, which pushes the fence down at every other line start).", min=0.0)] = 1.0,
    insertion_turn_share: Annotated[float, typer.Option(help="With --wrong-turn-weight: where the answer only inserts tokens, the original's next token (written right after the insertion) weighs this share of a wrong turn (0: none).", min=0.0, max=1.0)] = 1.0,
    examples: Annotated[Optional[int], typer.Option(help="Stop (and save) after this many examples in this run: two runs on the same data and seed then see the same examples.", min=1)] = None,
) -> None:
    """LoRA fine-tune of the apply model (CPU or GPU: torch decides)."""
    from hsedit.engine.options import machine_dtype
    from hsedit.engine.provision import resolve_model
    from hsedit.errors import UsageError
    from hsedit.train.finetune.train import TrainConfig, train

    if bf16 and machine_dtype() == "float32":
        # Measured on an AVX2-only CPU: a bf16 matmul of a training step's shape, 3 s; in fp32, 23 ms.
        raise UsageError("--bf16: this machine computes bf16 only in emulation (no AVX512-BF16, AMX or GPU); "
                         "train without it")
    base_dir = resolve_model(base)
    config = TrainConfig(
        data=str(data), base_model=base_dir, output=str(out), rank=rank,
        learning_rate=learning_rate, epochs=epochs, time_budget_s=minutes * 60 if minutes else None,
        max_tokens=max_tokens, init_adapter=str(init_adapter) if init_adapter else None, bf16=bf16,
        checkpoint=str(checkpoint) if checkpoint else None, budget_tokens=budget_tokens,
        changed_weight=changed_weight, wrong_turn_weight=wrong_turn_weight, end_weight=end_weight,
        insertion_turn_share=insertion_turn_share, stop_after_examples=examples,
    )
    summary = train(config, log=typer.echo)
    typer.echo(json.dumps(summary))


@finetune_app.command("eval")
def finetune_eval(
    model: Annotated[Optional[str], typer.Option(help="Model to evaluate (default: the shipped apply model).")] = None,
    data: Annotated[Optional[Path], typer.Option(help="Examples (default: the shipped held-out set).")] = None,
    whole_files: Annotated[bool, typer.Option("--whole-files", help="The shipped held-out whole files (50-200 lines) instead of the chunks.")] = False,
    regions: Annotated[bool, typer.Option("--regions", help="The shipped held-out regions (as `apply --scope regions` sends them) instead of the chunks.")] = False,
    renames: Annotated[Optional[str], typer.Option(help="small or large: the held-out renames in real files, each run end to end as `hsedit apply` runs it (--scope decides how).")] = None,
    scope: Annotated[str, typer.Option(help="With --renames: auto, file or regions.")] = "auto",
    retries: Annotated[Optional[int], typer.Option(help="With --renames: region retries (default: apply's).", min=0)] = None,
    sampled_retries: Annotated[bool, typer.Option(help="With --renames: a region asked again as it was is sampled (else only its smaller units are asked).")] = True,
    limit: Annotated[Optional[int], typer.Option(help="Evaluate only the first N per kind.", min=1)] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Exact-match, unchanged-lines-kept, parse and cut-off rates per edit kind on held-out files."""
    from hsedit.config import check_scope
    from hsedit.engine.engine import EngineOptions, shared_engine
    from hsedit.train.finetune.dataset import HELDOUT, HELDOUT_FILES, HELDOUT_REGIONS, HELDOUT_RENAMES, load
    from hsedit.train.finetune.evaluate import evaluate, evaluate_edits, overall

    if sum(map(bool, (data, whole_files, regions, renames))) > 1:
        raise UsageError("--data, --whole-files, --regions and --renames each choose the examples: give one")
    engine = shared_engine(EngineOptions(model=model, drafter=COPY))
    if renames is not None:
        if renames not in HELDOUT_RENAMES:
            raise UsageError(f"--renames takes {' or '.join(HELDOUT_RENAMES)}, not {renames!r}")
        outcomes = evaluate_edits(engine, load(HELDOUT_RENAMES[renames])[:limit], check_scope(scope), retries,
                                  sampled_retries)
        for o in outcomes:
            typer.echo(json.dumps(o.__dict__ | {"wrong_success": o.wrong_success}))
        typer.echo(json.dumps({
            "renames": renames, "scope": scope, "sampled_retries": sampled_retries, "n": len(outcomes), "exact": sum(o.exact for o in outcomes),
            "right": sum(o.right for o in outcomes),
            "written": sum(o.status == "ok" for o in outcomes), "wrong_success": sum(o.wrong_success for o in outcomes),
            "refused_for_size": sum(o.status == "refused: 4" for o in outcomes),
            "exact_without_retries": sum(o.exact and o.first_try for o in outcomes),
            "seconds": round(sum(o.seconds for o in outcomes), 1),
        }))
        return
    chosen = HELDOUT_FILES if whole_files else HELDOUT_REGIONS if regions else HELDOUT
    examples = load(data or chosen, split=None if data else "eval", per_kind=limit)
    reports = evaluate(engine, examples)
    rows = [r.as_dict() for r in reports] + [overall(reports)]
    if as_json:
        typer.echo(json.dumps({"model": model or "embedded", "kinds": rows}))
        return
    from hsedit.ui import eval_table

    Console().print(eval_table(model or "embedded", rows))


@finetune_app.command("compare")
def finetune_compare(
    adapter: Annotated[Path, typer.Argument(help="The candidate LoRA adapter directory.")],
    shipped: Annotated[Optional[Path], typer.Option(help="The adapter to beat (default: the shipped one).")] = None,
    data: Annotated[Optional[Path], typer.Option(help="Held-out examples (default: the shipped held-out regions).")] = None,
    whole_files_per_kind: Annotated[int, typer.Option(help="Held-out whole files a kind on which the candidate must still answer the whole file (0: none).", min=0)] = 3,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The shipping rule: both adapters on the same held-out regions, paired; exit 0 when the
    candidate ships (better overall with 95% confidence, no kind worse beyond its noise, whole
    files still answered whole, every demo file the shipped adapter answers whole too), else 1."""
    from hsedit.engine.engine import EngineOptions, shared_engine
    from hsedit.engine.provision import DEFAULT_ADAPTER, convert_gguf, default_gguf, merged_model
    from hsedit.train.finetune.dataset import HELDOUT_FILES, HELDOUT_REGIONS, demo_file_examples, load
    from hsedit.train.finetune.evaluate import evaluate_cached
    from hsedit.train.finetune.shipping import (
        DEMO_FILE_GUARD, DEMO_KEPT, WHOLE_FILE_GUARD, WHOLE_KEPT, compare, kept_whole, verdict,
    )

    examples = load(data or HELDOUT_REGIONS, split=None if data else "eval")
    whole_files = load(HELDOUT_FILES, split="eval", per_kind=whole_files_per_kind) if whole_files_per_kind else []
    demo_files = demo_file_examples()
    base = convert_gguf(default_gguf())
    results, whole, demo = {}, {}, {}
    for name, directory in (("shipped", shipped or DEFAULT_ADAPTER), ("candidate", adapter)):
        model = str(merged_model(base, Path(directory)))
        options = EngineOptions(model=model, drafter=COPY)
        def engine(o=options):
            return shared_engine(o)
        results[name] = evaluate_cached(engine, model, examples, options.resolved_dtype)
        whole[name] = evaluate_cached(engine, model, whole_files, options.resolved_dtype)
        demo[name] = evaluate_cached(engine, model, demo_files, options.resolved_dtype)
    pairs: dict[str, list[tuple[bool, bool]]] = {}
    for example, old, new in zip(examples, results["shipped"], results["candidate"]):
        pairs.setdefault(example.kind, []).append((old.exact, new.exact))

    def kept(scores: dict, at_least: float) -> list[tuple[bool, bool]]:
        return [(kept_whole(old.cut_off, old.unchanged_kept, at_least),
                 kept_whole(new.cut_off, new.unchanged_kept, at_least))
                for old, new in zip(scores["shipped"], scores["candidate"])]

    guard, demo_guard = kept(whole, WHOLE_KEPT), kept(demo, DEMO_KEPT)
    # Which files a guard lost, and how: what the next training pass has to fix.
    lost = [{"guard": name, "path": e.path, "instruction": e.instruction, "cut_off": new.cut_off,
             "unchanged_kept": round(new.unchanged_kept, 3)}
            for name, files, pairs_kept, scores in ((WHOLE_FILE_GUARD, whole_files, guard, whole),
                                                    (DEMO_FILE_GUARD, demo_files, demo_guard, demo))
            for e, (was, now), new in zip(files, pairs_kept, scores.get("candidate", [])) if was and not now]
    kinds, total = compare(pairs, {WHOLE_FILE_GUARD: guard} if guard else None,
                           {DEMO_FILE_GUARD: demo_guard} if demo_guard else None)
    ships, why = verdict(kinds, total)
    should_change = [k for k, e in enumerate(examples) if e.before != e.after]
    rates = {name: {"exact": sum(s.exact for s in scores) / len(scores),
                    "answered_unchanged": sum(scores[k].answered_unchanged for k in should_change) / len(should_change),
                    "cut_off": sum(s.cut_off for s in scores) / len(scores)}
             for name, scores in results.items()}
    if as_json:
        typer.echo(json.dumps({"ships": ships, "why": why, "kinds": [k.as_dict() for k in [*kinds, total]],
                               "rates": rates, "lost": lost}))
    else:
        for name, rate in rates.items():
            typer.echo(f"{name:9} exact {rate['exact']:.1%} · answered unchanged {rate['answered_unchanged']:.1%} "
                       f"of the should-change · cut off {rate['cut_off']:.1%}")
        for k in [*kinds, total]:
            measure = "kept" if k.kind in (WHOLE_FILE_GUARD, DEMO_FILE_GUARD) else "exact"
            typer.echo(f"{k.kind:20} n={k.n:3}  {measure} "
                       f"{k.shipped_exact:3} -> {k.candidate_exact:3}  "
                       f"+{k.wins} -{k.losses}  p_better {k.p_better:.3f}  p_worse {k.p_worse:.3f}"
                       + ("  WORSE" if k.worse else ""))
        for file in lost:
            how = "cut off" if file["cut_off"] else f"{file['unchanged_kept']:.1%} of its unchanged lines"
            typer.echo(f"lost ({file['guard']}): {file['path']} \"{file['instruction']}\": {how}")
        typer.echo(("ships: " if ships else "does not ship: ") + why)
    raise typer.Exit(0 if ships else 1)


def calibrate(
    model: Annotated[Optional[str], typer.Option(help="Target model, as for apply (default: embedded).")] = None,
    prompts: Annotated[Optional[list[Path]], typer.Option(help="General-text prompt files (JSON lines, {\"turns\": [...]}); default: the shared MT-Bench, SWE-bench and HumanEval sets.")] = None,
    limit: Annotated[int, typer.Option(help="General prompts to use.", min=10)] = 200,
    edits: Annotated[int, typer.Option(help="Held-out edit prompts (of the apply model's eval set): four fifths fit the shift of requests with a reference, the rest score it.", min=0)] = 80,
    out: Annotated[Optional[Path], typer.Option(help="Where to save the coefficients (default: the model's entry in hsedit's cache, which the hybrid drafter reads).")] = None,
) -> None:
    """Fit the copy drafter's acceptance model for a target on its own general-text outputs."""
    from hsedit.engine.engine import EngineOptions, shared_engine
    from hsedit.train.calibrate import calibrate as fit
    from hsedit.train.calibrate import edit_prompts_from_heldout, read_general_prompts, save_fitted, shared_prompt_files

    err = Console(stderr=True)
    files = list(prompts or shared_prompt_files())
    if not files:
        raise UsageError("no prompt files: pass --prompts FILE (JSON lines of general text)")
    general = read_general_prompts(files, limit)
    engine = shared_engine(EngineOptions(model=model, drafter=COPY))
    edit_prompts = edit_prompts_from_heldout(engine, edits) if edits else []
    fitted, report = fit(engine, general, edit_prompts, model or "embedded", log=lambda m: err.print(m, style="dim"))
    target = save_fitted(fitted, model, out)
    typer.echo(json.dumps({"saved": str(target), **report}, indent=2))


drafter_app = typer.Typer(no_args_is_help=True, help="Train the DSpark model drafter for a target.")


@drafter_app.command("train")
def drafter_train(
    out: Annotated[Path, typer.Option(help="Directory for the drafter (config.json + model.safetensors).")],
    target: Annotated[Optional[str], typer.Option(help="Target model, as --model takes it (default: embedded).")] = None,
    corpus: Annotated[Optional[list[Path]], typer.Option(help="JSON-lines prompt files the target answers ({\"turns\": [...]} or {\"prompt\": ...}); repeatable.")] = None,
    max_prompts: Annotated[int, typer.Option(min=0)] = 400,
    general_prompts: Annotated[int, typer.Option(help="Our own general chat prompts (writing, role play, reasoning, maths, extraction, science, humanities) the target answers too.", min=0)] = 0,
    edit_examples: Annotated[int, typer.Option(help="Generated edit examples added to the data.", min=0)] = 200,
    minutes: Annotated[float, typer.Option(help="Training time budget.", min=0.1)] = 60.0,
    max_updates: Annotated[Optional[int], typer.Option(help="Stop this run after this many updates (with --checkpoint, the next run continues: a budget curve's points; 0 with --init-drafter only recalibrates it, e.g. for --draft-vocab).", min=0)] = None,
    draft_layers: Annotated[int, typer.Option(min=1)] = 1,
    markov_rank: Annotated[int, typer.Option(min=0)] = 32,
    anchor_feature: Annotated[bool, typer.Option(help="EAGLE's input: the anchor row also reads the target's state before it (no new weights).")] = False,
    draft_vocab: Annotated[int, typer.Option(help="Draft only among the N tokens the target writes most often in the training answers (FR-Spec: a cheaper pass); 0: the whole vocabulary.", min=0)] = 0,
    ce_weight: Annotated[Optional[float], typer.Option(help="Cross-entropy share of the token loss, the L1 term gets the rest (default: DeepSpec's 0.1); short runs may raise it.", min=0.0, max=1.0)] = None,
    learning_rate: Annotated[float, typer.Option()] = 1e-3,
    data_cache: Annotated[Optional[Path], typer.Option(help="Keep prepared sequences here and reuse them.")] = None,
    checkpoint: Annotated[Optional[Path], typer.Option(help="Resume from and save to this directory (weights, optimizer, data position, RNG): runs accumulate; SIGTERM saves.")] = None,
    budget_updates: Annotated[Optional[int], typer.Option(help="With --checkpoint: decay the learning rate over this many updates, counted over every run.", min=1)] = None,
    init_drafter: Annotated[Optional[Path], typer.Option(help="Start from this trained drafter's weights (same shape), e.g. hsedit/models/dspark, instead of random ones.")] = None,
) -> None:
    """Generate target data, train backbone + Markov + confidence heads, fit STS, save."""
    from hsedit.train.drafter.train import DrafterTrainConfig, run

    config = DrafterTrainConfig(
        target=target, output=str(out), corpus=[str(c) for c in corpus or []], max_prompts=max_prompts,
        general_prompts=general_prompts, init_drafter=str(init_drafter) if init_drafter else None,
        edit_examples=edit_examples, minutes=minutes, max_steps=max_updates, draft_layers=draft_layers, markov_rank=markov_rank,
        anchor_feature=anchor_feature, draft_vocab=draft_vocab, learning_rate=learning_rate, data_cache=str(data_cache) if data_cache else None,
        checkpoint=str(checkpoint) if checkpoint else None, budget_updates=budget_updates,
        **({"ce_weight": ce_weight} if ce_weight is not None else {}),
    )
    path, report = run(config, log=typer.echo)
    summary = {k: v for k, v in report.items() if k not in ("history", "config")}
    typer.echo(json.dumps({"drafter": str(path), **summary}))


@drafter_app.command("eval")
def drafter_eval(
    prompts: Annotated[list[Path], typer.Option(help="JSON-lines prompt files the target answers (new to the drafter).")],
    drafter: Annotated[Optional[str], typer.Option(help="The DSpark drafter directory to evaluate (default: the shipped one, for the embedded models).")] = None,
    target: Annotated[Optional[str], typer.Option(help="Target model, as --model takes it (default: embedded).")] = None,
    limit: Annotated[int, typer.Option(help="Prompts to use.", min=1)] = 40,
    edits: Annotated[int, typer.Option(help="Held-out edit examples to add (never trained on).", min=0)] = 40,
) -> None:
    """Per-position acceptance and calibration (ECE, AUC) of a drafter's survival, before/after STS."""
    from hsedit.engine.provision import resolve_drafter
    from hsedit.train.drafter.data import read_prompts
    from hsedit.train.drafter.train import evaluate
    from hsedit.train.finetune.dataset import heldout_sample

    err = Console(stderr=True)
    report = evaluate(resolve_drafter(drafter, target), target, read_prompts(prompts, limit), heldout_sample(edits),
                      log=lambda m: err.print(m, style="dim"))
    typer.echo(json.dumps(report, indent=2))
