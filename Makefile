# Set-up is part of each target: a fresh clone needs only Python >= 3.10 and `make`.
# CPU machines get the CPU build of torch through constraints/cpu.txt; GPU users `pip install -e .` instead.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint clean

$(STAMP): pyproject.toml constraints/cpu.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints/cpu.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)  ## the main job on the embedded default (no downloads)
	$(VENV)/bin/mrjudge demo

test: $(STAMP)  ## lint, then the whole test suite
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) runs .pytest_cache
