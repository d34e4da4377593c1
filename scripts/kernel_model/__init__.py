"""The static performance model of the op's CUDA kernels, which scripts/kernel_report.py prints:
sass.py reads cuobjdump's SASS (functions, loops, instructions and the registers they read and
write), geometry.py asks the kernels' own code for their launch, h200.py is the machine (issue,
pipes, the load/store path, barrier phases, occupancy, latency, DRAM, waves) and report.py builds
the library, reads every kernel and holds the modeled fractions to their floors.

The modules import each other relatively, so the package imports as `kernel_model` beside the
scripts that use it and as `scripts.kernel_model` in the tests."""
