"""A tiny nnU-Net v2 model trained with nnU-Net's own API, and its own predictions, for the tests of
reading its folders.

Run as a script in a process of its own (nnU-Net reads nnUNet_raw, nnUNet_preprocessed and
nnUNet_results once, when first imported):

    python tests/helpers/nnunet_model.py BASE [ITERATIONS]

writes BASE/raw/Dataset901_Tiny (six 3D cases: a bright and a dark blob in noise, a zero border
around the anatomy, 2 mm along the first stored axis so that nnU-Net's plan transposes the axes),
BASE/test (two more cases to predict), through nnU-Net's planning, preprocessing and trainer (on
the CPU, a small network: 8 features at the top) its trained model folder
BASE/results/Dataset901_Tiny/nnUNetTrainer__nnUNetPlans__3d_fullres with fold_0's
checkpoint_final.pth, and nnUNetPredictor's label maps of BASE/test in BASE/nnunet_predictions.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import NamedTuple

from segnet.generated.blobs import write_blob_case, write_blob_dataset

DATASET = "Dataset901_Tiny"
CONFIGURATION = "3d_fullres"
ITERATIONS = 20  # enough for both blobs (pseudo Dice above 0.9; 12 learnt neither)


class NnunetModel(NamedTuple):
    """What this script writes into `base`."""

    base: Path

    @property
    def folder(self) -> Path:
        """Its trained model folder (nnUNetTrainer__nnUNetPlans__3d_fullres)."""
        return model_folder(self.base)

    @property
    def checkpoint(self) -> Path:
        return self.folder / "fold_0" / "checkpoint_final.pth"

    @property
    def test_images(self) -> Path:
        return self.base / "test"

    @property
    def predictions(self) -> Path:
        """nnUNetPredictor's label maps of test_images."""
        return self.base / "nnunet_predictions"


def write_dataset(base: Path) -> Path:
    root = write_blob_dataset(base / "raw" / DATASET, 6)
    (base / "test").mkdir()
    for i in range(2):
        write_blob_case(base / "test" / f"test{i}_0000.nii.gz", None, 100 + i)
    return root


def train(base: Path, iterations: int) -> None:
    import torch
    from nnunetv2.experiment_planning.plan_and_preprocess_api import extract_fingerprints, plan_experiments, preprocess
    from nnunetv2.run.run_training import get_trainer_from_args

    extract_fingerprints([901], num_processes=1, check_dataset_integrity=True, clean=True, verbose=False)
    plan_experiments([901])  # sizes its estimate's threads by nnUNet_n_proc_DA, so 1 until training
    plans_file = base / "preprocessed" / DATASET / "nnUNetPlans.json"
    plans = json.loads(plans_file.read_text())
    arch = plans["configurations"][CONFIGURATION]["architecture"]["arch_kwargs"]
    # a small network: seconds on a CPU
    arch["features_per_stage"] = [min(8 * 2**i, 32) for i in range(len(arch["features_per_stage"]))]
    plans["configurations"][CONFIGURATION]["batch_size"] = 2
    plans_file.write_text(json.dumps(plans, indent=2))
    preprocess([901], configurations=(CONFIGURATION,), num_processes=(1,), verbose=False)
    os.environ["nnUNet_n_proc_DA"] = "0"  # augmentation in this process
    torch.manual_seed(0)
    trainer = get_trainer_from_args("901", CONFIGURATION, 0, device=torch.device("cpu"))
    trainer.num_iterations_per_epoch, trainer.num_val_iterations_per_epoch = iterations, 1
    trainer.num_epochs = 1
    trainer.initial_lr = 0.05
    trainer.run_training()


def model_folder(base: Path) -> Path:
    return base / "results" / DATASET / f"nnUNetTrainer__nnUNetPlans__{CONFIGURATION}"


def predict(base: Path, output: Path) -> None:
    """nnU-Net's own label maps of BASE/test: windows half a patch apart, Gaussian-weighted, fold 0,
    unmirrored."""
    import torch
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    predictor = nnUNetPredictor(tile_step_size=0.5, use_gaussian=True, use_mirroring=False,
                                perform_everything_on_device=False, device=torch.device("cpu"), allow_tqdm=False)
    predictor.initialize_from_trained_model_folder(str(model_folder(base)), use_folds=(0,),
                                                   checkpoint_name="checkpoint_final.pth")
    output.mkdir(parents=True, exist_ok=True)
    predictor.predict_from_files_sequential(str(base / "test"), str(output), save_probabilities=False,
                                            overwrite=True, folder_with_segs_from_prev_stage=None)


def main(argv: list[str]) -> None:
    base = Path(argv[0])
    for name in ("raw", "preprocessed", "results"):
        os.environ[f"nnUNet_{name}"] = str(base / name)
    os.environ.update(nnUNet_n_proc_DA="1", nnUNet_compile="false")
    write_dataset(base)
    train(base, int(argv[1]) if len(argv) > 1 else ITERATIONS)
    predict(base, base / "nnunet_predictions")


if __name__ == "__main__":
    main(sys.argv[1:])
