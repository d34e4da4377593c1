# The README's two commands: `make train` and `make test`. Both install first (into the active
# Python environment), so they work on a fresh machine: `make train` what training needs (the
# core), `make test` also the extras its tests use. Each has its own stamp, so either runs right
# after the other; a changed pyproject.toml installs again.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
CORE_STAMP := .installed-core
TEST_STAMP := .installed-test
# Every extra but tracking-ui, whose MLflow server needs the SQLAlchemy 2 that search's Optuna refuses.
TEST_EXTRAS := test,peer,tracking,search,slurm,onnx,dicom

.PHONY: install build wheel train lint test test-fast bench gpu-check clean

# --no-compile: no byte-code for the thousands of modules nobody imports (torch's, nnU-Net's);
# Python compiles each module it imports on first use.
$(CORE_STAMP): pyproject.toml
	$(PIP) install --no-compile -e .
	touch $(CORE_STAMP)

$(TEST_STAMP): pyproject.toml
	$(PIP) install --no-compile -e ".[$(TEST_EXTRAS)]"
	touch $(TEST_STAMP)

install: $(CORE_STAMP)

build: $(CORE_STAMP)  ## compile the C++ op ahead of time; ARGS=--cuda builds the CUDA one too (needs nvcc)
	$(PYTHON) -m ops.build $(ARGS)

wheel: $(CORE_STAMP)  ## a wheel with the compiled op inside, for this torch, into dist/
	$(PIP) wheel . --no-build-isolation --no-deps -w dist

train: $(CORE_STAMP)  ## default training on built-in synthetic 2D data
	$(PYTHON) train.py $(ARGS)

lint: $(TEST_STAMP)  ## ruff, with the rules in pyproject.toml
	$(PYTHON) -m ruff check .

# Two pytest-xdist workers: much of the suite waits on compilers, subprocesses and files, so two
# keep both cores busy (docs/results/test-times.md has the times); PYTEST_WORKERS=0 runs in one process.
# worksteal: an idle worker takes half of the other's queue, so neither ends alone on a long test.
PYTEST_WORKERS ?= 2
XDIST = -n $(PYTEST_WORKERS) --dist worksteal

test: lint  ## everything CI runs: lint, then the whole suite
	$(PYTHON) -m pytest tests $(XDIST) $(PYTEST_ARGS)

test-fast: $(TEST_STAMP)
	$(PYTHON) -m pytest tests -m "not slow" $(XDIST) $(PYTEST_ARGS)

bench: $(CORE_STAMP)  ## op benchmark; ARGS=--quick for a short one
	$(PYTHON) scripts/bench_op.py $(ARGS)

gpu-check:
	bash scripts/gpu_check.sh

clean:
	rm -rf $(CORE_STAMP) $(TEST_STAMP) outputs multirun .pytest_cache build dist
