"""What resampling to the plan's spacing is worth: one anatomy, trained at one voxel grid and
evaluated on scans stored at another, with and without resampling.

    python scripts/resampling_study.py [--steps 300] [--out outputs/resampling_study]

Generates (segnet.generated.phantom) a training set of 1 mm isotropic RAS scans, and four new cases
stored three times: on the training grid, at 0.75 x 0.75 x 2 mm in LPS, and as 3 mm sagittal
slices of 0.5 mm pixels (the same anatomy, so only the geometry differs). Trains the same 2D
model twice (data.resample=true, the default, and false), evaluates both on every copy with
segnet-evaluate's code, and prints foreground Dice as a Markdown table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hydra import compose, initialize_config_dir

from segnet.config import CONF, register_resolvers
from segnet.data.dataset_json import describe_dataset
from segnet.evaluation.evaluator import Evaluator, summarize
from segnet.generated.phantom import write_phantom_dataset
from segnet.inference.loading import load_checkpoint
from segnet.training.train import train

ROOT = Path(__file__).resolve().parent.parent
TRAIN_GRID = ((1.0, 1.0, 1.0), "RAS")
EVAL_GRIDS = {  # name: (spacing, stored axis order) of the same four new cases
    "1 mm RAS (the training grid)": ((1.0, 1.0, 1.0), "RAS"),
    "0.75 x 0.75 x 2 mm LPS": ((0.75, 0.75, 2.0), "LPS"),
    "0.5 x 0.5 x 3 mm PIL (sagittal)": ((0.5, 0.5, 3.0), "PIL"),
}


def train_and_score(out: Path, train_root: Path, eval_roots: dict[str, Path], resample: bool, steps: int
                    ) -> dict[str, float]:
    run = out / f"resample_{str(resample).lower()}"
    overrides = [
        "data=folder", f"data.root={train_root}", "data.spatial_dims=2", "data.fold=all",
        f"data.resample={resample}", "data.patch_size=[48,48]", "data.batch_size=4", "data.num_workers=0",
        f"data.steps_per_epoch={steps}", "trainer=cpu", "trainer.max_epochs=1", "trainer.enable_model_summary=false",
        "callbacks.progress_bar.refresh_rate=0",
        f"paths.output_dir={run}",
    ]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        train(compose(config_name="train", overrides=overrides))
    model = load_checkpoint(run / "checkpoints" / "last.ckpt", backend="cpp")
    scores = {}
    for name, root in eval_roots.items():
        description = describe_dataset(str(root))
        results = Evaluator(model, run / f"eval_{root.name}").run(list(description.training))
        scores[name] = summarize(results, list(model.data["class_names"]))["foreground_mean"]["Dice"]
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps per model")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "resampling_study")
    args = parser.parse_args()
    register_resolvers()
    train_root = write_phantom_dataset(args.out / "TrainIsotropic", [TRAIN_GRID] * 6)
    eval_roots = {name: write_phantom_dataset(args.out / f"Eval{i}", [grid] * 4, first_seed=100)
                  for i, (name, grid) in enumerate(EVAL_GRIDS.items())}
    rows = {resample: train_and_score(args.out, train_root, eval_roots, resample, args.steps)
            for resample in (True, False)}
    print(f"\n2D model, {args.steps} steps on 6 cases at 1 mm RAS; foreground Dice of 4 new cases stored as:\n")
    print("| data.resample | " + " | ".join(eval_roots) + " |")
    print("|---|" + "---|" * len(eval_roots))
    for resample, scores in rows.items():
        print(f"| {str(resample).lower()} | " + " | ".join(f"{scores[name]:.4f}" for name in eval_roots) + " |")


if __name__ == "__main__":
    main()
