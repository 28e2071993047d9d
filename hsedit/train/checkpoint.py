"""What both trainers need to accumulate across runs: a checkpoint directory replaced whole
(a crash leaves the old one or the new one, never half of each), one pass over the data in a
random order, and a stop on SIGTERM or Ctrl-C that saves before it exits."""

from __future__ import annotations

import os
import random
import shutil
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from hsedit.errors import UsageError

STATE_FILE = "state.pt"  # a checkpoint's training state (torch.save), beside its weights


def load_state(checkpoint: str | None, data_id: str, same_data: str) -> dict | None:
    """The saved state of a checkpoint directory, or None for a new one. A checkpoint of other
    data is refused (its place in the data would mean other examples); `same_data` says what
    to resume it with."""
    import torch

    if not checkpoint or not (Path(checkpoint) / STATE_FILE).is_file():
        return None
    state = torch.load(Path(checkpoint) / STATE_FILE, weights_only=False, map_location="cpu")
    if state["data"] != data_id:
        raise UsageError(f"{checkpoint} was trained on other data ({state['data']}, not {data_id}): "
                         f"resume it with {same_data}, or give a new --checkpoint")
    return state


def replace_directory(target: str | Path, write: Callable[[Path], None]) -> None:
    """`write(staging)` fills a directory beside `target`, which then takes its place."""
    target = Path(target)
    staging = target.with_name(target.name + ".saving")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    write(staging)
    old = target.with_name(target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        os.replace(target, old)
    os.replace(staging, target)
    shutil.rmtree(old, ignore_errors=True)


def shuffled_pass(rng: random.Random, count: int) -> list[int]:
    """One pass over `count` examples in a random order."""
    order = list(range(count))
    rng.shuffle(order)
    return order


class StopRequest:
    """SIGTERM or Ctrl-C while training into a checkpoint: the loop stops at its next safe point
    and saves (a background run that is stopped keeps what it learnt since its last save; a
    second signal stops at once, without saving)."""

    def __init__(self, enabled: bool) -> None:
        self.signal: str | None = None
        self._previous: dict = {}
        if enabled and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._note)

    def _note(self, signum, frame) -> None:
        if self.signal is not None:  # asked twice: stop now
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
