# `make test` sets up a virtualenv from scratch (if missing) and runs the whole test suite.
PY ?= python3
VENV ?= .venv

$(VENV)/.installed: pyproject.toml client/pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e './client[cli]' -e '.[dev]'
	touch $@

.PHONY: install test serve bench
install: $(VENV)/.installed

test: $(VENV)/.installed
	$(VENV)/bin/python -m pytest

serve: $(VENV)/.installed
	$(VENV)/bin/tileplan serve

bench: $(VENV)/.installed
	$(VENV)/bin/python bench/mapper.py
	$(VENV)/bin/python bench/costmodel.py
