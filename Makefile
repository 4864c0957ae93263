# Two entry points for a fresh machine: `make demo` and `make test`.
# torch is installed first and pinned: any other request pulls a multi-GB CUDA build.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0
OUT ?= runs/quickstart

.PHONY: demo test setup setup-dev lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH)

setup: $(BIN)/python
	$(BIN)/pip install --quiet -e .

setup-dev: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"
	$(BIN)/pip install --quiet --no-deps -e examples/custom_target  # the plug-in example the tests run

demo: setup
	$(BIN)/fgl-workbench run examples/quickstart.yaml --out $(OUT)

test: setup-dev
	$(BIN)/python -m pytest -q

lint: setup-dev
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: setup-dev
	$(BIN)/python benchmarks/fedavg_round.py
	$(BIN)/python benchmarks/flower.py  # Flower vs the built-in loop: s/round, bytes, profile
	$(BIN)/python benchmarks/accountant.py
	$(BIN)/python benchmarks/mia.py
	$(BIN)/python benchmarks/secure_agg.py
	$(BIN)/python benchmarks/suite.py
	$(BIN)/python benchmarks/fedtad_round.py
	$(BIN)/python benchmarks/fedgc_client_gradients.py
	$(BIN)/python benchmarks/graph_dp_sgd.py
	$(BIN)/python benchmarks/scale.py
	$(BIN)/python benchmarks/audit_teeth.py  # ~15 min on one CPU thread
	$(BIN)/python benchmarks/gpu.py || true  # needs a GPU
	$(BIN)/python benchmarks/cefgc_budget.py --datasets MUTAG  # all five: ~25 min on one CPU thread

clean:
	rm -rf $(VENV) runs
