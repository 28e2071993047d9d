"""What the bench compares: method specs (`hybrid@15`, `vllm-ngram@63`, `hybrid:float32`,
`hybrid:compiled`) and the engine each one runs on (vLLM's own drafters in a process of their
own: `children.py`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hsedit.drafting.chain import COPY, DSPARK, HYBRID, NO_DRAFTER, VLLM_BUILTINS, VLLM_SUFFIX
from hsedit.engine.engine import Engine, EngineOptions, shared_engine
from hsedit.errors import UsageError

DEFAULT_METHODS = (NO_DRAFTER, COPY, DSPARK, HYBRID)


class UnavailableMethod(Exception):
    """A method that cannot run on this installation (e.g. a missing optional package)."""


COMPILED = "compiled"  # a variant: vLLM's compiled mode instead of eager


def method_name(method: str) -> str:
    """The drafter of a method spec: `hybrid@15:float32` -> `hybrid`."""
    return method.split(":", 1)[0].split("@", 1)[0]


def max_draft_of(method: str) -> int | None:
    """The maximum draft of a method spec, None for the engine's default."""
    _, _, size = method.split(":", 1)[0].partition("@")
    return int(size) if size else None


def variant_of(method: str) -> str:
    """The engine variant of a method spec (what follows ':': a dtype, `compiled`, or both joined
    by '+'), '' for the default; methods are compared within one variant."""
    return method.partition(":")[2]


def dtype_of(method: str) -> str:
    """The target dtype of a method spec (`auto` unless it names one)."""
    return next((part for part in variant_of(method).split("+") if part and part != COMPILED), "auto")


def compiled(method: str) -> bool:
    return COMPILED in variant_of(method).split("+")


def plain_for(method: str) -> str:
    """The plain decoding a method is compared with and checked against: the same variant."""
    variant = variant_of(method)
    return f"{NO_DRAFTER}:{variant}" if variant else NO_DRAFTER


def default_max_draft(method: str) -> int:
    if method_name(method) == NO_DRAFTER:
        return 0
    return EngineOptions(drafter=method_name(method)).max_draft


def check_method(method: str) -> str:
    """The method spec with its drafter's current name (`ngram@15` -> `copy@15`); a one-line
    usage error for an unknown drafter, a bad maximum draft or variant."""
    from hsedit.config import check_dtype
    from hsedit.drafting.chain import check_drafter

    spec, _, variant = method.partition(":")
    name = check_drafter(method_name(spec), "--drafters")
    size = spec.partition("@")[2]
    if size and (not size.isdigit() or int(size) < 1):
        raise UsageError(f"--drafters: {method!r}: the maximum draft after @ must be a whole number of at least 1")
    parts = [part for part in variant.split("+") if part]
    for part in parts:
        if part != COMPILED:
            check_dtype(part, f"--drafters: {method!r}: the dtype after :")
    dtypes = [part for part in parts if part not in (COMPILED, "auto")]
    if len(dtypes) > 1 or parts.count(COMPILED) > 1:
        raise UsageError(f"--drafters: {method!r}: after ':' name one dtype and/or `compiled`, joined by '+'")
    canonical = "+".join(dtypes + ([COMPILED] if COMPILED in parts else []))
    return (f"{name}@{size}" if size else name) + (f":{canonical}" if canonical else "")


def suffix_package_dir() -> Path:
    """Where `make suffix` installs arctic-inference: apart from the project's environment, since
    its vLLM plugin patches every engine that starts where it is importable. Only the child
    process of the `vllm-suffix` method puts it on its path."""
    from hsedit.engine.provision import cache_dir

    return cache_dir() / "arctic-inference"


def engine_for_method(method: str, model: str | None = None, dspark: str | None = None) -> Engine:
    from hsedit.bench.children import ChildEngine

    name = method_name(method)
    extra_path = None
    if name == VLLM_SUFFIX and importlib.util.find_spec("arctic_inference") is None:
        if not (suffix_package_dir() / "arctic_inference").is_dir():
            raise UnavailableMethod(
                "vLLM's suffix decoding needs arctic-inference: `make suffix` builds it (from source, about a "
                f"minute) into {suffix_package_dir()}"
            )
        extra_path = str(suffix_package_dir())
    options = EngineOptions(model=model, drafter=name, dspark=dspark, num_speculative_tokens=max_draft_of(method),
                            dtype=dtype_of(method), compile=compiled(method))
    if name in VLLM_BUILTINS:
        like = shared_engine(EngineOptions(model=model, drafter=NO_DRAFTER, dtype=dtype_of(method),
                                           compile=compiled(method)))
        return ChildEngine(options, like=like, extra_path=extra_path)
    return shared_engine(options)
