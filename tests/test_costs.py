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
