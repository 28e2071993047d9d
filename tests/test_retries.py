"""The rounds of a region edit: which failed regions are asked again, and how. The runner here
answers every request with the region it was shown, unchanged (so every rename region fails its
check), or renamed for the seeds it is told to; what is under test is the round logic of
hsedit/scope.py, not the model."""

from pathlib import Path

from hsedit.apply import EditJob, GeneratedEdit
from hsedit.edit.files import SourceFile
from hsedit.engine.repetition import REPETITION
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
        self.shown: list[list[str]] = []  # each round's shown texts, job by job

    def generate(self, jobs, *, max_tokens=None, temperature=0.0, seed=None, max_in_flight=1, on_step=None):
        jobs = list(jobs)
        self.rounds.append((temperature, len(jobs)))
        self.seeds.append([job.seed_in(seed) for job in jobs])
        self.shown.append([job.source.text for job in jobs])
        for index, job in enumerate(jobs):
            stats = RequestStats(prompt_tokens=1)
            stats.finish_reason = "stop"
            text = job.source.text.removesuffix("\n")  # as the model copies it: the stop takes the last newline
            if temperature > 0 and self.seeds[-1][index] in self.renaming_seeds:
                text = text.replace("total_0", "first_total")
            yield GeneratedEdit(index, GenerationRequest(prompt="", max_tokens=max_tokens or 256, temperature=temperature),
                                Generation(text=text, stats=stats))


def run(sampled_retries: bool, source: str = SOURCE, runner: UnchangedAnswers | None = None):
    runner = runner or UnchangedAnswers()
    job = EditJob.for_source(SourceFile.from_text(Path("steps.py"), source), "steps.py", "rename total_0 to first_total")
    ((_, result),) = generate_edits(runner, [job], scope="regions", sampled_retries=sampled_retries)
    return runner.rounds, result


def test_a_failing_region_is_asked_again_cut_finer_then_sampled():
    runner = UnchangedAnswers()
    rounds, result = run(True, runner=runner)
    # the region, then its two units, then the two statements of each that use the name (the
    # other two never sent), then those lines alone, then each line's attempts left, sampled
    assert rounds == [(0.0, 1), (0.0, 2), (0.0, 4), (0.0, 4), (RETRY_TEMPERATURE, 4 * (RETRIES - 3))]
    assert all("total_1" not in shown.split(":", 1)[1] for shown in runner.shown[2])
    assert runner.shown[3] == ["total_0 = items[0] + 0\n", "return total_0\n", "total_0 = items[0] + 1\n", "return total_0\n"]
    assert result.refusal() is not None and result.refusal().exit_code == 11


def test_without_sampled_retries_only_the_finer_cuts_are_asked_again():
    rounds, result = run(sampled_retries=False)
    assert rounds == [(0.0, 1), (0.0, 2), (0.0, 4), (0.0, 4)]
    assert result.refusal() is not None and result.refusal().exit_code == 11
    assert [r["attempts"] for r in result.regions] == [4, 4, 4, 4]


def test_lines_of_a_region_that_need_no_change_are_kept_when_it_is_cut():
    runner = UnchangedAnswers()
    _, result = run(True, runner=runner)
    assert [r["lines"] for r in result.regions] == [[2, 2], [5, 5], [9, 9], [12, 12]]  # the lines with a use, at the end
    assert result.new_text == SOURCE  # every answer unchanged: nothing else moved either


# One function of four statements, two of which use the name.
ONE_FUNCTION = SOURCE.split("\n\n\n")[0] + "\n"

# One function of one statement: a region no cut splits, so its use's line alone, then sampled.
ONE_UNIT = "def step_0(items):\n    return items[0] + total_0\n"


def test_a_single_unit_asks_all_its_sampled_attempts_in_one_round():
    runner = UnchangedAnswers()
    rounds, result = run(True, ONE_UNIT, runner)
    assert rounds == [(0.0, 1), (0.0, 1), (RETRY_TEMPERATURE, RETRIES - 1)]
    assert runner.shown[1] == ["return items[0] + total_0\n"]  # the line alone, dedented
    assert len(set(runner.seeds[2])) == RETRIES - 1  # distinct samples, not the same one again
    assert result.refusal() is not None and result.refusal().exit_code == 11
    assert [r["attempts"] for r in result.regions] == [1 + RETRIES]


def test_a_line_shown_without_its_function_is_judged_as_inside_it():
    """"in step_0, rename …": the last resort shows a line without the `def` it sits in; an
    unchanged answer there is a missed use, not "nothing to do: no `step_0` here"."""
    runner = UnchangedAnswers()
    job = EditJob.for_source(SourceFile.from_text(Path("steps.py"), ONE_UNIT), "steps.py",
                             "in step_0, rename total_0 to first_total")
    ((_, result),) = generate_edits(runner, [job], scope="regions")
    assert runner.shown[1] == ["return items[0] + total_0\n"]  # the line alone
    assert [r["attempts"] for r in result.regions] == [1 + RETRIES]  # asked until its attempts ran out
    assert result.refusal() is not None and result.refusal().exit_code == 11
    probe = UnchangedAnswers()
    run(True, ONE_UNIT, probe)
    renamed = UnchangedAnswers(renaming_seeds=(probe.seeds[2][1],))
    ((_, right),) = generate_edits(renamed, [job], scope="regions")
    assert right.refusal() is None and right.new_text == ONE_UNIT.replace("total_0", "first_total")


def test_the_sampled_copy_that_passes_is_the_answer():
    probe = UnchangedAnswers()
    run(True, ONE_UNIT, probe)
    runner = UnchangedAnswers(renaming_seeds=(probe.seeds[2][1],))  # only the second copy renames
    rounds, result = run(True, ONE_UNIT, runner)
    assert result.refusal() is None
    assert result.new_text == ONE_UNIT.replace("total_0", "first_total")  # indented back where it was
    assert [r["attempts"] for r in result.regions] == [1 + RETRIES]


class MisindentedAnswers(UnchangedAnswers):
    """Answers the first round unchanged; the second (the function's statements, each under its
    `def` line) renamed but indented one level too deep: each answer parses on its own and passes
    the rename check, and the spliced file would not parse. Later rounds answer right."""

    def generate(self, jobs, **kwargs):
        for done in super().generate(jobs, **kwargs):
            text = done.generation.text
            if len(self.rounds) > 1:
                text = text.replace("total_0", "first_total")
            if len(self.rounds) == 2:
                head, *body = text.splitlines()
                text = "\n".join([head, *("    " + line for line in body)])
            yield GeneratedEdit(done.index, done.request, Generation(text=text, stats=done.generation.stats))


def test_an_answer_that_does_not_parse_where_it_goes_is_asked_again():
    runner = MisindentedAnswers()
    rounds, result = run(True, ONE_FUNCTION, runner)
    assert len(rounds) == 3  # the region, its statements misindented, their lines alone
    assert result.refusal() is None, result.refusal()
    assert result.new_text == ONE_FUNCTION.replace("total_0", "first_total")


class HeadChangedAnswers(UnchangedAnswers):
    """Answers the first round unchanged; later rounds renamed, and the piece shown under the
    function's `def` line (its `return`) with that read-only line changed as well."""

    def generate(self, jobs, **kwargs):
        for done in super().generate(jobs, **kwargs):
            text = done.generation.text
            if len(self.rounds) > 1:
                text = text.replace("total_0", "first_total")
                if "items[0]" not in text:
                    text = text.replace("def step_0(items):", "def step_0(items: list):")
            yield GeneratedEdit(done.index, done.request, Generation(text=text, stats=done.generation.stats))


def test_what_the_model_does_to_a_read_only_head_does_not_fail_its_region():
    rounds, result = run(True, ONE_FUNCTION, HeadChangedAnswers())
    assert len(rounds) == 2  # the region, then its statements: both right where they are spliced
    assert result.refusal() is None, result.refusal()
    assert result.new_text == ONE_FUNCTION.replace("total_0", "first_total")  # the `def` line as it was


class LoopingAnswers(UnchangedAnswers):
    """Every answer stopped by the engine in a loop (finish reason "repetition")."""

    def generate(self, jobs, **kwargs):
        for done in super().generate(jobs, **kwargs):
            done.generation.stats.finish_reason = REPETITION
            yield done


def test_a_region_stopped_in_a_loop_every_time_is_refused_as_cut_off_and_says_why():
    rounds, result = run(True, ONE_UNIT, LoopingAnswers())
    assert rounds == [(0.0, 1), (0.0, 1), (RETRY_TEMPERATURE, RETRIES - 1)]  # asked again, as any cut-off answer
    refusal = result.refusal() if not isinstance(result, Exception) else result
    assert refusal.exit_code == 5 and "kept repeating a block of lines" in str(refusal)


class IdentifierRenames(UnchangedAnswers):
    """Renames `total_0` where it is code and, when `strings_too`, in strings as well."""

    def __init__(self, strings_too: bool) -> None:
        super().__init__()
        self.strings_too = strings_too

    def generate(self, jobs, **kwargs):
        for done in super().generate(jobs, **kwargs):
            text = done.generation.text.replace("total_0", "first_total")
            if not self.strings_too:
                text = text.replace('"first_total"', '"total_0"')
            yield GeneratedEdit(done.index, done.request, Generation(text=text, stats=done.generation.stats))


EXPORTED = '__all__ = ["total_0", "step_1"]\n\n\n' + SOURCE


def test_an_all_entry_left_behind_is_asked_again_and_refused():
    rounds, result = run(True, EXPORTED, IdentifierRenames(strings_too=False))
    # The `__all__` line alone names no code, yet is judged as the whole file's rename: asked
    # until its attempts run out, not passed as prose.
    assert result.regions[0]["lines"] == [1, 1] and result.regions[0]["attempts"] == 1 + RETRIES
    assert result.refusal() is not None and result.refusal().exit_code == 11
    assert "`__all__` still lists `total_0`" in str(result.refusal())
    _, right = run(True, EXPORTED, IdentifierRenames(strings_too=True))
    assert right.refusal() is None and right.new_text == EXPORTED.replace("total_0", "first_total")


class MisspeltThenRight(UnchangedAnswers):
    """A free-form edit: the first answers return a name nothing defines (a typo of `total_1`),
    every later one returns `total_1`."""

    def generate(self, jobs, **kwargs):
        for done in super().generate(jobs, **kwargs):
            text = done.generation.text.replace("return total_0", "return totl_1" if len(self.rounds) == 1 else "return total_1")
            yield GeneratedEdit(done.index, done.request, Generation(text=text, stats=done.generation.stats))


def test_a_free_form_region_that_uses_a_name_nothing_defines_is_asked_again():
    runner = MisspeltThenRight()
    job = EditJob.for_source(SourceFile.from_text(Path("steps.py"), SOURCE), "steps.py", "make step_0 return total_1")
    ((_, result),) = generate_edits(runner, [job], scope="regions")
    assert len(runner.rounds) == 2  # answered, refused for the name, asked again
    assert result.refusal() is None, result.refusal()
    assert result.new_text == SOURCE.replace("return total_0", "return total_1")
    # never right: refused at the end with the name, nothing written
    class AlwaysMisspelt(UnchangedAnswers):
        def generate(self, jobs, **kwargs):
            for done in super().generate(jobs, **kwargs):
                text = done.generation.text.replace("return total_0", "return totl_1")
                yield GeneratedEdit(done.index, done.request, Generation(text=text, stats=done.generation.stats))

    ((_, wrong),) = generate_edits(AlwaysMisspelt(), [job], scope="regions")
    assert wrong.refusal() is not None and wrong.refusal().exit_code == 11 and "`totl_1`" in str(wrong.refusal())
