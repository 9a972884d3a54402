# The two commands of the README: `make up` and `make test`; `make image` and `make test-image`
# for the container image (README, "Run it in containers").
# The interpreter .venv is made from: the system's, SYSTEM_PYTHON, when it is 3.11 or later
# with its venv module and its headers (on Debian: python3, python3-venv, python3-dev, the
# interpreter the container image ships, Debian's optimized build linked into its
# executable, measured a few per cent faster here than a source build loading libpython:
# bench/RESULTS.md, "The interpreter"), else the first python3 on PATH.
# `make PYTHON=...` chooses; `make which-python` says which is chosen.
SYSTEM_PYTHON ?= /usr/bin/python3
USABLE_PYTHON := import ensurepip, os, sys, sysconfig; \
	assert sys.version_info >= (3, 11); \
	assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell $(SYSTEM_PYTHON) -c '$(USABLE_PYTHON)' >/dev/null 2>&1 && echo $(SYSTEM_PYTHON) || echo python3)
endif
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CHOSEN := $(VENV)/.python

.PHONY: FORCE which-python up test image test-image lint fuzz bench-store bench-produce bench-cluster bench-floors bench-peers bench-saturation bench-java-floors bench-clients bench-lite bench-models chaos upgrade-drill clean

# The C speedups are compiled by the install: a change to any C source rebuilds them.
C_SOURCES := store/_speedups.c ferrymq/codec/_speedups.c ferrymq/codec/_properties.h \
	ferrymq/codec/_crc32c.h ferrymq/codec/_record_layout.h ha/_replica_lane.c
# .venv is made anew (--clear) when the interpreter chosen is another than the one it was
# made from: venv keeps the links it finds in an existing one. CHOSEN names it, rewritten
# only when the choice changes.
$(CHOSEN): FORCE
	@mkdir -p $(VENV)
	@echo '$(PYTHON)' | cmp -s - $@ || echo '$(PYTHON)' > $@
which-python:
	@echo '$(PYTHON)'
$(STAMP): pyproject.toml $(C_SOURCES) $(CHOSEN)
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "ferrymq needs Python >= 3.11"'
	$(PYTHON) -m venv $(if $(filter $(CHOSEN),$?),--clear) $(VENV)
	echo '$(PYTHON)' > $(CHOSEN)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,spark,bench]'
	touch $(STAMP)

up: $(STAMP)
	$(PY) -m ferrymq.cli up

# Two workers (the host's cores), a test file per worker at a time; then the tests that must
# have the host to themselves (the ``alone`` marker, tests/support/alone.py). Both parts run
# whatever the first found, so one run reports every failure.
# Bytecode first: the hundreds of Python processes the tests start (nodes, clients, tools)
# import this tree's modules, which an editable install leaves uncompiled, and an
# environment with PYTHONDONTWRITEBYTECODE would have each process compile them again
# (~0.3 s of CPU a node start) and each pytest process rewrite every test module's asserts
# again (~12 s a collection). compileall writes the tree's bytecode whatever that variable
# says; the tests run with it empty (unset, for Python), so pytest keeps its rewrites.
# The first part builds the official clients' drivers beside its tests (tests/conftest.py,
# --prebuild-drivers): from an empty cache their downloads and builds take minutes.
TEST_WORKERS ?= 2
PACKAGES := bench chaos deploy ferrymq ha node routing store tests
test: export PYTHONDONTWRITEBYTECODE =
test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m compileall -q -j 0 $(PACKAGES)
	status=0; \
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not alone and not container" \
		--prebuild-drivers || status=$$?; \
	$(PY) -m pytest -q -m "alone and not container" || status=$$?; \
	exit $$status

# The image from this checkout, without any registry (deploy/image/build.py: installs podman,
# runc and debootstrap from Debian when missing; the Debian base is cached in .cache/image/).
image:
	nice -n 10 $(PYTHON) -m deploy.image.build

# The tests of the image and the manifests (the ``container`` marker): builds the image (cached),
# checks every manifest against the Kubernetes API types (Go modules from the Go module proxy),
# plays the 3-node cluster with podman kube play and compose, kills a node with kill -9.
# podman-compose from PyPI: Debian bookworm's 1.0.3 cannot run a host-network service.
test-image: $(STAMP)
	$(PY) -m pip install --quiet 'podman-compose==1.0.6'
	$(PY) -m pytest -q -m container tests/deploy

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# The RPC fuzz with random seeds for FUZZ_SECONDS, then each native parser's target for
# FUZZ_SECONDS against its twin, the C built with AddressSanitizer (make test runs one
# short fixed round of each).
FUZZ_SECONDS ?= 600
fuzz: $(STAMP)
	FERRYMQ_FUZZ_SECONDS=$(FUZZ_SECONDS) $(PY) -m pytest -q -s tests/node/test_fuzz_rpc.py --timeout=0
	$(PY) -m tests.support.native_fuzz_run --seconds $(FUZZ_SECONDS)

bench-store: $(STAMP)
	$(PY) -m bench.store --json

bench-produce: $(STAMP)
	$(PY) -m bench.produce --json

bench-cluster: $(STAMP)
	$(PY) -m bench.cluster --json

# What a server storing nothing allows here: the floors under the two benchmarks above.
bench-floors: $(STAMP)
	$(PY) -m bench.grpc_ceiling --json

# The official Java client offering a 3-node cluster a growing rate (Java 17 and Maven).
bench-saturation: $(STAMP)
	$(PY) -m bench.saturation --json

# The official Java 4.x client's windowed send against a no-op 4.x broker (its floor), one
# node, a SYNC group and one Apache RocketMQ broker (Java 17, Maven: jars from Maven Central).
bench-java-floors: $(STAMP)
	$(PY) -m bench.java_ceiling --json

# Kill -9 of the master under each official client's load, 5 times per client (Java 17,
# Maven, Node.js and npm: the clients are fetched on first use).
bench-clients: $(STAMP)
	$(PY) -m tests.support.client_drivers .venv/client-drivers.json
	$(PY) -m bench.client_failover --json --drivers .venv/client-drivers.json

# Lite topics at scale: 100,000 lite topics and 10,000 subscriptions, ferrymq against Apache
# RocketMQ 5.5 (Java 17, Maven: the jars are fetched from Maven Central on first use).
bench-lite: $(STAMP)
	$(PY) -m bench.lite --json

# RocketMQ 5.4/5.5's newest message models (priority, recall, lite topics) through the official
# Python client, ferrymq beside Apache RocketMQ 5.5 (Java 17, Maven, as bench-lite).
bench-models: $(STAMP)
	$(PY) -m bench.models --json --java-remoting-driver "$$($(PY) -m tests.support.clients argv java-remoting5)"

# ferrymq against NATS JetStream, Redis Streams and RabbitMQ quorum queues (apt-installs them),
# Apache Kafka and Apache RocketMQ (Java 17; jars fetched from Maven Central by the benchmark).
bench-peers: $(STAMP)
	$(PY) -m bench.peers --json

# One chaos run: make chaos MODE=async-sync-flush FAULTS=kill,pause DURATION=5m ROUNDS=1
MODE ?= sync-async-flush
FAULTS ?= kill,pause,partition,restart-all,power-loss
DURATION ?= 5m
ROUNDS ?= 1
chaos: $(STAMP)
	$(PY) -m ferrymq.cli chaos run --mode $(MODE) --faults $(FAULTS) --duration $(DURATION) --rounds $(ROUNDS) --data chaos-run

# The rolling upgrade drill (docs/upgrades.md): a 3-node cluster of the last release in
# releases.toml (built from git history into its own virtualenv) upgraded node by node to
# this checkout under load, downgraded back, upgraded again and finalized.
upgrade-drill: $(STAMP)
	$(PY) -m chaos.upgrade_drill

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .cache
