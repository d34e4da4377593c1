# The README's two commands: `make train` and `make test`. Both install first (into the active
# Python environment), so they work on a fresh machine.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
STAMP := .installed

.PHONY: install build wheel train lint test test-fast bench gpu-check clean

# --no-compile: no byte-code for the thousands of modules nobody imports (torch's, nnU-Net's);
# Python compiles each module it imports on first use.
$(STAMP): pyproject.toml
	$(PIP) install --no-compile -e ".[test,peer,tracking,search]"
	touch $(STAMP)

install: $(STAMP)

build: $(STAMP)  ## compile the C++ op ahead of time; ARGS=--cuda builds the CUDA one too (needs nvcc)
	$(PYTHON) -m ops.build $(ARGS)

wheel: $(STAMP)  ## a wheel with the compiled op inside, for this torch, into dist/
	$(PIP) wheel . --no-build-isolation --no-deps -w dist

train: $(STAMP)  ## default training on built-in synthetic 2D data
	$(PYTHON) train.py $(ARGS)

lint: $(STAMP)  ## ruff, with the rules in pyproject.toml
	$(PYTHON) -m ruff check .

# Two pytest-xdist workers: much of the suite waits on compilers, subprocesses and files, so two
# keep both cores busy (docs/results/test-times.md has the times); PYTEST_WORKERS=0 runs in one process.
# worksteal: an idle worker takes half of the other's queue, so neither ends alone on a long test.
PYTEST_WORKERS ?= 2
XDIST = -n $(PYTEST_WORKERS) --dist worksteal

test: lint  ## everything CI runs: lint, then the whole suite
	$(PYTHON) -m pytest tests $(XDIST) $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PYTHON) -m pytest tests -m "not slow" $(XDIST) $(PYTEST_ARGS)

bench: $(STAMP)  ## op benchmark; ARGS=--quick for a short one
	$(PYTHON) scripts/bench_op.py $(ARGS)

gpu-check:
	bash scripts/gpu_check.sh

clean:
	rm -rf $(STAMP) outputs multirun .pytest_cache build dist
