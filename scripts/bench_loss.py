"""What the loss terms (conf/loss/) cost in a training step.

    python scripts/bench_loss.py [--device cpu|cuda] [--quick] [--out DIR]

For a 2D and a 3D batch of the default network (conf/model/edge_unet.yaml, 3 classes), times the
training step with dice_ce alone (forward, Dice + cross-entropy, backward), then the added terms'
own forward and backward on that batch's logits:
- the edge term with its edges |Sobel p| computed three ways: fused, the op's magnitude form
  (ops.edge_magnitude, the cpp or cuda backend); python, the same math composed of torch
  operations (ops.edge_magnitude_reference); monai, MONAI's SobelGradients (replicate borders, its
  normalized kernels), then the root. The three give the same loss, which is checked first;
- every added term as training builds it (segnet.model.loss_terms), the cached maps' terms on
  maps of the batch's shape.
A term's share is its time over the step's plus its own. Times are medians of
torch.utils.benchmark, all measured in one run so that their ratios hold on a noisy machine.
Prints two Markdown tables and writes bench_loss_edges.csv and bench_loss_terms.csv to --out.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf

import ops  # (first: it points cpp_extension, which the benchmark module imports, at CUDA_HOME)

# isort: split
from monai.transforms import SobelGradients
from timing import median_ms  # scripts/timing.py: Python puts this script's folder first on its path

from segnet.config import CONF
from segnet.model.dice_ce import dice_ce_loss
from segnet.model.edge_loss import EPS, EdgeMatchingLoss
from segnet.model.foreground import ForegroundUnits
from segnet.model.loss_terms import TERMS, TrainingLoss
from segnet.model.network import build_network

CLASSES = 3
BATCHES = {"full": {2: (8, 96, 96), 3: (2, 64, 64, 48)}, "quick": {2: (4, 64, 64), 3: (1, 32, 32, 24)}}


class PythonEdges(EdgeMatchingLoss):
    def edges(self, x: torch.Tensor) -> torch.Tensor:
        return ops.edge_magnitude_reference(x, EPS)


class MonaiEdges(EdgeMatchingLoss):
    """The edges from MONAI's SobelGradients, which filters one (C, *spatial) image at a time."""

    def edges(self, x: torch.Tensor) -> torch.Tensor:
        sobel = SobelGradients(padding_mode="replicate", dtype=x.dtype)
        ndim = x.dim() - 2
        gradients = sobel(x.flatten(0, 1)).unflatten(0, (ndim, *x.shape[:2]))
        return torch.sqrt(gradients.square().sum(0) + EPS)


def default_network(dims: int, device: str) -> torch.nn.Module:
    model = OmegaConf.to_container(OmegaConf.load(CONF / "model" / "edge_unet.yaml"))
    model.update(spatial_dims=dims, in_channels=1, out_channels=CLASSES)
    return build_network(model, "auto").to(device)


def timed_term(loss, logits: torch.Tensor, args: tuple, min_run_time: float) -> float:
    def forward_backward():
        logits.grad = None
        loss(logits, *args).backward()

    return median_ms(forward_backward, min_run_time)


def share_row(batch: tuple[int, ...], name: str, step_ms: float, loss_ms: float, baseline_ms: float) -> dict:
    return {"batch": "x".join(map(str, batch)), "name": name, "step_ms": round(step_ms, 2),
            "loss_ms": round(loss_ms, 2), "share_of_step": round(loss_ms / (step_ms + loss_ms), 4),
            "vs_first": round(loss_ms / baseline_ms, 2)}


def bench_batch(dims: int, batch: tuple[int, ...], device: str, min_run_time: float) -> tuple[list[dict], list[dict]]:
    """(the edge term's rows by how its edges are computed, every added term's rows) for one batch."""
    generator = torch.Generator().manual_seed(0)
    image = torch.randn(batch[0], 1, *batch[1:], generator=generator).to(device)
    label = torch.randint(0, CLASSES, (batch[0], 1, *batch[1:]), generator=generator).float().to(device)
    spacing = [[1.0] * dims] * batch[0]
    net, dice_ce = default_network(dims, device), dice_ce_loss(None)

    def step():
        net.zero_grad(set_to_none=True)
        dice_ce(net(image), label).backward()

    step_ms = median_ms(step, min_run_time)
    logits = net(image).detach().requires_grad_()
    units = ForegroundUnits(CLASSES)
    edges = {"fused": EdgeMatchingLoss(units), "python": PythonEdges(units), "monai": MonaiEdges(units)}
    values = {name: loss(logits, label, spacing) for name, loss in edges.items()}
    for name, value in values.items():  # the same loss, whichever way its edges are computed
        torch.testing.assert_close(value, values["fused"], rtol=1e-5, atol=1e-6, msg=f"{name}: another loss")
    edge_ms = {name: timed_term(loss, logits, (label, spacing), min_run_time) for name, loss in edges.items()}
    edge_rows = [share_row(batch, name, step_ms, ms, edge_ms["fused"]) for name, ms in edge_ms.items()]
    maps = {"distance": torch.randn(batch[0], CLASSES - 1, *batch[1:], generator=generator).to(device),
            "skeleton": units.masks(label)}
    term_ms = {}
    for term in TERMS[1:]:
        loss = TrainingLoss({"dice_ce": {"weight": 0.0}, term: {"weight": 1.0}}, CLASSES, None, 1)
        term_ms[term] = timed_term(lambda z, loss=loss: loss(z, label, 0, spacing, maps)["loss"], logits, (),
                                   min_run_time)
    term_rows = [share_row(batch, name, step_ms, ms, term_ms["edge"]) for name, ms in term_ms.items()]
    return edge_rows, term_rows


def print_table(rows: list[dict], what: str, first: str) -> None:
    print(f"| batch (N x spatial) | {what} | step, dice_ce alone (ms) | term fwd+bwd (ms) | share of the step "
          f"| time vs {first} |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['batch']} | {row['name']} | {row['step_ms']:.1f} | {row['loss_ms']:.2f} "
              f"| {100 * row['share_of_step']:.1f} % | {row['vs_first']:.2f}x |")


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--quick", action="store_true", help="smaller batches and shorter timing")
    parser.add_argument("--out", type=Path, default=Path("outputs/bench"))
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA GPU is visible here")
    ops.load_compiled(args.device)
    size = "quick" if args.quick else "full"
    measured = [bench_batch(dims, batch, args.device, 0.2 if args.quick else 1.0)
                for dims, batch in BATCHES[size].items()]
    edge_rows = [row for edges, _ in measured for row in edges]
    term_rows = [row for _, terms in measured for row in terms]
    print_table(edge_rows, "edges by", "fused")
    print()
    print_table(term_rows, "term", "edge")
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(edge_rows, args.out / "bench_loss_edges.csv")
    write_csv(term_rows, args.out / "bench_loss_terms.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
