"""How close segnet-predict comes to the network's own time on a folder of cases.

    python scripts/bench_predict.py [--cases 6] [--quick] [--work DIR]

Cases: bench_data.py's generated brain-MRI-sized heads (192 x 224 x 192 at 1 mm; --quick: 48^3),
kept in --work. The model: the default edge_unet in 3D, 4 classes, its weights seeded (what it
predicts does not matter, only what it costs), sliding windows of 128^3 (--quick: 32^3), no
flips, on the CPU. All measured in one run, so that their ratios hold on a noisy machine:

- the network alone: PredictionWriter.infer, the sliding-window forward passes over each case,
  its images loaded beforehand: the floor;
- sequential: segnet-predict with num_workers=0 (load, infer, restore and write one after another);
- pipelined: segnet-predict with num_workers=2 (loader processes and a writer thread alongside).

Prints a Markdown table of seconds per case and each path's ratio to the floor.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_data import ensure_cases  # scripts/: Python puts this script's folder first on its path
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from segnet.config import CONF, register_resolvers
from segnet.data.dataset_json import Case
from segnet.inference.loading import load_for_inference
from segnet.inference.predict import predict
from segnet.inference.predictor import PredictionWriter, Predictor
from segnet.model.network import build_network

SIZES = {"full": ((192, 224, 192), 128), "quick": ((48, 48, 48), 32)}
CLASSES = ["background", "a", "b", "c"]


def write_model(path: Path, window: int) -> Path:
    """A checkpoint of the default 3D network, seeded, planned for 1 mm RAS and z-scored MRI."""
    model = OmegaConf.to_container(OmegaConf.load(CONF / "model" / "edge_unet.yaml"))
    model.update(spatial_dims=3, in_channels=1, out_channels=len(CLASSES))
    torch.manual_seed(0)
    net = build_network(model, "python")
    normalization = [{"channel": "MRI", "scheme": "zscore", "nonzero": True}]
    data = {"spatial_dims": 3, "in_channels": 1, "num_classes": len(CLASSES), "class_names": CLASSES,
            "ignore_label": None, "normalization": normalization, "orientation": "RAS", "spacing": [1.0, 1.0, 1.0]}
    inference = {"roi_size": [window] * 3, "sw_batch_size": 2, "overlap": 0.5}
    torch.save({"state_dict": {f"net.{k}": v for k, v in net.state_dict().items()},
                "hyper_parameters": {"model": model, "data": data, "inference": inference}}, path)
    return path


def network_seconds(checkpoint: Path, images: list[Path]) -> float:
    """The sliding-window forward passes alone, over every case, its loading done beforehand."""
    writer = PredictionWriter(Predictor([load_for_inference(checkpoint, "cpu", "auto")]), Path(tempfile.mkdtemp()))
    loaded = [writer.load(Case(path.name, (str(path),), None)) for path in images]
    start = time.perf_counter()
    for item in loaded:
        writer.infer(item)
    return time.perf_counter() - start


def predict_seconds(checkpoint: Path, images: Path, output: Path, workers: int) -> float:
    """segnet-predict's work on the folder, as its command composes it."""
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="predict", overrides=[f"ckpt_path={checkpoint}", f"input={images}",
                                                        f"output={output}", "tta=false", f"num_workers={workers}",
                                                        "device=cpu"])
    start = time.perf_counter()
    predict(cfg)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=6)
    parser.add_argument("--quick", action="store_true", help="48^3 cases, 32^3 windows (seconds)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "segnet-bench-predict")
    args = parser.parse_args(argv)
    register_resolvers()
    shape, window = SIZES["quick" if args.quick else "full"]
    pool = args.work / "x".join(map(str, shape))
    names = ensure_cases(pool, shape, args.cases)
    images = [pool / "imagesTr" / f"{name}.nii.gz" for name in names]
    checkpoint = write_model(args.work / "model.ckpt", window)
    floor = network_seconds(checkpoint, images)
    timed = {"network alone (the floor)": floor}
    for workers in (0, 2):
        name = "sequential (num_workers=0)" if workers == 0 else "pipelined (num_workers=2)"
        timed[name] = predict_seconds(checkpoint, pool / "imagesTr", args.work / f"out{workers}", workers)
    print(f"{args.cases} cases of {' x '.join(map(str, shape))}, windows {window}^3, "
          f"torch threads {torch.get_num_threads()}, CPU\n")
    print("| path | s per case | vs the floor |\n|---|---|---|")
    for name, seconds in timed.items():
        print(f"| {name} | {seconds / args.cases:.2f} | {seconds / floor:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
