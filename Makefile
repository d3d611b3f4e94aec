VENV := .venv
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(abspath $(PY))

.PHONY: demo test system-deps bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# make demo DEMO_ARGS=--keep-running: the broker and its web console stay up after the chapters
demo: $(VENV)/.installed
	$(PY) -m headwater.demo $(DEMO_ARGS)

# What the tests need from Debian: kcat (a real librdkafka 2.0.2 client), PostgreSQL, and strace
# (to see that a durable file replace fsyncs its directory), chromium and its driver (the web console's
# browser tests).
system-deps:
	@command -v kcat >/dev/null || (apt-get update -qq && apt-get install -y -qq kcat)
	@command -v strace >/dev/null || (apt-get update -qq && apt-get install -y -qq strace)
	@command -v chromedriver >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium chromium-driver)
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq postgresql)

test: $(VENV)/.installed system-deps
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(VENV)/.installed
	$(PY) bench/throughput.py

clean:
	rm -rf $(VENV) build src/*.egg-info
