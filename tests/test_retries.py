"""The rounds of a region edit: which failed regions are asked again, and how. The runner here
answers every request with the region it was shown, unchanged, so every rename region fails its
check; what is under test is the round logic of hsedit/scope.py, not the model."""

from pathlib import Path

from hsedit.apply import FENCE_STOP, EditJob, GeneratedEdit
from hsedit.edit.files import SourceFile
from hsedit.engine.requests import Generation, GenerationRequest
from hsedit.engine.stats import RequestStats
from hsedit.scope import RETRY_TEMPERATURE, generate_edits

# Two small top-level functions that use the name: one region of two units.
SOURCE = "".join(
    f"def step_{k}(items):\n" + "".join(f"    total_{j} = items[{j}] + {k}\n" for j in range(3)) + "    return total_0\n\n\n"
    for k in range(2)
)


class UnchangedAnswers:
    """An EditRunner whose every answer is the shown region as it was; it records each round."""

    def __init__(self) -> None:
        self.rounds: list[tuple[float, int]] = []  # (temperature, requests) per generate call

    def generate(self, jobs, *, max_tokens=None, temperature=0.0, seed=None, max_in_flight=1, on_step=None):
        jobs = list(jobs)
        self.rounds.append((temperature, len(jobs)))
        for index, job in enumerate(jobs):
            stats = RequestStats(prompt_tokens=1)
            stats.finish_reason = "stop"
            text = job.source.text.removesuffix("\n") + "\n"
            yield GeneratedEdit(index, GenerationRequest(prompt="", max_tokens=max_tokens or 256, temperature=temperature),
                                Generation(text=text.removesuffix(FENCE_STOP), stats=stats))


def run(sampled_retries: bool):
    runner = UnchangedAnswers()
    job = EditJob.for_source(SourceFile.from_text(Path("steps.py"), SOURCE), "steps.py", "rename total_0 to first_total")
    ((_, result),) = generate_edits(runner, [job], scope="regions", sampled_retries=sampled_retries)
    return runner.rounds, result


def test_a_failing_region_is_asked_again_as_its_units_then_sampled():
    rounds, result = run(sampled_retries=True)
    assert rounds == [(0.0, 1), (0.0, 2), (RETRY_TEMPERATURE, 2)]
    assert result.refusal() is not None and result.refusal().exit_code == 11


def test_without_sampled_retries_only_the_units_are_asked_again():
    rounds, result = run(sampled_retries=False)
    assert rounds == [(0.0, 1), (0.0, 2)]
    assert result.refusal() is not None and result.refusal().exit_code == 11
    assert [r["attempts"] for r in result.regions] == [2, 2]
