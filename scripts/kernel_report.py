"""Static performance model of the CUDA kernels, read from their sm_90 code: needs nvcc, not a GPU.

    python scripts/kernel_report.py [--json PATH]

Prints each kernel's limits and modeled fraction of copy bandwidth, at the model's best geometry
and at the benchmark shapes, and exits 1 when a kernel spills or models below its floor. The
model is the package scripts/kernel_model/: how it reads the code and the launch, and each rate
and rule of the H200 with where it comes from, are in its modules' docstrings.
"""

import sys

from kernel_model.report import main  # scripts/kernel_model/: Python puts this script's folder first on its path

if __name__ == "__main__":
    sys.exit(main())
