"""Background work that yields to the user's (hsedit/niceness.py), on a stand-in autogroup file:
what the kernel does with it is Linux's, what we write there and when is ours."""

import os
import subprocess
import sys


def test_a_niced_session_leader_gives_its_niceness_to_its_session(tmp_path):
    """`setsid nice -n 19 hsedit finetune train`: the autogroup gets niceness 19, so a training run
    in the background yields to an engine in another session; a process that leads no session
    (a run in the user's terminal) leaves its session's group alone."""
    group = tmp_path / "autogroup"
    group.write_text("/autogroup-1 nice 0\n")
    script = ("import os, sys; from pathlib import Path; "
              "from hsedit.niceness import yield_like_niceness; "
              "print(yield_like_niceness(Path(sys.argv[1])))")
    led = subprocess.run(["setsid", "nice", "-n", "7", sys.executable, "-c", script, str(group)],
                         capture_output=True, text=True, check=True)
    assert led.stdout.strip() == "True" and group.read_text() == str(min(19, os.nice(0) + 7))
    group.write_text("/autogroup-1 nice 0\n")
    follower = subprocess.run(["nice", "-n", "7", sys.executable, "-c", script, str(group)],
                              capture_output=True, text=True, check=True)
    assert follower.stdout.strip() == "False" and group.read_text() == "/autogroup-1 nice 0\n"


def test_a_session_leader_sets_its_session_back_to_full_priority(tmp_path):
    """A compiled engine started behind the warm one yields while it compiles and then serves
    at niceness 0 again; a process that leads no session leaves the group alone."""
    group = tmp_path / "autogroup"
    script = ("import sys; from pathlib import Path; "
              "from hsedit.niceness import restore_session_priority, yield_like_niceness; "
              "path = Path(sys.argv[1]); print(yield_like_niceness(path), path.read_text(), "
              "restore_session_priority(path), path.read_text(), sep='|')")
    group.write_text("/autogroup-1 nice 0\n")
    led = subprocess.run(["setsid", "nice", "-n", "19", sys.executable, "-c", script, str(group)],
                         capture_output=True, text=True, check=True)
    assert led.stdout.strip().split("|") == ["True", "19", "True", "0"]
    group.write_text("/autogroup-1 nice 0\n")
    follower = subprocess.run(["nice", "-n", "19", sys.executable, "-c", script, str(group)],
                              capture_output=True, text=True, check=True)
    yielded, _, restored, _ = follower.stdout.split("|")
    assert (yielded, restored) == ("False", "False")
    assert group.read_text() == "/autogroup-1 nice 0\n"
