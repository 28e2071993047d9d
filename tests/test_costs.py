import pytest

from hsedit.engine.costs import CostTable


def test_cost_table_is_monotone_and_interpolates():
    table = CostTable.from_samples({1: 0.05, 4: 0.04, 8: 0.08})
    assert table.seconds == (0.05, 0.05, 0.08)  # a bigger step never costs less
    assert table.step_time(0) == 0.05
    assert table.step_time(6) == pytest.approx(0.065)
    assert table.step_time(12) == pytest.approx(0.08 + 4 * 0.03 / 4)  # the last slope continues
    assert CostTable.from_samples({1: 0.05}).step_time(100) == 0.05


def test_cost_table_needs_a_sample():
    with pytest.raises(ValueError):
        CostTable.from_samples({})


def test_a_saved_table_is_reused_only_under_the_same_key_and_for_a_week(tmp_path):
    import json

    from hsedit.engine.costs import CACHE_MAX_AGE_S, cached_table

    calls = []

    def profile(value):
        def run():
            calls.append(value)
            return CostTable.from_samples({1: value, 16: 2 * value})
        return run

    key = {"model": "m", "shapes": [(1, 0), (4, 7)]}
    first, reused = cached_table(key, tmp_path, profile(0.05))
    assert not reused and calls == [0.05]
    again, reused = cached_table({"shapes": [(1, 0), (4, 7)], "model": "m"}, tmp_path, profile(0.07))
    assert reused and again == first and calls == [0.05]  # same key, any order: no profiling
    other, reused = cached_table({**key, "model": "n"}, tmp_path, profile(0.09))
    assert not reused and other.seconds[0] == 0.09  # another model, option or machine: measured
    (saved,) = [p for p in tmp_path.glob("*.json") if json.loads(p.read_text())["key"]["model"] == "m"]
    record = json.loads(saved.read_text())
    saved.write_text(json.dumps({**record, "measured_at": record["measured_at"] - CACHE_MAX_AGE_S - 1}))
    stale, reused = cached_table(key, tmp_path, profile(0.06))
    assert not reused and stale.seconds[0] == 0.06  # a week old: measured again
    saved.write_text("{not json")
    _, reused = cached_table(key, tmp_path, profile(0.06))
    assert not reused


def test_a_table_profiled_while_the_machine_was_busy_is_measured_again(tmp_path):
    from hsedit.engine.costs import cached_table

    key = {"model": "m"}
    busy = lambda: CostTable.from_samples({1: 0.10, 16: 0.20})  # noqa: E731
    idle = lambda: CostTable.from_samples({1: 0.04, 16: 0.08})  # noqa: E731
    cached_table(key, tmp_path, busy)
    kept, reused = cached_table(key, tmp_path, idle, plain_step_now=lambda: 0.09)
    assert reused and kept.seconds[0] == 0.10  # within the factor: the table stands
    kept, reused = cached_table(key, tmp_path, idle, plain_step_now=lambda: 0.30)
    assert reused and kept.seconds[0] == 0.10  # busy now, not then: the table stands
    fresh, reused = cached_table(key, tmp_path, idle, plain_step_now=lambda: 0.074)
    assert not reused and fresh.seconds[0] == 0.04  # 1.35x slower than now (seen): measured again
    again, reused = cached_table(key, tmp_path, busy, plain_step_now=lambda: 0.04)
    assert reused and again == fresh  # and saved in place of the busy one
