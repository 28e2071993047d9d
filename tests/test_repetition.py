"""The loop an answer can fall into (engine/repetition.py): a block of lines said over and over
that the text being rewritten does not hold."""

from hsedit.engine.repetition import DEFAULT_REPEATS, REPEATS, ends_in_loop

DOCTEST = "    >>> expm(A)\n    [ 3.86  2.26]\n    [ 2.26  2.44]\n"
ORIGINAL = '''def expm(A):
    """
    >>> expm(A)
    [ 3.86  2.26]
    [ 2.26  2.44]
    """
'''


def test_a_block_said_over_and_over_is_a_loop():
    answer = 'def expm(A):\n    """\n' + DOCTEST * DEFAULT_REPEATS
    assert ends_in_loop(answer, ORIGINAL)
    assert ends_in_loop(answer + "    >>> ex", ORIGINAL)  # the line being written does not count
    assert not ends_in_loop('def expm(A):\n    """\n' + DOCTEST * (DEFAULT_REPEATS - 1), ORIGINAL)


def test_a_run_the_original_holds_is_no_loop():
    original = "def f():\n" + DOCTEST * DEFAULT_REPEATS + "    return 1\n"
    assert not ends_in_loop("def f():\n" + DOCTEST * DEFAULT_REPEATS, original)


def test_single_lines_must_come_back_more_often_and_blank_ones_never_count():
    line = "    pass\n"
    assert not ends_in_loop("def f():\n" + line * (REPEATS[1] - 1), "def f():\n    pass\n")
    assert ends_in_loop("def f():\n" + line * REPEATS[1], "def f():\n    pass\n")
    assert not ends_in_loop("x = 1\n" + "\n" * 40, "x = 1\n")


def test_a_block_that_only_ends_the_answer_once_is_no_loop():
    lines = "".join(f"    item_{k} = {k}\n" for k in range(40))
    assert not ends_in_loop("def f():\n" + lines, "def f():\n    pass\n")
