"""The arrows point one way: the drafting core imports no vLLM, the settings no engine, the runtime no training code."""

import subprocess
import sys

import pytest

CHECK = "import sys, importlib; importlib.import_module({module!r}); print(sorted(m for m in {banned!r} if m in sys.modules))"


@pytest.mark.parametrize("module,banned", [
    ("hsedit.drafting.planner", ("vllm",)),
    ("hsedit.drafting.hybrid", ("vllm",)),
    ("hsedit.drafting.dspark", ("vllm",)),
    # what the pre-commit environment (no torch, no vLLM) imports before handing over
    ("hsedit.config", ("vllm", "torch", "numpy")),
    # a server's clients: apply, batch and the hooks run there on the light install
    ("hsedit.client", ("vllm", "torch", "transformers")),
    ("hsedit.hook", ("vllm", "torch", "transformers")),
    ("hsedit.ui", ("vllm", "torch", "transformers")),
    # the runtime never imports training code
    ("hsedit.batch", ("hsedit.train", "hsedit.train.finetune", "hsedit.train.drafter", "hsedit.train.calibrate")),
    ("hsedit.bench", ("hsedit.train", "hsedit.train.finetune", "hsedit.train.drafter", "hsedit.train.calibrate")),
])
def test_module_imports_nothing_it_must_not(module, banned):
    out = subprocess.run([sys.executable, "-c", CHECK.format(module=module, banned=banned)],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"{module} imports {out.strip()}"


def test_finding_the_background_engine_imports_no_torch(tmp_path):
    """Every `hsedit apply` on the warm engine computes its daemon's key: torch alone costs a
    second of start there (it once came in through resolving --dtype auto)."""
    code = ("import sys; from hsedit.daemon import spec_for; from hsedit.engine.options import EngineOptions; "
            "spec_for(EngineOptions(drafter='hybrid')); print(sorted(m for m in ('torch', 'vllm', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "HSEDIT_CACHE": str(tmp_path)}).stdout
    assert out.strip() == "[]", out
