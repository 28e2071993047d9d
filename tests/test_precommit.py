"""The pre-commit hooks, run by the real `pre-commit` tool from this repository's manifest on a
temporary git repository: pre-commit installs hsedit (the light base install) into its own
environment, and the hook hands the edit to the environment HSEDIT_PYTHON names."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "temperature.py"
PYPROJECT = """\
[tool.hsedit]
drafter = "ngram"

[tool.hsedit.instructions]
"src/*.py" = "set FREEZING_F to 32.5"
"""


def test_the_manifest_declares_both_hooks_as_asked():
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"hsedit-check", "hsedit-fix"}
    for hook in hooks.values():
        assert hook["language"] == "python" and hook["require_serial"] is True
    assert hooks["hsedit-check"]["entry"] == "hsedit hook check"
    assert hooks["hsedit-fix"]["entry"] == "hsedit hook fix"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path_factory.mktemp("project")
    (repo / "src").mkdir()
    shutil.copy(EXAMPLE, repo / "src" / "temperature.py")
    (repo / "notes.py").write_text("FREEZING_F = 32.0\n")  # matches no pattern: never touched
    (repo / "pyproject.toml").write_text(PYPROJECT)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "start"], cwd=repo, check=True)
    return repo


def pre_commit(project, hook_id, tmp_home):
    env = {
        **os.environ,
        "HSEDIT_PYTHON": sys.executable,  # the environment with vLLM (this test's)
        "PRE_COMMIT_HOME": str(tmp_home),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    command = [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), hook_id, "--verbose",
               "--files", "src/temperature.py", "notes.py"]
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=1800, check=False)


@pytest.mark.timeout(2400)  # pre-commit builds the hook's environment, then three engine starts
def test_check_then_fix_then_check_again(project, tmp_path_factory):
    home = tmp_path_factory.mktemp("pre-commit-home")
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
