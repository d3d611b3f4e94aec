VENV := .venv
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(abspath $(PY))
# Some machines set PYTHONDONTWRITEBYTECODE (this development machine does): every process the tests start
# (a broker, a CLI command, a Spark driver and its Python workers) would then compile Headwater's
# modules afresh, and pytest rewrite every test module in each worker. Written once, they are read.
export PYTHONDONTWRITEBYTECODE :=

.PHONY: demo test system-deps quix-venv jvm bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# make demo DEMO_ARGS=--keep-running: the broker and its web console stay up after the chapters;
# HEADWATER_DEMO_BOOTSTRAP=HOST:PORT,... make demo: the chapters on that cluster, no broker started
demo: $(VENV)/.installed
	$(PY) -m headwater.demo $(DEMO_ARGS)

# What the tests need from Debian: kcat (a real librdkafka 2.0.2 client), PostgreSQL, strace
# (to see that a durable file replace fsyncs its directory), chromium and its driver (the web
# console's browser tests), rabbitmq-server (the peer of bench/share_groups.py, whose smoke
# make test runs), Maven with a JDK 17 (Kafka's own clients and tools, `make jvm`), and jq (the
# offsets move of docs/scaling.md, tests/system/kafka_cluster/test_scaling.py).
system-deps:
	@command -v kcat >/dev/null || (apt-get update -qq && apt-get install -y -qq kcat)
	@command -v strace >/dev/null || (apt-get update -qq && apt-get install -y -qq strace)
	@command -v chromedriver >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium chromium-driver)
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq postgresql)
	@command -v rabbitmq-server >/dev/null || (apt-get update -qq && apt-get install -y -qq rabbitmq-server)
	@command -v mvn >/dev/null || (apt-get update -qq && apt-get install -y -qq maven openjdk-17-jdk-headless)
	@command -v jq >/dev/null || (apt-get update -qq && apt-get install -y -qq jq)

# quixstreams pins confluent-kafka < 2.13, older than Headwater's: it gets a virtualenv of its
# own, which tests/system/test_ecosystem.py runs its application with.
QUIX_VENV := .venv-quix
$(QUIX_VENV)/.installed:
	python3 -m venv $(QUIX_VENV)
	$(QUIX_VENV)/bin/pip install -q 'quixstreams>=3.28,<4'
	touch $@

quix-venv: $(QUIX_VENV)/.installed

# Apache Kafka's clients and tools, Spark's Kafka connector and the benches' JVM peers (RabbitMQ's
# PerfTest, Debezium), from Maven Central as a user gets them (jvm/pom.xml), into build/jvm/ (never
# committed). Maven keeps what it downloads in ~/.m2, so only the first run on a machine
# downloads (about 280 MB); the stamp makes
# the next runs a no-op until something under jvm/ changes. The folders are emptied first
# so that they hold exactly what the poms resolve.
JVM_BUILD := build/jvm
$(JVM_BUILD)/.installed: $(shell find jvm -type f)
	@command -v mvn >/dev/null || (echo "make jvm needs Maven and a JDK 17: make system-deps" && false)
	rm -rf $(JVM_BUILD)/kafka $(JVM_BUILD)/spark-kafka $(JVM_BUILD)/perf-test $(JVM_BUILD)/debezium
	mvn -B -q -f jvm/pom.xml package
	touch $@

jvm: $(JVM_BUILD)/.installed

# Two workers: most tests wait on brokers, databases and clients rather than compute, so on
# the 2-core machine 1,041 tests take 15 min (on one worker, 977 of them took 20.5 min); the
# Spark tests share one worker (one session), a module's tests stay together (tests/conftest.py).
# The 30 slowest tests are listed at the end, to keep the suite within its 30 minutes.
TEST_WORKERS ?= 2
test: $(VENV)/.installed system-deps quix-venv jvm
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=30 $(PYTEST_ARGS)

bench: $(VENV)/.installed
	$(PY) bench/throughput.py

clean:
	rm -rf $(VENV) $(QUIX_VENV) build src/*.egg-info
