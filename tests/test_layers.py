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
