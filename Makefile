# Apollo-11 — plain targets a newcomer can guess.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup test unit lint typecheck format proto bench bench-quick clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Regenerate the protobuf code (committed; tests/test_proto.py fails when it is stale).
proto: setup
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=proto --pyi_out=proto \
		--grpc_python_out=proto proto/apollo11/v1/*.proto

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: setup
	$(BIN)/mypy

unit: setup
	$(BIN)/pytest -q

test: lint typecheck unit

bench: setup
	$(BIN)/apollo11 bench log
	$(BIN)/apollo11 bench engine
	$(BIN)/apollo11 bench grpc

bench-quick: setup
	$(BIN)/apollo11 bench log --quick
	$(BIN)/apollo11 bench engine --quick
	$(BIN)/apollo11 bench grpc --quick

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
