"""The warm engine compiles behind itself (hsedit/daemon.py): an idle eager daemon starts its
compiled twin at low priority, later edits go to the twin, and the eager one then leaves.

One eager start (~20 s) and one compiled start (a minute or more, three the first time)."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hsedit.client import ServerClient
from hsedit.daemon import HANDOVER_QUIET_S
from tests.test_daemon import _daemons, _gone

pytestmark = pytest.mark.engine
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _hsedit(env, cwd, *args):
    done = subprocess.run([sys.executable, "-m", "hsedit.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    return done.returncode, done.stdout, done.stderr


def _completion_tokens(daemon) -> float:
    """What the daemon has generated, from its /metrics (asked straight, not through /health)."""
    client = ServerClient(f"unix:{daemon.state['socket']}")
    connection, response = client._request("GET", "/metrics", None)
    try:
        text = response.read().decode()
    finally:
        connection.close()
    (line,) = [line for line in text.splitlines() if line.startswith("hsedit_completion_tokens_total")]
    return float(line.split()[-1])


def test_an_idle_warm_engine_compiles_a_twin_behind_itself_and_hands_over(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(EXAMPLES, project)
    (tmp_path / "run").mkdir(mode=0o700)
    env = {**os.environ, "HSEDIT_DAEMON": "1", "XDG_RUNTIME_DIR": str(tmp_path / "run"), "HSEDIT_KEEP_ALIVE": "10",
           "HSEDIT_COMPILE_BEHIND": "1"}
    edit = ("apply", "temperature.py", "set FREEZING_F to 32.5", "--json")
    try:
        code, out, err = _hsedit(env, project, *edit)
        assert code == 0 and json.loads(out)["check"]["ok"] is True, err
        (eager,) = _daemons(env)
        assert eager.state["settings"]["compile"] is False
        deadline = time.time() + 900
        twins = []
        while not twins and time.time() < deadline:
            time.sleep(5)
            twins = [d for d in _daemons(env) if d.state["settings"]["compile"]]
        assert twins, Path(eager.state["log"]).read_text()[-2000:]
        (twin,) = twins
        assert "compiling a twin behind" in Path(eager.state["log"]).read_text()
        # Started niced, it yielded while compiling and serves at full priority now.
        assert int(Path(f"/proc/{twin.pid}/stat").read_text().split(")")[-1].split()[16]) == 19
        group = Path(f"/proc/{twin.pid}/autogroup")
        if group.exists():
            assert group.read_text().split()[-1] == "0"
        # The next edit goes to the twin; the eager daemon, asked nothing since, leaves.
        before = _completion_tokens(twin)
        code, out, err = _hsedit(env, project, *edit)
        assert code == 0 and json.loads(out)["check"]["ok"] is True, err
        assert _completion_tokens(twin) > before
        assert _gone(eager.pid, HANDOVER_QUIET_S + 30)
        stops = [line for line in Path(eager.state["log"]).read_text().splitlines() if "stopping" in line]
        assert "compiled twin serves" in stops[-1]
        assert [d.pid for d in _daemons(env)] == [twin.pid]
    finally:
        code, _, err = _hsedit(env, project, "daemon", "stop")
        for daemon in _daemons(env):  # any left (a failed assertion above)
            os.kill(daemon.pid, 9)
