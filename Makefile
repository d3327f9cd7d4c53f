# The README names two targets: `make demo` and `make test`. Everything else is a step of those.
SHELL := /bin/bash
VENV := .venv/bin

.PHONY: test demo venv control-plane addons lint typecheck unit e2e crds proto clean-cluster

test: venv control-plane addons lint unit e2e

demo: venv control-plane
	hack/demo.sh

venv:
	hack/bootstrap.sh

control-plane:
	hack/build-control-plane.sh

# Kueue and KubeRay, which the neighbour e2e tests run beside kubegang (cached like the control plane).
addons:
	hack/build-addons.sh

lint: venv
	$(VENV)/ruff check .
	$(VENV)/mypy -p kubegang
	$(VENV)/mypy hack/devcluster.py hack/localstack.py hack/supervise.py hack/addons.py hack/shapes/generate.py

# --durations: CI's log names the tests that spend make test's 45-minute budget on its 2-core machine.
unit: venv
	$(VENV)/pytest tests/unit -n auto --durations=15

e2e: venv control-plane addons
	$(VENV)/pytest tests/e2e --durations=40

clean-cluster:
	hack/cluster down
