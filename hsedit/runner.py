"""Where edits run: on a running `hsedit serve` when the flag, HSEDIT_SERVER or `[tool.hsedit]`
names one; else on the warm background engine for these settings (hsedit/daemon.py, started if
none runs) unless that is switched off; else on an engine started in this process. Every command
that edits (apply, batch, the hooks) chooses here, the same way."""

from __future__ import annotations

from hsedit.apply import EditRunner
from hsedit.config import ProjectConfig
from hsedit.drafting.chain import NO_DRAFTER
from hsedit.errors import UsageError


def open_runner(
    config: ProjectConfig,
    *,
    server: str | None = None,
    model: str | None = None,
    drafter: str | None = None,
    dspark: str | None = None,
    no_spec: bool = False,
    compile: bool = False,
    seed: int | None = None,
    dtype: str | None = None,
    daemon: bool | None = None,
    on_daemon_start=None,
) -> EditRunner:
    """The server's client, or an engine for these settings (each resolved flag, environment,
    `config`, default). Engine settings given as flags together with a server are refused: the
    server's own options decide, and silently ignoring a flag would mislead (one line, exit 2)."""
    url = config.resolve("server", server, None)
    if url:
        from hsedit.client import ServerClient, ServerRunner

        flags = {"--drafter": drafter, "--model": model, "--dspark": dspark, "--no-spec": no_spec, "--compile": compile,
                 "--dtype": dtype}
        given = [flag for flag, value in flags.items() if value not in (None, False)]
        if given:
            raise UsageError(f"{given[0]} is the server's to set (hsedit serve {given[0]} …); drop it or --server")
        return ServerRunner(ServerClient(url))
    from hsedit.engine.options import EngineOptions

    options = EngineOptions(
        model=config.resolve("model", model, None),
        drafter=NO_DRAFTER if no_spec else config.drafter_or_default(drafter),
        compile=compile, seed=seed or 0, dspark=dspark, dtype=config.dtype_or_default(dtype),
    )
    if config.daemon_or_default(daemon):
        from hsedit.daemon import daemon_runner

        return daemon_runner(options, keep_alive_s=config.keep_alive_or_default(None), on_start=on_daemon_start,
                             compile_behind=config.compile_behind_or_default(None))
    from hsedit.apply import EmbeddedRunner
    from hsedit.engine.engine import shared_engine

    return EmbeddedRunner(shared_engine(options))
