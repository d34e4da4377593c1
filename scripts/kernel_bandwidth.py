"""Measured fraction of copy bandwidth of the op's fused kernels, next to the static model.

    python scripts/kernel_bandwidth.py [--device cuda|cpu] [--quick] [--out DIR]

For every shape and dtype (float32, float16, bfloat16, float64) it times the forward op and the
backward op (torch.ops.segnet_ops directly, without autograd) and x.clone() in the same dtype,
all in one run. Forward moves two tensors (x in, y out), backward three (x and grad_y in,
grad_x out), a copy two, so

    measured fraction = (tensors moved / op time) / (2 / copy time).

On a GPU, the fraction that scripts/kernel_report.py models for the same kernel (whole-vector
loads) stands beside it, at the same shape where the report models it (its SHAPES), else at
the model's best geometry; the model is a ceiling, so the gap is what latency, idle lanes and
caches cost. With --device cpu it measures the cpp kernels the same way (no model).
Writes kernel_bandwidth.csv into --out and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import torch

# scripts/kernel_model/ and scripts/timing.py: Python puts this script's folder first on its path
from kernel_model.report import modeled, modeled_fractions, report
from timing import median_ms

import ops
from ops.library import build_cuda_library

SHAPES = [(8, 32, 256, 256), (2, 16, 64, 96, 96)]
QUICK_SHAPES = [(2, 4, 64, 128), (1, 2, 16, 32, 64)]
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


def measure(shape, dtype: torch.dtype, device: str, min_run_time: float) -> dict[str, float]:
    generator = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(shape, generator=generator, device=device).to(dtype)
    grad_y = torch.randn(shape, generator=generator, device=device).to(dtype)
    alpha = torch.randn(shape[1], generator=generator, device=device).to(dtype)
    op = torch.ops.segnet_ops
    copy = median_ms(lambda: x.clone(), min_run_time)
    forward = median_ms(lambda: op.edge_enhance(x, alpha, 1e-6), min_run_time)
    backward = median_ms(lambda: op.edge_enhance_backward(grad_y, x, alpha, 1e-6), min_run_time)
    return {
        "copy_ms": copy,
        "forward_ms": forward,
        "backward_ms": backward,
        "forward_fraction": (2 / forward) / (2 / copy),
        "backward_fraction": (3 / backward) / (2 / copy),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--quick", action="store_true", help="small shapes, a few calls timed (a smoke run)")
    parser.add_argument("--out", type=Path, default=Path("outputs/bench"))
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a visible GPU; use --device cpu to measure the cpp kernels")
    ops.resolve_backend("cuda" if args.device == "cuda" else "cpp", torch.device(args.device))
    model = modeled_fractions(report(build_cuda_library().path)) if args.device == "cuda" else {}
    min_run_time = 0.01 if args.quick else 0.5  # --quick: a smoke run, each timing a few calls
    rows = []
    for shape in QUICK_SHAPES if args.quick else SHAPES:
        for name, dtype in DTYPES.items():
            m = measure(shape, dtype, args.device, min_run_time)
            for direction in ("forward", "backward"):
                rows.append({
                    "shape": "x".join(map(str, shape)),
                    "kernel": f"{len(shape) - 2}D {direction}",
                    "dtype": name,
                    "ms": m[f"{direction}_ms"],
                    "copy_ms": m["copy_ms"],
                    "measured_fraction": m[f"{direction}_fraction"],
                    "modeled_fraction": modeled(model, shape, direction, name),
                })
    print(f"torch {torch.__version__}, device {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else f", {torch.get_num_threads()} threads"))
    print("| shape | kernel | dtype | ms | copy ms | measured fraction of copy | modeled (ceiling) |\n"
          "|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['shape']} | {r['kernel']} | {r['dtype']} | {r['ms']:.3f} | {r['copy_ms']:.3f} "
              f"| {r['measured_fraction']:.2f} | {r['modeled_fraction']:.2f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "kernel_bandwidth.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out / 'kernel_bandwidth.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
