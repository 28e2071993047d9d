"""Text of a growing token list, handed out as it becomes final (the stream's text pieces)."""

from __future__ import annotations

from typing import Any


class IncrementalText:
    """Text of a growing token list, handed out as it becomes final.

    A byte-level tokenizer can split one character over several tokens; a trailing
    replacement character means "not yet complete", so it is held back until more arrive.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.shown = ""

    def push(self, ids: list[int]) -> str:
        self.ids += ids
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        return self._advance(text.rstrip("\ufffd"))

    def flush(self) -> str:
        return self._advance(self.tokenizer.decode(self.ids, skip_special_tokens=True))

    def _advance(self, text: str) -> str:
        new = text[len(self.shown) :]
        if new:
            self.shown = text
        return new
