# `make test` sets up a virtualenv from scratch (if missing), checks the code (ruff, mypy) and runs the whole test suite.
PY ?= python3
VENV ?= .venv
HOST ?= 127.0.0.1
PORT ?= 8000

$(VENV)/.installed: pyproject.toml client/pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e './client[cli]' -e '.[dev]'
	touch $@

.PHONY: install lint test serve bench
install: $(VENV)/.installed

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check service client tests bench
	$(VENV)/bin/mypy

test: lint
	$(VENV)/bin/python -m pytest

serve: $(VENV)/.installed
	$(VENV)/bin/tileplan serve --host $(HOST) --port $(PORT)

bench: $(VENV)/.installed
	$(VENV)/bin/python bench/mapper.py
	$(VENV)/bin/python bench/costmodel.py
