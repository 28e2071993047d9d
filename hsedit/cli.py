"""hsedit's commands. Only argument handling and printing live here."""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from typer.core import TyperGroup

from hsedit.drafting.copy_drafter import DEFAULT_MAX_DRAFT, PRICED_MAX_DRAFT
from hsedit.errors import EXIT_CODES, EXIT_INTERRUPTED, HseditError, InputFileError, UsageError
from hsedit.train.commands import register as register_training_commands


class _OneLineErrors(TyperGroup):
    """The one error-to-exit mapping of every command: an HseditError is its one line on stderr
    and its exit code; Ctrl-C is exit 130 (the file is untouched: writes are atomic)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except HseditError as error:
            raise _fail(Console(stderr=True), error) from None
        except KeyboardInterrupt:
            Console(stderr=True).print("hsedit: interrupted; the file is untouched", style="yellow")
            raise typer.Exit(EXIT_INTERRUPTED) from None


app = typer.Typer(
    cls=_OneLineErrors,
    add_completion=False,
    no_args_is_help=True,
    help="LLM code edits on an embedded vLLM engine with speculative copying.",
)

@app.callback()
def _root() -> None:
    """LLM code edits on an embedded vLLM engine with speculative copying."""


MODEL_HELP = "HF hub id, HF directory, .gguf file, or embedded / embedded-base (default: embedded, the fine-tuned SmolLM2)."
EXIT_HELP = "Exit codes: " + "; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items())


DrafterOption = Annotated[
    Optional[str],
    typer.Option(help="Drafter: hybrid (copy + model, chosen per request by price; the default), copy (from the file: n-gram lookup; `ngram` also works), dspark (model), none, vllm-ngram, vllm-suffix. Also HSEDIT_DRAFTER or \\[tool.hsedit] drafter."),
]
MaxDeletionOption = Annotated[
    Optional[float],
    typer.Option(min=0.0, max=1.0, help="Write guard: refuse an answer shorter than the file by more than this share of its lines unless the instruction asks to delete (default 0.5; \\[tool.hsedit] max_deletion)."),
]
ServerOption = Annotated[
    Optional[str],
    typer.Option(help="Edit on a running `hsedit serve` at this URL instead of starting an engine (also HSEDIT_SERVER or \\[tool.hsedit] server; the key from HSEDIT_API_KEY)."),
]
DtypeOption = Annotated[
    Optional[str],
    typer.Option(help="The model's dtype: auto (bf16 where the hardware computes it natively: a GPU, a CPU with AVX512-BF16 or AMX; else float32; the default), bfloat16 or float32. Also HSEDIT_DTYPE or \\[tool.hsedit] dtype."),
]
NoDaemonOption = Annotated[
    bool,
    typer.Option("--no-daemon", help="Start the engine in this process instead of using (or starting) the warm background engine for these settings. Also HSEDIT_DAEMON=0 or \\[tool.hsedit] daemon = false."),
]
ScopeOption = Annotated[
    Optional[str],
    typer.Option(help="What the model rewrites: regions (only the parts of a Python file the instruction touches, each checked, all in one batch), file (the whole file at once) or auto (regions where the instruction is understood, else the whole file; the default). Also HSEDIT_SCOPE or \\[tool.hsedit] scope."),
]
DsparkOption = Annotated[
    Optional[str],
    typer.Option(help="DSpark drafter directory (DeepSpec layout); default: the shipped one, for the embedded models."),
]


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
    drafter: DrafterOption = None,
    max_tokens: Annotated[Optional[int], typer.Option(help="Cap on generated tokens (default: from the file's size).", min=1)] = None,
    max_deletion: MaxDeletionOption = None,
    temperature: Annotated[float, typer.Option(help="0 is greedy; output is exactly the model's either way.", min=0.0)] = 0.0,
    seed: Annotated[Optional[int], typer.Option(help="Sampling seed (with --temperature > 0).")] = None,
    model: Annotated[Optional[str], typer.Option(help=MODEL_HELP)] = None,
    compile: Annotated[bool, typer.Option("--compile", help="vLLM compiled mode: faster steps, slow first start.")] = False,
    dspark: DsparkOption = None,
    server: ServerOption = None,
    scope: ScopeOption = None,
    dtype: DtypeOption = None,
    no_daemon: NoDaemonOption = False,
) -> None:
    """Rewrite FILE as INSTRUCTION says; print a unified diff (or --write it)."""
    from hsedit import apply as core
    from hsedit.config import project_config
    from hsedit.edit.diff import summarize
    from hsedit.runner import open_runner
    from hsedit.scope import run_edit

    err = Console(stderr=True)
    live_wanted = not as_json and not os.environ.get("PRE_COMMIT") and err.is_terminal
    config = project_config()
    max_deletion = config.max_deletion_or_default(max_deletion)
    scope = config.scope_or_default(scope)
    core.check_write_options(write, force)
    job = core.load_job(file, instruction, write=write)
    started = time.perf_counter()
    with err.status("starting the engine…") if live_wanted else nullcontext():
        runner = open_runner(config, server=server, model=model, drafter=drafter, dspark=dspark, no_spec=no_spec,
                             compile=compile, seed=seed, dtype=dtype, daemon=False if no_daemon else None,
                             on_daemon_start=None if as_json else _daemon_starting(err))
    if not as_json:
        err.print(
            f"hsedit: engine ready in {time.perf_counter() - started:.1f} s ({runner.description}); editing {job.display_path}",
            style="dim", highlight=False, soft_wrap=True,
        )
    warning = runner.dspark_target.warning() if runner.dspark_target else None
    if warning:
        err.print(f"hsedit: note: {warning}", style="yellow", highlight=False, soft_wrap=True)
    view = _live_view(err, job) if live_wanted else None
    with view or nullcontext():
        result = run_edit(
            runner, job, scope=scope, max_tokens=max_tokens, temperature=temperature, seed=seed,
            on_step=view.update if view else None, max_deletion=max_deletion,
        )
    if as_json:
        target = runner.dspark_target.as_dict() if runner.dspark_target else None
        typer.echo(json.dumps({**result.as_dict(), "dspark_target": target}))
    elif diff_path is not None:
        _write_diff(diff_path, result.diff)
    elif result.diff:
        typer.echo(result.diff, nl=False)
    if not as_json:
        _report(err, result, summarize(result.diff) if result.diff else None)
    if not result.validation.checked:
        err.print(f"hsedit: note: {result.validation.message}; the result was not syntax-checked", style="yellow")
    if not result.check.checked and not as_json:
        err.print(f"hsedit: note: instruction not checked ({result.check.reason})", style="yellow", highlight=False, soft_wrap=True)
    elif result.check.ok and not as_json:
        err.print(f"check: {result.check.reason}", style="dim", highlight=False, soft_wrap=True)
    if core.settle(result, write=write, force=force):
        err.print(f"wrote {job.display_path}", style="green")
    elif not write and not result.validation.ok:
        err.print(f"hsedit: warning: the result does not parse ({result.validation.message})", style="yellow")


@app.command()
def bench(
    tasks: Annotated[Optional[Path], typer.Option(help="Your own task file (JSON lines); default: the built-in workloads (light, heavy, snippet, chat, mixed).")] = None,
    drafters: Annotated[str, typer.Option(help="Comma-separated methods: none, copy, vllm-ngram, vllm-suffix, dspark, hybrid, each optionally with its maximum draft (hybrid@15, vllm-ngram@63; default " f"{PRICED_MAX_DRAFT} for hybrid, {DEFAULT_MAX_DRAFT} for the others) and its engine variant after a colon: a dtype and/or compiled (hybrid:float32, hybrid:compiled); plain decoding of every variant always runs.")] = "none,copy,dspark,hybrid",
    batch_size: Annotated[str, typer.Option(help="Comma-separated batch sizes (concurrent requests).")] = "1,4",
    workloads: Annotated[Optional[str], typer.Option(help="Built-in workloads to run (comma-separated): light, heavy, snippet, chat, mixed (the default) and large (renames in 490-910-line files).")] = None,
    scope: Annotated[str, typer.Option(help="Comma-separated scopes each workload runs at: file (whole files) and regions (the regions `apply --scope regions` sends); a workload that cannot be cut runs whole.")] = "file",
    repeats: Annotated[int, typer.Option(help="Rounds over everything (methods interleaved).", min=1)] = 1,
    temperature: Annotated[float, typer.Option(help="Sample every request at this temperature, each with a seed of its own (the same for every method); 0: greedy.", min=0.0, max=2.0)] = 0.0,
    noise: Annotated[bool, typer.Option(help="Below float32, measure the dtype's own noise after the timed rounds (plain decoding once more, each answer scored again): greedy tolerance is the larger of it and the rounding bound. --no-noise: the bound alone.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    plot: Annotated[Optional[Path], typer.Option(help="Write a PNG: throughput ratio against batch size per workload.")] = None,
    model: Annotated[Optional[str], typer.Option(help=MODEL_HELP)] = None,
    dspark: DsparkOption = None,
) -> None:
    """Compare drafting methods on the same workloads and batch sizes, side by side in one run."""
    from hsedit.bench import check_method, chosen_workloads, engine_for_method, run_bench
    from hsedit.config import project_config

    err = Console(stderr=True)
    model = project_config().resolve("model", model, None)  # the methods are the flag's
    methods = [check_method(m.strip()) for m in drafters.split(",") if m.strip()]
    sizes = _positive_ints(batch_size, "--batch-size")
    from hsedit.config import check_scope

    scopes = [check_scope(s.strip()) for s in scope.split(",") if s.strip()]
    chosen = chosen_workloads(tasks, workloads, scopes)
    report = run_bench(
        chosen, methods, sizes, repeats,
        engine_for=lambda method: engine_for_method(method, model, dspark),
        temperature=temperature,
        noise=noise,
        on_run=lambda method, workload, b, r: err.print(
            f"[{r + 1}/{repeats}] {workload:>8} · batch {b:>2} · {method}", style="dim", highlight=False
        ),
    )
    if plot is not None:
        from hsedit.plot import plot_report

        err.print(f"plot: {plot_report(report, plot)}", style="dim")
    if as_json:
        typer.echo(json.dumps(report.as_dict()))
    else:
        from hsedit.ui import bench_table

        console = Console()
        console.print(bench_table(report), width=max(console.width, 150))
    for method, target in report.dspark_targets.items():
        if (warning := target.warning()) is not None:
            err.print(f"hsedit: note: {method}: {warning}", style="yellow", highlight=False, soft_wrap=True)
    if not report.exact:
        mismatched = [c for c in report.cells if c.mismatches]
        err.print("hsedit: error: outputs differ from plain decoding: " + "; ".join(
            f"{c.method} at batch {c.batch_size} on {c.workload}: {', '.join(c.mismatches)}" for c in mismatched
        ), style="red", soft_wrap=True)
        raise typer.Exit(1)


def _positive_ints(text: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{option} takes comma-separated whole numbers, not {text!r}") from None
    if not values or min(values) < 1:
        raise UsageError(f"{option} needs numbers of at least 1, not {text!r}")
    return values


@app.command(epilog=EXIT_HELP)
def batch(
    tasks: Annotated[Path, typer.Argument(help='JSON lines: {"path", "instruction"} or {"path", "update"}.')],
    write: Annotated[bool, typer.Option("--write", help="Replace each file atomically (only outputs that parse and pass the write guard).")] = False,
    force: Annotated[bool, typer.Option("--force", help="With --write: write outputs that do not parse or that the guard refuses.")] = False,
    patch: Annotated[Optional[Path], typer.Option(help="Write one combined patch here (paths relative to the task file).")] = None,
    results: Annotated[Optional[Path], typer.Option(help="Results file (default: TASKS.results.jsonl); finished tasks are skipped on rerun.")] = None,
    max_batch: Annotated[int, typer.Option(help="Requests run concurrently in the engine (an edit by regions makes one per region).", min=1)] = 8,
    max_tokens: Annotated[Optional[int], typer.Option(min=1)] = None,
    max_deletion: MaxDeletionOption = None,
    drafter: DrafterOption = None,
    model: Annotated[Optional[str], typer.Option(help=MODEL_HELP)] = None,
    dspark: DsparkOption = None,
    server: ServerOption = None,
    scope: ScopeOption = None,
    dtype: DtypeOption = None,
    no_daemon: NoDaemonOption = False,
) -> None:
    """Run every edit of a task file concurrently in one engine (or on a server); resumable."""
    from hsedit.apply import check_write_options
    from hsedit.batch import combined_patch, default_results_file, exit_status, load_batch, run_batch
    from hsedit.config import project_config
    from hsedit.runner import open_runner
    from hsedit.ui import BatchProgress, batch_table

    err = Console(stderr=True)
    results_file = results or default_results_file(tasks)
    config = project_config()
    max_deletion = config.max_deletion_or_default(max_deletion)
    scope = config.scope_or_default(scope)
    check_write_options(write, force)
    loaded = load_batch(tasks)
    runner = open_runner(config, server=server, model=model, drafter=drafter, dspark=dspark, dtype=dtype,
                         daemon=False if no_daemon else None, on_daemon_start=_daemon_starting(err))

    show = not os.environ.get("PRE_COMMIT") and err.is_terminal
    with BatchProgress(err, total=len(loaded), show=show) as progress:
        outcomes = run_batch(
            runner, loaded, results_file, write=write, force=force, max_batch=max_batch, max_tokens=max_tokens,
            max_deletion=max_deletion, scope=scope, on_step=progress.on_step, on_done=progress.on_done,
        )
    err.print(batch_table(outcomes, skipped=len(loaded) - len(outcomes)))
    if patch is not None:
        _write_diff(patch, combined_patch(loaded, results_file))
    raise typer.Exit(exit_status(outcomes))


@app.command(epilog=EXIT_HELP)
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on; anything but loopback needs --api-key.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=1, max=65535)] = 8421,
    model: Annotated[Optional[str], typer.Option(help="As for apply (also HSEDIT_MODEL or \\[tool.hsedit] model).")] = None,
    drafter: DrafterOption = None,
    api_key: Annotated[Optional[str], typer.Option(help="Require this key (Authorization: Bearer KEY) on every endpoint but /health; also HSEDIT_API_KEY.")] = None,
    max_queue: Annotated[int, typer.Option(help="Requests held at once (running + waiting); more get 429 with Retry-After.", min=1)] = 64,
    max_tokens: Annotated[Optional[int], typer.Option(help="Largest max_tokens a request may ask for (default: the model's context).", min=1)] = None,
    max_body_bytes: Annotated[int, typer.Option(help="Largest request body; larger ones get 413.", min=1024)] = 4 << 20,
    multiprocessing: Annotated[bool, typer.Option("--multiprocessing/--no-multiprocessing", help="vLLM's engine core in its own process (the drafters run there; per-token sources are then not shown).")] = False,
    tensor_parallel_size: Annotated[int, typer.Option(help="vLLM tensor parallelism (GPUs per model); every drafter runs in each worker.", min=1)] = 1,
    pipeline_parallel_size: Annotated[int, typer.Option(help="vLLM pipeline parallelism (vLLM 0.32 cannot draft with it: --drafter none).", min=1)] = 1,
    distributed_executor_backend: Annotated[Optional[str], typer.Option(help="vLLM's executor for parallel workers: mp or ray (several machines).")] = None,
    compile: Annotated[bool, typer.Option("--compile/--no-compile", help="vLLM's compiled mode (the default for a server, which lives long enough to repay it): steps 1.2-1.5x cheaper, a start of about 45 s (a minute or more the first time) instead of 8.")] = True,
    dspark: DsparkOption = None,
    dtype: DtypeOption = None,
    socket_path: Annotated[Optional[Path], typer.Option("--socket", hidden=True, help="Listen on this Unix socket (the background engine).")] = None,
    daemon_key: Annotated[Optional[str], typer.Option(hidden=True)] = None,
    keep_alive: Annotated[Optional[float], typer.Option(hidden=True, help="With --socket: exit after this many idle seconds.")] = None,
    twin_key: Annotated[str | None, typer.Option(hidden=True, help="With --socket, eager: the key of the compiled twin to start behind it.")] = None,
) -> None:
    """Serve one warm engine over HTTP: OpenAI chat completions (with Predicted Outputs), /v1/apply for hsedit's clients, /health, /metrics."""
    from hsedit.config import project_config
    from hsedit.server.main import serve as run_server
    from hsedit.server.main import server_settings

    err = Console(stderr=True)
    options, settings = server_settings(
        project_config(), host=host, model=model, drafter=drafter, api_key=api_key, max_queue=max_queue,
        max_tokens=max_tokens, max_body_bytes=max_body_bytes, multiprocessing=multiprocessing,
        tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size,
        distributed_executor_backend=distributed_executor_backend, compile=compile, dspark=dspark, dtype=dtype,
    )
    started = time.perf_counter()
    compiling = " and compiling it (about a minute; --no-compile starts in seconds)" if options.compile else ""
    err.print(f"hsedit: starting the engine{compiling} (drafter: {options.drafter})…", style="dim", highlight=False)
    run_server(options, settings, host=host, port=port, on_ready=lambda url: err.print(
        f"hsedit: serving {settings.served_model} at {url} (engine ready in {time.perf_counter() - started:.1f} s; "
        "Ctrl-C or SIGTERM stops)", highlight=False, soft_wrap=True,
    ), socket_path=socket_path, daemon_key=daemon_key, keep_alive_s=keep_alive, twin_key=twin_key)


register_training_commands(app)

hook_app = typer.Typer(no_args_is_help=True, help="pre-commit hooks (instructions from \\[tool.hsedit.instructions] in pyproject.toml).")
app.add_typer(hook_app, name="hook")


@hook_app.command("check")
def hook_check(files: Annotated[Optional[list[str]], typer.Argument()] = None) -> None:
    """Fail and print the diff when an edit would change a staged file."""
    _hook("check", files or [])


@hook_app.command("fix")
def hook_fix(files: Annotated[Optional[list[str]], typer.Argument()] = None) -> None:
    """Rewrite staged files (only outputs that parse) and fail so they are re-staged."""
    _hook("fix", files or [])


def _hook(mode: str, files: list[str]) -> None:
    from hsedit.hook import hook_command

    raise typer.Exit(hook_command(mode, files, root=Path.cwd(), say=typer.echo))


daemon_app = typer.Typer(no_args_is_help=True, help="The warm background engines (one per set of engine settings).")
app.add_typer(daemon_app, name="daemon")


@daemon_app.command("status")
def daemon_status(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """What each background engine runs: its settings, memory, idle time and log file."""
    from hsedit.daemon import running_daemons

    found = running_daemons()
    if as_json:
        typer.echo(json.dumps([{**d.state, "answers": d.health is not None, "memory_mib": d.memory_mib,
                                "idle_s": (d.health or {}).get("daemon", {}).get("idle_s")} for d in found]))
        return
    if not found:
        typer.echo("no background engine is running")
    for d in found:
        settings = ", ".join(f"{k} {v}" for k, v in d.state["settings"].items() if v not in (None, False))
        idle = (d.health or {}).get("daemon", {}).get("idle_s")
        state = f"idle {idle:.0f} s of {d.state['keep_alive_s']:.0f}" if idle is not None else "not answering"
        memory = f"{d.memory_mib:.0f} MiB" if d.memory_mib is not None else "? MiB"
        typer.echo(f"pid {d.pid}: {settings} · {memory} · {state} · log {d.state['log']}")


@daemon_app.command("stop")
def daemon_stop(
    all_: Annotated[bool, typer.Option("--all", help="Stop every background engine, not only the one for these settings.")] = False,
    model: Annotated[Optional[str], typer.Option(help=MODEL_HELP)] = None,
    drafter: DrafterOption = None,
    dspark: DsparkOption = None,
    dtype: DtypeOption = None,
    compile: Annotated[bool, typer.Option("--compile")] = False,
) -> None:
    """Stop the background engine for these settings (as apply would resolve them, and its compiled
    twin), or all of them."""
    from hsedit.config import project_config
    from hsedit.daemon import running_daemons, spec_for, stop, twin_spec
    from hsedit.engine.options import EngineOptions

    config = project_config()
    keys = None
    if not all_:
        options = EngineOptions(model=config.resolve("model", model, None), drafter=config.drafter_or_default(drafter),
                                compile=compile, dspark=dspark, dtype=config.dtype_or_default(dtype))
        spec = spec_for(options)
        twin = twin_spec(spec)
        keys = {spec.key} | ({twin.key} if twin is not None else set())
    stopped = 0
    for d in running_daemons():
        if keys is None or d.state["key"] in keys:
            stopped += stop(d)
    typer.echo(f"stopped {stopped} background engine(s)" if stopped else "no matching background engine was running")


def _daemon_starting(console: Console):
    def say(spec) -> None:
        console.print(f"hsedit: starting the background engine for these settings (later edits reuse it; "
                      f"`hsedit daemon stop` ends it; log {spec.log})", style="dim", highlight=False, soft_wrap=True)

    return say


def _write_diff(path: Path, diff: str) -> None:
    from hsedit.edit.files import atomic_write

    try:
        atomic_write(path, diff)
    except OSError as exc:
        raise InputFileError(f"cannot write the diff to {path}: {exc.strerror or exc}") from exc


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
