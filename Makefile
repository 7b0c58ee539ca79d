# Everything runs inside .venv, built from pinned versions; nothing is installed outside it except the
# Debian package xxhash (the real xxhsum, used by the checksum tests).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PACKAGER := $(VENV)/bin/packager
DEMO := demo-output

.PHONY: help venv system-deps test demo bench clean

help:
	@echo "make demo   - build a tiny Qwen3 checkpoint, convert, validate, write its card and checksum manifest"
	@echo "make test   - run the test suite"
	@echo "make bench  - run the benchmarks in bench/ (slow: builds a 0.6B-shaped model)"

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==26.0.1
	# torch first, pinned: this takes the CPU build on disk instead of a multi-GB CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[convert,test]'
	touch $@

venv: $(VENV)/.installed

system-deps:
	@command -v xxhsum >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq xxhash >/dev/null; }

test: venv system-deps
	$(PY) -m pytest -q

demo: venv system-deps
	$(PY) -m tests.models $(DEMO)/tiny-qwen3
	$(PACKAGER) convert $(DEMO)/tiny-qwen3 --out $(DEMO)/bundle --force
	$(PACKAGER) validate $(DEMO)/bundle --strict
	$(PACKAGER) card $(DEMO)/bundle --spec examples/release.toml
	$(PACKAGER) checksum $(DEMO)/bundle
	cd $(DEMO)/bundle && xxhsum -c --quiet checksums.xxh128
	$(PACKAGER) validate $(DEMO)/bundle --strict
	@echo "demo bundle with card and manifest: $(DEMO)/bundle"

bench: venv system-deps
	$(PY) bench/convert_bench.py --runs 3
	$(PY) bench/validate_bench.py
	$(PY) bench/hash_bench.py

clean:
	rm -rf $(DEMO) build *.egg-info
