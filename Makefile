# tierlog developer entry points. Every target bootstraps .venv on first use (idempotent, fast after).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# `make run` needs only the broker's own dependencies (~155 MB), not the extras (~1.5 GB): its stamp.
BASE_STAMP := $(VENV)/.installed-base
EXTRAS ?= dev,spark,bench

.PHONY: venv localstack kcat kafkajs run demo test test-fast lint format bench clean

venv: $(STAMP)

# Reinstall only when the project metadata changes. The full install covers the base one: it stamps both.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[$(EXTRAS)]"
	@touch $(STAMP) $(BASE_STAMP)

# The broker alone (`pip install -e .`), with pip's progress shown: the first `make run` takes a minute or
# two and should not look hung. Nothing to do when the full install above is current.
$(BASE_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then touch $(BASE_STAMP); else \
	  echo "make run: installing the broker and its dependencies into $(VENV) (first time only, ~155 MB)"; \
	  $(BIN)/python -m pip install --disable-pip-version-check --upgrade pip \
	  && $(BIN)/python -m pip install --disable-pip-version-check -e . \
	  && touch $(BASE_STAMP); fi

# `make demo` needs the broker and the Spark extra (pyspark, pyarrow: ~800 MB with the broker), not the test and bench ones.
SPARK_STAMP := $(VENV)/.installed-spark
$(SPARK_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then touch $(SPARK_STAMP); else \
	  echo "make demo: installing the broker and the Spark extra into $(VENV) (first time only, ~800 MB)"; \
	  $(BIN)/python -m pip install --disable-pip-version-check --upgrade pip \
	  && $(BIN)/python -m pip install --disable-pip-version-check -e ".[spark]" \
	  && touch $(SPARK_STAMP) $(BASE_STAMP); fi

# LocalStack needs Python >= 3.12 and gets a venv of its own (~/.cache/tierlog/localstack-venv) for the
# object-store contract suite. Idempotent: after the first install a stamp makes this instant. Without a
# Python >= 3.12 on PATH or in pyenv it says so in one line and the LocalStack tests skip.
localstack:
	@localstack/setup-venv.sh --optional

# kcat (Debian's package) drives the Kafka listener's tests from the command line. When it is missing it is
# installed with apt-get if this runs as root (CI runs as root on Debian); otherwise one line says so and the
# kcat tests skip.
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null 2>&1 \
	      || { apt-get update -qq >/dev/null 2>&1 \
	           && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null 2>&1; }; } \
	    || echo "kcat: apt-get install kcat failed; the kcat tests will skip" >&2; \
	  else echo "kcat: not installed (installing it needs root and apt-get); the kcat tests will skip" >&2; fi; }

# kafkajs (npm, pinned by infra/kafkajs/package-lock.json) runs the kafkajs example of
# docs/kafka-protocol.md. Without node and npm (Debian's nodejs and npm, installed with apt-get as root) one
# line says so and that test skips.
kafkajs:
	@infra/kafkajs/install.sh

# Installs the base package only (`make test` and `make lint` install the extras they need on their own).
# The broker prints where it listens and what to try first when it is ready.
run: $(BASE_STAMP)
	$(BIN)/tierlog serve $(ARGS)

# The tiered-storage demo (infra/demo.py): a broker, a tiered topic, records produced, uploaded, read back by
# Spark from the archive and by the CLI through the broker, then everything removed. DEMO_ARGS=--keep keeps
# the data. Spark needs Java 17 or later: without `java` on the PATH this says so before installing anything.
demo:
	@command -v java >/dev/null 2>&1 || { echo "make demo: Spark needs Java 17 or later and no java is on the PATH (Debian: apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
	@$(MAKE) --no-print-directory $(SPARK_STAMP)
	$(BIN)/python infra/demo.py $(DEMO_ARGS)

# The suite runs in TEST_WORKERS pytest-xdist worker processes, a test file per worker at a time (its
# module fixtures stay in one process); TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile

test: venv localstack kcat kafkajs
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

test-fast: venv localstack kcat kafkajs
	$(BIN)/python -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)

# The source folders as ruff sees them. mypy is strict (pyproject.toml) on the tierlog package (tierlog/ maps
# the folders in), then on the tests and the infra scripts.
SOURCES := tierlog service tiering client tests infra

lint: venv
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/mypy -p tierlog
	$(BIN)/mypy --strict tests infra
	$(BIN)/lint-imports

format: venv
	$(BIN)/ruff format $(SOURCES)
	$(BIN)/ruff check --fix $(SOURCES)

bench: venv
	$(BIN)/python infra/bench/log_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
