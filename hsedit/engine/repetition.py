"""A loop in an answer: its last lines one block said over and over, which the text it rewrites
does not hold. A small model that starts repeating a block (a doctest's output, a list item) goes
on until its token budget, a minute on these machines for an answer no check will take; the
engine stops such a request at the loop instead (finish reason "repetition")."""

from __future__ import annotations

REPETITION = "repetition"  # the finish reason of a request stopped in a loop
MAX_BLOCK_LINES = 8
# A block of one line must come back more often than a longer one: short runs of equal lines
# (closing brackets, `pass`, a rename that makes two calls equal) are ordinary code.
REPEATS = {1: 8}
DEFAULT_REPEATS = 4


def ends_in_loop(text: str, reference: str) -> bool:
    """Whether the complete lines of `text` end in a block of 1 to MAX_BLOCK_LINES lines, not all
    blank, repeated back to back REPEATS times, where `reference` holds no such run."""
    lines = text.split("\n")[:-1]  # the last one is still being written
    for size in range(1, MAX_BLOCK_LINES + 1):
        repeats = REPEATS.get(size, DEFAULT_REPEATS)
        if len(lines) < size * repeats:
            break
        block = lines[-size:]
        if not any(line.strip() for line in block):
            continue
        if all(lines[len(lines) - (k + 1) * size : len(lines) - k * size] == block for k in range(1, repeats)):
            run = "\n".join(lines[-size * repeats :]) + "\n"
            if run not in reference:
                return True
    return False
