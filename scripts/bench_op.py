"""Benchmark the edge op's backends, forward and forward+backward, against a copy of x.

    python scripts/bench_op.py [--quick] [--device cpu|cuda] [--out DIR] [--shapes 2x16x64x96x96 ...]
                               [--backends cpp ...]

Every backend that runs on the device, plus torch.compile of the python backend, in float32
(--backends picks some of them, --shapes other shapes).
Times are medians of torch.utils.benchmark on the machine's threads, all measured in one run
so that their ratios hold on a noisy machine; x.clone() is the memory-bandwidth ceiling, timed
right before and after each backend.
Writes bench_op.csv and bench_op.png (time against size per backend) into --out and prints a
Markdown table. On the CPU it also times the cpp backend on one single-channel 3D volume (the
input layer at inference) with one thread and with all of them: the kernels cut such a volume
into slab ranges so that every thread has work (bench_op_threads.csv).
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from timing import median_ms  # scripts/timing.py: Python puts this script's folder first on its path

import ops

FULL_SHAPES = {
    "cpu": [(8, 32, 128, 128), (8, 32, 256, 256), (2, 16, 32, 48, 48), (2, 16, 64, 96, 96)],
    "cuda": [(16, 32, 256, 256), (8, 32, 256, 256), (2, 16, 64, 96, 96)],
}
QUICK_SHAPES = [(4, 16, 64, 64), (4, 16, 128, 128), (1, 8, 16, 24, 24), (1, 8, 32, 48, 48)]
SINGLE_VOLUME = {"full": (1, 1, 160, 192, 160), "quick": (1, 1, 64, 96, 64)}


@dataclass
class Row:
    shape: str
    backend: str
    forward_ms: float
    forward_backward_ms: float
    clone_ms: float
    forward_vs_clone: float
    forward_backward_vs_clone: float
    backward_vs_clone: float  # (fwd+bwd - fwd) / clone; reading x, grad_y and writing grad_x costs 1.5
    speedup_vs_python: float
    speedup_vs_compiled: float
    saved_bytes_per_x: float
    forward_bandwidth_vs_copy: float
    backward_bandwidth_vs_copy: float


def saved_bytes(fn, x: torch.Tensor, alpha: torch.Tensor) -> int:
    """Bytes autograd keeps for backward, each storage counted once."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x.detach().requires_grad_(), alpha.detach().requires_grad_())
    return sum(storages.values())


BACKENDS = ("python", "python+compile", "cpp", "cuda")


def backends_for(device: str, names: tuple[str, ...] = BACKENDS) -> dict[str, object]:
    """The backends among `names` that run on `device`."""
    native = "cuda" if device == "cuda" else "cpp"
    backends = {}
    if "python" in names:
        backends["python"] = lambda x, a: ops.edge_enhance(x, a, backend="python")
    if "python+compile" in names:
        compiled = torch.compile(ops.edge_enhance_reference, options=ops.INDUCTOR_OPTIONS)
        backends["python+compile"] = lambda x, a: compiled(x, a)
    if native in names:
        backends[native] = lambda x, a: ops.edge_enhance(x, a, backend=native)
    return backends


def parse_shape(text: str) -> tuple[int, ...]:
    """'2x16x64x96x96' -> (2, 16, 64, 96, 96): (N, C, H, W) or (N, C, D, H, W)."""
    try:
        shape = tuple(int(n) for n in text.lower().split("x"))
    except ValueError:
        shape = ()
    if len(shape) not in (4, 5) or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"a shape is NxCxHxW or NxCxDxHxW with positive sizes, got {text!r}")
    return shape


def bench_shape(shape, device: str, min_run_time: float, names: tuple[str, ...] = BACKENDS) -> list[Row]:
    torch.manual_seed(0)
    x = torch.randn(shape, device=device)
    alpha = torch.randn(shape[1], device=device)
    grad = torch.randn_like(x)

    def clone_ms() -> float:
        return median_ms(lambda: x.clone(), min_run_time)

    measured = {}
    for name, fn in backends_for(device, names).items():
        xg = x.detach().requires_grad_()
        ag = alpha.detach().requires_grad_()

        def forward(fn=fn):
            with torch.no_grad():
                fn(x, alpha)

        def forward_backward(fn=fn, xg=xg, ag=ag):
            torch.autograd.backward(fn(xg, ag), grad)
            xg.grad = ag.grad = None

        # The copy is timed right before and after each backend, so that a machine whose load
        # drifts during the run still gives each row's ratios the copy of its own moment.
        before = clone_ms()
        fwd, fwd_bwd = median_ms(forward, min_run_time), median_ms(forward_backward, min_run_time)
        measured[name] = (fwd, fwd_bwd, saved_bytes(fn, x, alpha) / (x.numel() * x.element_size()),
                          (before + clone_ms()) / 2)

    def speedup_vs(name: str, fwd_bwd: float) -> float:
        return measured[name][1] / fwd_bwd if name in measured else float("nan")

    rows = []
    for name, (fwd, fwd_bwd, saved, clone) in measured.items():
        bwd = max(fwd_bwd - fwd, 1e-9)
        rows.append(
            Row(
                shape="x".join(map(str, shape)),
                backend=name,
                forward_ms=fwd,
                forward_backward_ms=fwd_bwd,
                clone_ms=clone,
                forward_vs_clone=fwd / clone,
                forward_backward_vs_clone=fwd_bwd / clone,
                backward_vs_clone=bwd / clone,
                speedup_vs_python=speedup_vs("python", fwd_bwd),
                speedup_vs_compiled=speedup_vs("python+compile", fwd_bwd),
                saved_bytes_per_x=saved,
                # forward moves 2 tensors (x in, y out), backward 3 (grad_y, x in, grad_x out);
                # a copy moves 2 in clone_ms
                forward_bandwidth_vs_copy=clone / fwd,
                backward_bandwidth_vs_copy=1.5 * clone / bwd,
            )
        )
    return rows


def thread_scaling(shape, min_run_time: float) -> list[dict]:
    """The cpp backend on one volume with 1 thread and with all threads, in one run."""
    torch.manual_seed(0)
    x = torch.randn(shape)
    alpha = torch.randn(shape[1])
    grad = torch.randn_like(x)
    xg = x.detach().requires_grad_()
    ag = alpha.detach().requires_grad_()

    def forward():
        with torch.no_grad():
            ops.edge_enhance(x, alpha, backend="cpp")

    def forward_backward():
        torch.autograd.backward(ops.edge_enhance(xg, ag, backend="cpp"), grad)
        xg.grad = ag.grad = None

    everyone = torch.get_num_threads()
    rows = []
    try:
        for count in sorted({1, everyone}):
            torch.set_num_threads(count)
            rows.append({"shape": "x".join(map(str, shape)), "threads": count,
                         "forward_ms": median_ms(forward, min_run_time),
                         "forward_backward_ms": median_ms(forward_backward, min_run_time)})
    finally:
        torch.set_num_threads(everyone)
    for row in rows:
        row["forward_speedup"] = rows[0]["forward_ms"] / row["forward_ms"]
        row["forward_backward_speedup"] = rows[0]["forward_backward_ms"] / row["forward_backward_ms"]
    return rows


def print_table(rows: list[Row]) -> None:
    header = (
        "| shape | backend | fwd ms | fwd+bwd ms | fwd/clone | fwd+bwd/clone | bwd/clone | x vs python | x vs compiled "
        "| saved/x bytes | fwd BW vs copy | bwd BW vs copy |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for r in rows:
        print(
            f"| {r.shape} | {r.backend} | {r.forward_ms:.1f} | {r.forward_backward_ms:.1f} | {r.forward_vs_clone:.2f} "
            f"| {r.forward_backward_vs_clone:.2f} | {r.backward_vs_clone:.2f} "
            f"| {r.speedup_vs_python:.1f} | {r.speedup_vs_compiled:.1f} "
            f"| {r.saved_bytes_per_x:.2f} | {r.forward_bandwidth_vs_copy:.0%} | {r.backward_bandwidth_vs_copy:.0%} |"
        )


def plot(rows: list[Row], path: Path) -> None:
    """Forward and forward+backward time against tensor size, one line per backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def elements(shape: str) -> int:
        return int(torch.tensor([int(s) for s in shape.split("x")]).prod())

    def ndim(shape: str) -> int:
        return shape.count("x") - 1

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, field, title in zip(axes, ("forward_ms", "forward_backward_ms"), ("forward", "forward + backward"),
                                strict=True):
        for dims, style in ((2, "-"), (3, ":")):
            for i, backend in enumerate(dict.fromkeys(r.backend for r in rows)):
                points = sorted((elements(r.shape), getattr(r, field)) for r in rows
                                if r.backend == backend and ndim(r.shape) == dims)
                if points:  # (elements, ms) pairs -> the x and the y values
                    ax.plot(*zip(*points, strict=True), style, marker="o", color=f"C{i}", label=f"{backend} {dims}D")
            clones: dict[int, list[float]] = {}  # each backend's row has the copy of its moment
            for r in rows:
                if ndim(r.shape) == dims:
                    clones.setdefault(elements(r.shape), []).append(r.clone_ms)
            clone = sorted((n, sum(ms) / len(ms)) for n, ms in clones.items())
            if clone:
                ax.plot(*zip(*clone, strict=True), style, color="black", label=f"x.clone() {dims}D")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("elements")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("median time (ms)")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller shapes and shorter timing (under a minute)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--out", type=Path, default=Path("outputs/bench"))
    parser.add_argument("--shapes", nargs="+", type=parse_shape, metavar="NxCx[D]xHxW",
                        help="these shapes instead of the default ones (e.g. 2x16x64x96x96)")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=BACKENDS,
                        help="only these backends (default: every one that runs on the device)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a visible GPU; run on a GPU machine or use --device cpu")
    shapes = args.shapes or (QUICK_SHAPES if args.quick else FULL_SHAPES[args.device])
    min_run_time = 0.2 if args.quick else 1.0
    print(f"torch {torch.__version__}, device {args.device}, threads {torch.get_num_threads()}, float32")
    names = tuple(args.backends)
    rows = [row for shape in shapes for row in bench_shape(shape, args.device, min_run_time, names)]
    if not rows:
        parser.error(f"none of the backends {', '.join(names)} runs on {args.device}")
    print_table(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "bench_op.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(rows[0])))
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    plot(rows, args.out / "bench_op.png")
    print(f"wrote {args.out / 'bench_op.csv'} and {args.out / 'bench_op.png'}")
    if args.device == "cpu":
        scaling = thread_scaling(SINGLE_VOLUME["quick" if args.quick else "full"], min_run_time)
        print("\n| shape | threads | fwd ms | fwd+bwd ms | fwd speed-up | fwd+bwd speed-up |"
              "\n|---|---|---|---|---|---|")
        for r in scaling:
            print(f"| {r['shape']} | {r['threads']} | {r['forward_ms']:.1f} | {r['forward_backward_ms']:.1f} "
                  f"| {r['forward_speedup']:.2f} | {r['forward_backward_speedup']:.2f} |")
        with open(args.out / "bench_op_threads.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(scaling[0]))
            writer.writeheader()
            writer.writerows(scaling)
    return 0


if __name__ == "__main__":
    sys.exit(main())
