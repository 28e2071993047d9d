"""Our own general chat prompts for the drafter's training data."""

import json
from pathlib import Path

from hsedit.train.drafter.prompts import CATEGORIES, general_prompts

MT_BENCH = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "mt-bench.jsonl"


def test_general_prompts_are_distinct_reproducible_and_cover_every_category():
    prompts = general_prompts(400, seed=0)
    assert len(prompts) == len(set(prompts)) == 400
    assert general_prompts(400, seed=0) == prompts
    assert general_prompts(400, seed=1) != prompts
    # the categories take turns: each one's opening words show up among the first few
    first = general_prompts(2 * len(CATEGORIES), seed=0)
    assert any(p.startswith(("Pretend you are", "You are", "Act as")) for p in first)  # role play
    assert any(p.startswith(("Extract", "Summarise", "Answer from the text", "Turn this text", "List the numbers"))
               for p in first)  # extraction


def words(text: str, n: int = 8) -> set[tuple[str, ...]]:
    tokens = text.lower().split()
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def test_general_prompts_copy_nothing_from_mt_bench():
    """MT-Bench is what the drafter's chat acceptance is measured on: no eight words in a row
    of its questions may appear in the training prompts."""
    questions = [json.loads(line)["turns"][0] for line in MT_BENCH.read_text().splitlines() if line.strip()]
    seen = set().union(*(words(q) for q in questions))
    assert len(questions) == 80 and seen
    assert not any(words(p) & seen for p in general_prompts(2000, seed=0))
