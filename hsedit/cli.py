"""hsedit's commands. Only argument handling and printing live here."""

from __future__ import annotations

import json
import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from hsedit.errors import EXIT_CODES, EXIT_INTERRUPTED, HseditError, UsageError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="LLM code edits on an embedded vLLM engine with speculative copying.",
)



@app.callback()
def _root() -> None:
    """LLM code edits on an embedded vLLM engine with speculative copying."""


EXIT_HELP = "Exit codes: " + "; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items())


def _fail(console: Console, error: HseditError) -> typer.Exit:
    console.print(f"hsedit: error: {error}", style="red", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(error.exit_code)


@app.command(epilog=EXIT_HELP)
def apply(
    file: Annotated[Path, typer.Argument(help="The file to edit.")],
    instruction: Annotated[str, typer.Argument(help="What to change, in plain words.")],
    write: Annotated[bool, typer.Option("--write", help="Replace the file (atomically) when the result parses.")] = False,
    force: Annotated[bool, typer.Option("--force", help="With --write: write even if the result does not parse.")] = False,
    diff_path: Annotated[Optional[Path], typer.Option("--diff", help="Write the unified diff here instead of stdout.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: new text, diff, stats.")] = False,
    no_spec: Annotated[bool, typer.Option("--no-spec", help="Plain decoding, no drafts (the baseline).")] = False,
    drafter: Annotated[str, typer.Option(help="Drafter: ngram (copy), none, vllm-ngram.")] = "ngram",
    max_tokens: Annotated[Optional[int], typer.Option(help="Cap on generated tokens (default: from the file's size).", min=1)] = None,
    temperature: Annotated[float, typer.Option(help="0 is greedy; output is exactly the model's either way.", min=0.0)] = 0.0,
    seed: Annotated[Optional[int], typer.Option(help="Sampling seed (with --temperature > 0).")] = None,
    model: Annotated[Optional[str], typer.Option(help="HF hub id, HF directory or .gguf file (default: embedded SmolLM2).")] = None,
    compile: Annotated[bool, typer.Option("--compile", help="vLLM compiled mode: faster steps, slow first start.")] = False,
) -> None:
    """Rewrite FILE as INSTRUCTION says; print a unified diff (or --write it)."""
    from hsedit import apply as core
    from hsedit.edit.diff import summarize
    from hsedit.engine.engine import DRAFTER_CHOICES, EngineOptions, shared_engine

    err = Console(stderr=True)
    live_wanted = not as_json and not os.environ.get("PRE_COMMIT") and err.is_terminal
    try:
        if no_spec:
            drafter = "none"
        if drafter not in DRAFTER_CHOICES:
            raise UsageError(f"unknown drafter {drafter!r}; choose from {', '.join(DRAFTER_CHOICES)}")
        if force and not write:
            raise UsageError("--force only makes sense with --write")
        job = core.prepare(file, instruction)
        with err.status("starting the engine…") if live_wanted else nullcontext():
            engine = shared_engine(EngineOptions(model=model, drafter=drafter, compile=compile, seed=seed or 0))
        view = _live_view(err, job) if live_wanted else None
        with view or nullcontext():
            result = core.run_edit(
                engine, job, max_tokens=max_tokens, temperature=temperature, seed=seed,
                on_step=view.update if view else None,
            )
        if as_json:
            typer.echo(json.dumps(result.as_dict()))
        elif diff_path is not None:
            diff_path.write_text(result.diff, encoding="utf-8")
        elif result.diff:
            typer.echo(result.diff, nl=False)
        if not as_json:
            _report(err, result, summarize(result.diff) if result.diff else None)
        if not result.validation.checked:
            err.print(f"hsedit: note: {result.validation.message}; the result was not syntax-checked", style="yellow")
        if write:
            if core.write_result(result, force=force):
                err.print(f"wrote {job.display_path}", style="green")
        elif not result.validation.ok:
            err.print(f"hsedit: warning: the result does not parse ({result.validation.message})", style="yellow")
    except HseditError as error:
        raise _fail(err, error) from None
    except KeyboardInterrupt:
        err.print("hsedit: interrupted; the file is untouched", style="yellow")
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _live_view(console: Console, job):
    from hsedit.ui import LiveEdit

    return LiveEdit(console, title=f"{job.display_path} — {job.instruction}", prefix="")


def _report(console: Console, result, summary) -> None:
    from hsedit.ui import status_line

    change = f"+{summary.added} -{summary.removed} lines" if summary else "no change"
    line = f"{result.job.display_path}: {change} · {status_line(result.stats, result.stats.finished_at)}"
    console.print(line, highlight=False, soft_wrap=True)


def main() -> None:  # console-script entry point
    try:
        app()
    except KeyboardInterrupt:  # before typer took over
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
