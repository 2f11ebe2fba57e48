# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast docs docs-screenshots lint format clean npm-servers sandbox-tools peer-tools

# The third-party MCP servers the tests run against (pinned in tests/npm/package-lock.json).
NPM_DIR   := tests/npm
NPM_STAMP := $(NPM_DIR)/node_modules/.ringfence-installed

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test,plot,otel,peers,docs]'
	touch $(STAMP)

# The main job: a model-written pipeline (examples/pipeline.py) against a fresh copy of the
# example project, on the confined local backend, answering "yes" for the operator; then the
# event stream's chain is verified and the sandbox its run_shell call ran in is shown.
DEMO_WS     := demo-workspace
DEMO_EVENTS := demo-events.jsonl

# The confined local backend needs bubblewrap. Installed here when missing and we may
# (root with apt-get, as on CI and this project's machines); otherwise `make demo` fails closed,
# naming the missing layer and its fix, like every confined call.
sandbox-tools:
	@if ! command -v bwrap >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing bubblewrap (the local backend's namespaces)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
		else \
			echo "note: bubblewrap is not installed: the confined local backend will refuse (apt-get install bubblewrap)"; \
		fi; \
	fi

# Anthropic's srt (a `ringfence bench --peers` peer, pinned in tests/npm) needs socat.
peer-tools:
	@if ! command -v socat >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing socat (the srt bench peer's proxy)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq socat >/dev/null; \
		else \
			echo "note: socat is not installed: the srt bench peer will be skipped (apt-get install socat)"; \
		fi; \
	fi

demo: $(STAMP) sandbox-tools
	$(BIN)/python examples/prepare_workspace.py $(DEMO_WS)
	rm -f $(DEMO_EVENTS)
	$(BIN)/ringfence run-script examples/pipeline.py --workspace $(DEMO_WS) --backend local \
		--approve yes --events $(DEMO_EVENTS)
	$(BIN)/ringfence events verify $(DEMO_EVENTS)
	@$(BIN)/python -c 'import json; e = [json.loads(x) for x in open("$(DEMO_EVENTS)") if "backend_started" in x][0]; s = e.get("sandbox") or {}; print("run_shell ran on the " + e["backend"] + " backend: " + ("confined (" + s["sandbox"] + "): " + ", ".join(x["layer"] for x in s["layers"] if x["ok"]) if s.get("confined") else "UNCONFINED"))'

$(NPM_STAMP): $(NPM_DIR)/package-lock.json $(NPM_DIR)/package.json
	npm ci --prefix $(NPM_DIR) --no-audit --no-fund
	touch $(NPM_STAMP)

npm-servers:
	@if command -v npm >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory $(NPM_STAMP); \
	else \
		echo "note: npm is not installed: tests that need the npm MCP reference servers will be skipped (RINGFENCE_REQUIRE_NPM=1 makes them fail)"; \
	fi

# Both cores (pytest-xdist); a module's tests stay on one worker (tests/conftest.py groups them).
test: $(STAMP) npm-servers sandbox-tools peer-tools
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup tests

# The fast tier: everything that needs no Docker daemon, npm server, real sandbox, server
# process or browser, and is not slow on its own (under a minute on two cores; the tiers are
# marked in tests/tiers.py).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup \
		-m "not docker and not npm and not sandbox and not slow and not servers and not browser" tests

# The documentation site, as CI builds it (tests/docs/test_docs_site.py): --strict, offline.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

# The review page's screenshots and bench figures in docs/review/, as the tests take them.
docs-screenshots: $(STAMP)
	RINGFENCE_REVIEW_SHOTS=$(CURDIR)/docs/review $(BIN)/python -m pytest -q tests/review

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) build site *.egg-info $(DEMO_WS) $(DEMO_EVENTS)
