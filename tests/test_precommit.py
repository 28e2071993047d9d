"""The pre-commit hooks, run by the real `pre-commit` tool from this repository's manifest on a
temporary git repository: pre-commit installs hsedit (the light base install) into its own
environment, and the hook hands the edit to the environment HSEDIT_PYTHON names, or to a
running `hsedit serve`."""

import os
import shutil
import subprocess
import sys
from pathlib import Path


import pytest
import yaml

from tests.conftest import Server

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "temperature.py"
PYPROJECT = """\
[tool.hsedit]
drafter = "copy"

[tool.hsedit.instructions]
"src/*.py" = "set FREEZING_F to 32.5"
"""


APPLY_REQUESTS = 'hsedit_http_requests_total{endpoint="/v1/apply"'  # every status


def test_the_manifest_declares_both_hooks_as_asked():
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"hsedit-check", "hsedit-fix"}
    for hook in hooks.values():
        assert hook["language"] == "python" and hook["require_serial"] is True
    assert hooks["hsedit-check"]["entry"] == "hsedit hook check"
    assert hooks["hsedit-fix"]["entry"] == "hsedit hook fix"


def make_project(repo: Path) -> Path:
    """A git repository with one file the instructions match and one they do not."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    (repo / "src").mkdir()
    shutil.copy(EXAMPLE, repo / "src" / "temperature.py")
    (repo / "notes.py").write_text("FREEZING_F = 32.0\n")  # matches no pattern: never touched
    (repo / "pyproject.toml").write_text(PYPROJECT)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "start"], cwd=repo, check=True)
    return repo


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return make_project(tmp_path_factory.mktemp("project"))


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """pre-commit's cache: the hook's environment is built once for the module."""
    return tmp_path_factory.mktemp("pre-commit-home")


def pre_commit(project, hook_id, tmp_home, server=None):
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("HSEDIT_PYTHON", "HSEDIT_SERVER")},
        "PRE_COMMIT_HOME": str(tmp_home),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    if server:
        env["HSEDIT_SERVER"] = server  # the hook's own environment has no vLLM: the server edits
    else:
        env["HSEDIT_PYTHON"] = sys.executable  # the environment with vLLM (this test's)
    command = [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), hook_id, "--verbose",
               "--files", "src/temperature.py", "notes.py"]
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=1800, check=False)


@pytest.mark.timeout(2400)  # pre-commit builds the hook's environment, then three engine starts
def test_check_then_fix_then_check_again(project, home):
    original = (project / "src" / "temperature.py").read_text()

    check = pre_commit(project, "hsedit-check", home)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "+FREEZING_F = 32.5" in check.stdout and "-FREEZING_F = 32.0" in check.stdout
    assert (project / "src" / "temperature.py").read_text() == original  # check never writes

    fix = pre_commit(project, "hsedit-fix", home)
    assert fix.returncode == 1, fix.stdout + fix.stderr  # files changed: the user re-stages
    assert "rewrote src/temperature.py" in fix.stdout
    fixed = (project / "src" / "temperature.py").read_text()
    assert "FREEZING_F = 32.5" in fixed and fixed.count("\n") == original.count("\n")
    assert (project / "notes.py").read_text() == "FREEZING_F = 32.0\n"

    again = pre_commit(project, "hsedit-check", home)
    assert again.returncode == 0, again.stdout + again.stderr


def test_the_hook_without_an_engine_says_what_to_set(project):
    env = {k: v for k, v in os.environ.items() if k != "HSEDIT_PYTHON"}
    script = (
        "import sys, importlib.util\n"
        "real = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, *a: None if name == 'vllm' else real(name, *a)\n"
        "from hsedit.cli import main\n"
        "sys.argv = ['hsedit', 'hook', 'check', 'src/temperature.py']\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=project, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "HSEDIT_PYTHON" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.timeout(2400)
def test_the_hook_edits_on_a_server_from_an_environment_without_an_engine(tmp_path_factory, home):
    repo = make_project(tmp_path_factory.mktemp("served-project"))
    original = (repo / "src" / "temperature.py").read_text()
    server = Server("--drafter", "copy")
    try:
        before = server.metric(APPLY_REQUESTS)
        check = pre_commit(repo, "hsedit-check", home, server=server.url)
        served = server.metric(APPLY_REQUESTS) - before
    finally:
        assert server.stop() == 0
    assert check.returncode == 1, check.stdout + check.stderr
    assert "+FREEZING_F = 32.5" in check.stdout and "-FREEZING_F = 32.0" in check.stdout
    assert served == 1  # src/temperature.py, edited by the server; notes.py matches no pattern
    assert (repo / "src" / "temperature.py").read_text() == original

