# odradek: `make demo` and `make test` do all set-up from nothing on Debian/Ubuntu.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-stamp
DEMO_DIR := ./.odradek-demo
APT_PACKAGES := default-jre-headless zookeeper kcat iptables python3 python3-venv chromium

.PHONY: setup system-deps demo demo-down lint test test-long faults fuzz clean distclean

setup: system-deps $(STAMP)

# Java + Debian's ZooKeeper jars run the real ZooKeeper; kcat is a third-party client for
# checking compatibility by hand; chromium (driven by playwright, which downloads no browser of
# its own) runs the dashboard's browser test. Installed only when missing, and only if we are root.
system-deps:
	@missing=""; \
	command -v java >/dev/null || missing="$$missing java"; \
	[ -f /usr/share/java/zookeeper.jar ] || missing="$$missing zookeeper.jar"; \
	command -v kcat >/dev/null || missing="$$missing kcat"; \
	command -v iptables >/dev/null || missing="$$missing iptables"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	command -v $(PYTHON) >/dev/null && $(PYTHON) -c 'import ensurepip' 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing$$missing: apt-get install -y $(APT_PACKAGES)"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update && apt-get install -y $(APT_PACKAGES); \
	  else \
	    echo "missing$$missing: run 'sudo apt-get install -y $(APT_PACKAGES)' and retry" >&2; exit 1; \
	  fi; \
	fi
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "odradek needs Python >= 3.11; $(PYTHON) is $$($(PYTHON) -V 2>&1)" >&2; exit 1; }

# The stamp makes re-runs free; editing pyproject.toml (new dependency) triggers a reinstall.
$(STAMP): pyproject.toml
	[ -x $(VENV)/bin/python ] || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

# ruff, then mypy (strict for the pure cores); both configured in pyproject.toml.
# ruff and mypy alone: only the virtualenv, none of the system packages the tests need
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy

# Two pytest-xdist workers: most tests wait on brokers and ZooKeeper (one core busy on average
# when run one at a time), so two at once on 2 cores take about half the time. Each file runs
# whole on one worker (tests/conftest.py), the fault runs one at a time.
test: setup lint
	$(VENV)/bin/pytest -q -p no:cacheprovider -m "not slow" -n 2 --dist loadgroup --durations=40

# The long variants (marked slow): more brokers, more data, more seeds. Not in `make test`,
# which must stay under 15 minutes on 2 cores.
test-long: setup
	$(VENV)/bin/pytest -q -p no:cacheprovider -m slow

# Jepsen-style fault runs (docs/reliability.md): every workload over FAULT_SEEDS x 100 faults,
# one JSON report per run in build/faults/ (a run with an anomaly keeps its data dir and names
# it), then one table per workload; exits 1 if any run found an anomaly (librdkafka's own
# bugs included: their rows say which). About 10 minutes a run on 2 cores.
FAULT_SEEDS ?= 1 2 3 4 5
FAULT_WORKLOADS ?= default ordered transactions groups admin
faults: setup
	mkdir -p build/faults
	status=0; \
	for w in $(FAULT_WORKLOADS); do \
	  for s in $(FAULT_SEEDS); do \
	    if $(VENV)/bin/python -m odradek.faults --workload $$w --seed $$s --faults 100 > build/faults/$$w-seed-$$s.json; \
	    then echo "$$w seed $$s: no anomaly"; else echo "$$w seed $$s: anomalies (build/faults/$$w-seed-$$s.json)"; status=1; fi; \
	  done; \
	  $(VENV)/bin/python -m odradek.faults.report $(foreach s,$(FAULT_SEEDS),build/faults/$$w-seed-$(s).json); \
	done; \
	exit $$status

# Protocol fuzzing (docs/reliability.md): 1,000,000 frames against the broker in-process on two
# workers, then 3,000 over TCP to a live broker; then the SASL exchange of a SASL_PLAINTEXT
# listener (odradek/fuzz/sasl_*.py), 200,000 exchanges in-process and 3,000 over TCP; prints
# counts and findings, exits 1 on any.
fuzz: setup
	$(VENV)/bin/python -m odradek.fuzz --frames 1000000 --tcp-frames 3000 --sasl-cases 200000 --sasl-tcp-cases 3000

demo: setup
	scripts/demo.sh

demo-down:
	$(VENV)/bin/odradek down --data-dir $(DEMO_DIR)

clean:
	if [ -f $(DEMO_DIR)/cluster.json ] && [ -x $(VENV)/bin/odradek ]; then $(VENV)/bin/odradek down --data-dir $(DEMO_DIR); fi
	rm -rf $(DEMO_DIR) build .mypy_cache .ruff_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

# Back to nothing: the next `make demo` / `make test` rebuilds the virtualenv too.
distclean: clean
	rm -rf $(VENV) src/*.egg-info
