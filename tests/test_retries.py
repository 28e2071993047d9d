"""The rounds of a region edit: which failed regions are asked again, and how. The runner here
answers every request with the region it was shown, unchanged (so every rename region fails its
check), or renamed for the seeds it is told to; what is under test is the round logic of
hsedit/scope.py, not the model."""

from pathlib import Path

from hsedit.apply import FENCE_STOP, EditJob, GeneratedEdit
from hsedit.edit.files import SourceFile
from hsedit.engine.requests import Generation, GenerationRequest
from hsedit.engine.stats import RequestStats
from hsedit.scope import RETRIES, RETRY_TEMPERATURE, generate_edits

# Two small top-level functions that use the name: one region of two units.
SOURCE = "".join(
    f"def step_{k}(items):\n" + "".join(f"    total_{j} = items[{j}] + {k}\n" for j in range(3)) + "    return total_0\n\n\n"
    for k in range(2)
)


class UnchangedAnswers:
    """An EditRunner whose every answer is the shown region as it was, except for a job sampled
    with one of `renaming_seeds`: that one renames `total_0`. It records each round."""

    def __init__(self, renaming_seeds: tuple[int, ...] = ()) -> None:
        self.renaming_seeds = renaming_seeds
        self.rounds: list[tuple[float, int]] = []  # (temperature, requests) per generate call
        self.seeds: list[list[int | None]] = []  # each round's seeds, job by job

    def generate(self, jobs, *, max_tokens=None, temperature=0.0, seed=None, max_in_flight=1, on_step=None):
        jobs = list(jobs)
        self.rounds.append((temperature, len(jobs)))
        self.seeds.append([job.seed_in(seed) for job in jobs])
        for index, job in enumerate(jobs):
            stats = RequestStats(prompt_tokens=1)
            stats.finish_reason = "stop"
            text = job.source.text.removesuffix("\n") + "\n"
            if temperature > 0 and self.seeds[-1][index] in self.renaming_seeds:
                text = text.replace("total_0", "first_total")
            yield GeneratedEdit(index, GenerationRequest(prompt="", max_tokens=max_tokens or 256, temperature=temperature),
                                Generation(text=text.removesuffix(FENCE_STOP), stats=stats))


def run(sampled_retries: bool, source: str = SOURCE, runner: UnchangedAnswers | None = None):
    runner = runner or UnchangedAnswers()
    job = EditJob.for_source(SourceFile.from_text(Path("steps.py"), source), "steps.py", "rename total_0 to first_total")
    ((_, result),) = generate_edits(runner, [job], scope="regions", sampled_retries=sampled_retries)
    return runner.rounds, result


def test_a_failing_region_is_asked_again_as_its_units_then_sampled():
    rounds, result = run(sampled_retries=True)
    # each unit has had its first answer (the region's) and its own: the rest of its attempts sampled
    assert rounds == [(0.0, 1), (0.0, 2), (RETRY_TEMPERATURE, 2 * (RETRIES - 1))]
    assert result.refusal() is not None and result.refusal().exit_code == 11


def test_without_sampled_retries_only_the_units_are_asked_again():
    rounds, result = run(sampled_retries=False)
    assert rounds == [(0.0, 1), (0.0, 2)]
    assert result.refusal() is not None and result.refusal().exit_code == 11
    assert [r["attempts"] for r in result.regions] == [2, 2]


# One function: a region of one unit, so all its retries are sampled.
ONE_UNIT = SOURCE.split("\n\n\n")[0] + "\n"


def test_a_single_unit_asks_all_its_sampled_attempts_in_one_round():
    runner = UnchangedAnswers()
    rounds, result = run(True, ONE_UNIT, runner)
    assert rounds == [(0.0, 1), (RETRY_TEMPERATURE, RETRIES)]
    assert len(set(runner.seeds[1])) == RETRIES  # distinct samples, not the same one again
    assert result.refusal() is not None and result.refusal().exit_code == 11
    assert [r["attempts"] for r in result.regions] == [1 + RETRIES]


def test_the_sampled_copy_that_passes_is_the_answer():
    probe = UnchangedAnswers()
    run(True, ONE_UNIT, probe)
    runner = UnchangedAnswers(renaming_seeds=(probe.seeds[1][1],))  # only the second copy renames
    rounds, result = run(True, ONE_UNIT, runner)
    assert result.refusal() is None
    assert "first_total" in result.new_text and "total_0" not in result.new_text
    assert [r["attempts"] for r in result.regions] == [1 + RETRIES]
