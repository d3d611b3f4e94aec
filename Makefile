VENV := .venv
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(abspath $(PY))

.PHONY: demo test system-deps bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(PY) -m headwater.demo

# What the tests need from Debian: kcat (a real librdkafka 2.0.2 client), PostgreSQL, strace
# (to see that a durable file replace fsyncs its directory), and rabbitmq-server (the peer of
# bench/share_groups.py, whose smoke make test runs).
system-deps:
	@command -v kcat >/dev/null || (apt-get update -qq && apt-get install -y -qq kcat)
	@command -v strace >/dev/null || (apt-get update -qq && apt-get install -y -qq strace)
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq postgresql)
	@command -v rabbitmq-server >/dev/null || (apt-get update -qq && apt-get install -y -qq rabbitmq-server)

test: $(VENV)/.installed system-deps
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(VENV)/.installed
	$(PY) bench/throughput.py

clean:
	rm -rf $(VENV) build src/*.egg-info
