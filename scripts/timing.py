"""How the benchmarks (bench_op.py, bench_loss.py, kernel_bandwidth.py) time a call: the median of
torch.utils.benchmark on the machine's threads, after one warm-up call. A sibling of the scripts,
imported by name: Python puts a script's own folder first on its path."""

from __future__ import annotations

import torch

import ops  # noqa: F401  (first: it points cpp_extension, which the benchmark module imports, at CUDA_HOME)

# isort: split
import torch.utils.benchmark as benchmark


def median_ms(fn, min_run_time: float) -> float:
    fn()  # warm-up: compilation, library loading, allocator
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median * 1e3
