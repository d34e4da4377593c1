"""How close segnet-predict comes to the network's own time on a folder of cases and, with
--nnunet, how close nnU-Net v2's predictor comes to its own.

    python scripts/bench_predict.py [--cases 6] [--quick] [--background 0.9] [--work DIR] [--onnx] [--nnunet]

Cases: bench_data.py's generated brain-MRI-sized heads (192 x 224 x 192 at 1 mm; --quick: 48^3),
kept in --work, 62 % of their voxels zero around the head; with --background SHARE (above that),
each case centred in a larger field of view of air (exact zeros, as a padded export leaves it) so
that SHARE of its voxels are background. The model: the default edge_unet in 3D, 4 classes, its
weights seeded (what it predicts does not matter, only what it costs), planned to crop each case
to its non-zero box (nnU-Net's crop), sliding windows of 128^3 (--quick: 32^3), no flips, on the
CPU. All measured in one run, so that their ratios hold on a noisy machine:

- the network alone: PredictionWriter.infer, the sliding-window forward passes over each case,
  its images loaded beforehand: the floor;
- sequential: segnet-predict with num_workers=0 (load, infer, restore and write one after another);
- pipelined: segnet-predict with num_workers=2 (loader processes and a writer thread alongside).

With --onnx (the `onnx` extra), the same network exported once with segnet-export's export_onnx:
- ONNX Runtime: network alone: as the floor above, the exported graph run by ONNX Runtime;
- ONNX Runtime: pipelined: segnet-predict model=PATH.onnx with num_workers=2.

With --nnunet (the `peer` extra: pip install -e ".[peer]"), the same run also times nnU-Net v2's
nnUNetPredictor on the same image files, set up in code as its trainer would leave it: a plan
with one 3d_fullres configuration (the same window as its patch, 1 mm, z-scored within the
nonzero mask, its default planner's resampling and its reader for these files) and the network
its trainer builds from that plan, a PlainConvUNet of edge_unet's levels and features (stride 1
then edge_unet's strides, 3^3 kernels, instance norm, LeakyReLU, two convolutions per encoder
stage and one per decoder stage, 4 classes, no deep supervision), seeded; the same overlap
(tile_step_size 0.5, Gaussian-weighted as segnet's windows), no mirroring, the same torch
threads, on the CPU:

- nnU-Net: network alone: predict_logits_from_preprocessed_data, the call its predictor makes
  on each case (the sliding-window forward passes), its preprocessing done beforehand: nnU-Net's
  floor;
- nnU-Net: predict_from_files: its predictor end to end on the files, with 2 preprocessing and
  2 export processes (its pipelined path on 2 cores, as segnet's num_workers=2).

Prints a line saying what each group of rows compares, then a Markdown table of seconds per
case and each path's ratio to its own group's floor.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import nibabel as nib
import numpy as np
import torch
from peer_nnunet import point_nnunet_at, require_nnunet  # scripts/: Python puts this script's folder first on its path

if TYPE_CHECKING:  # nnunetv2 is the optional peer extra, imported only with --nnunet
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    from segnet.inference.trained_model import TrainedModel

# MONAI, Hydra and segnet's model and inference (and bench_data, which imports them) are imported
# where they are used: nnU-Net's predictor spawns its workers, and each imports this script anew;
# imported here, they would add seconds to every worker's start that nnU-Net's own
# nnUNetv2_predict does not pay.

SIZES = {"full": ((192, 224, 192), 128), "quick": ((48, 48, 48), 32)}
CLASSES = ["background", "a", "b", "c"]
OVERLAP = 0.5  # of a window by the next; nnU-Net's tile_step_size is the rest
WORKERS = 2  # segnet's pipelined loader workers; nnU-Net's preprocessing and export processes each
NNUNET = "3d_fullres"


def default_model() -> dict:
    """edge_unet's settings, the default network's."""
    from omegaconf import OmegaConf

    from segnet.config import CONF

    return OmegaConf.to_container(OmegaConf.load(CONF / "model" / "edge_unet.yaml"))


def parameter_count(network: torch.nn.Module) -> int:
    return sum(parameter.numel() for parameter in network.parameters())


def write_model(path: Path, window: int) -> Path:
    """A checkpoint of the default 3D network, seeded, planned for 1 mm RAS and z-scored MRI."""
    from segnet.model.network import build_network

    model = default_model()
    model.update(spatial_dims=3, in_channels=1, out_channels=len(CLASSES))
    torch.manual_seed(0)
    net = build_network(model, "python")
    normalization = [{"channel": "MRI", "scheme": "zscore", "nonzero": True}]
    data = {"spatial_dims": 3, "in_channels": 1, "num_classes": len(CLASSES), "class_names": CLASSES,
            "ignore_label": None, "normalization": normalization, "orientation": "RAS", "spacing": [1.0, 1.0, 1.0],
            "crop": "nonzero"}
    inference = {"roi_size": [window] * 3, "sw_batch_size": 2, "overlap": OVERLAP}
    torch.save({"state_dict": {f"net.{k}": v for k, v in net.state_dict().items()},
                "hyper_parameters": {"model": model, "data": data, "inference": inference}}, path)
    return path


def write_onnx(checkpoint: Path) -> Path:
    """The checkpoint's network as segnet-export format=onnx writes it, beside the checkpoint."""
    from segnet.export.onnx_export import export_onnx
    from segnet.inference.loading import load_for_inference

    output = checkpoint.with_suffix(".onnx")
    export_onnx(load_for_inference(checkpoint, "cpu", "python"), output)
    return output


def network_seconds(model: TrainedModel, images: list[Path]) -> float:
    """The sliding-window forward passes alone, over every case, its loading done beforehand."""
    from segnet.data.dataset_json import Case
    from segnet.inference.ensemble import Predictor
    from segnet.inference.prediction_writer import PredictionWriter

    writer = PredictionWriter(Predictor([model]), Path(tempfile.mkdtemp()))
    loaded = [writer.load(Case(path.name, (str(path),), None)) for path in images]
    warm_up(model.net, model.inference["roi_size"])
    start = time.perf_counter()
    for item in loaded:
        writer.infer(item)
    return time.perf_counter() - start


def warm_up(network: Callable[[torch.Tensor], torch.Tensor], window: list[int]) -> None:
    """One untimed forward pass of a window, so that neither floor pays the first call's set-up."""
    with torch.no_grad():
        network(torch.zeros(1, 1, *window))


def predict_seconds(model: str, images: Path, output: Path, workers: int) -> float:
    """segnet-predict's work on the folder, as its command composes it; model: its override,
    ckpt_path=CKPT or exported=PATH.onnx (what model=PATH.onnx on its command line becomes)."""
    from hydra import compose, initialize_config_dir

    from segnet.config import CONF
    from segnet.inference.predict import predict_command

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="predict", overrides=[model, f"input={images}",
                                                        f"output={output}", "tta=false", f"num_workers={workers}",
                                                        "device=cpu"])
    start = time.perf_counter()
    predict_command(cfg)
    return time.perf_counter() - start


def segnet_times(checkpoint: Path, folder: Path, images: list[Path], work: Path) -> dict[str, float]:
    """Seconds of each of segnet's paths over the cases (the images, in folder), the floor first."""
    from segnet.inference.loading import load_for_inference

    timed = {"network alone (the floor)": network_seconds(load_for_inference(checkpoint, "cpu", "auto"), images)}
    for workers in (0, WORKERS):
        name = "sequential (num_workers=0)" if workers == 0 else f"pipelined (num_workers={workers})"
        timed[name] = predict_seconds(f"ckpt_path={checkpoint}", folder, work / f"out{workers}", workers)
    return timed


def onnx_times(onnx: Path, folder: Path, images: list[Path], work: Path) -> dict[str, float]:
    """Seconds of segnet's paths with the ONNX file over the cases, ONNX Runtime's floor first."""
    from segnet.inference.exported import load_exported

    model = load_exported(onnx, torch.device("cpu"))
    return {"ONNX Runtime: network alone (its floor)": network_seconds(model, images),
            f"ONNX Runtime: pipelined (num_workers={WORKERS})": predict_seconds(f"exported={onnx}", folder,
                                                                              work / "out_onnx", WORKERS)}


def with_background(pool: Path, names: list[str], share: float) -> Path:
    """A folder of the pool's images, each centred in a field of view of zeros (air) large enough
    that `share` of its voxels are zero (the generated heads, ellipsoids in their box, already leave
    62 %); made once per share."""
    from segnet.generated.phantom import affine_for

    folder = pool / f"background{round(share * 100)}"
    folder.mkdir(exist_ok=True)
    for name in names:
        path = folder / f"{name}.nii.gz"
        if path.is_file():
            continue
        head = np.asarray(nib.load(pool / "imagesTr" / f"{name}.nii.gz").dataobj)
        scale = (np.count_nonzero(head) / (1 - share) / head.size) ** (1 / 3)
        if scale < 1:
            raise SystemExit(f"--background {share}: the generated cases are already {background_share(head):.0%} "
                             "background; give a larger share")
        field = [math.ceil(side * scale) for side in head.shape]
        image = np.pad(head, [((f - s) // 2, f - s - (f - s) // 2) for f, s in zip(field, head.shape, strict=True)])
        nib.save(nib.Nifti1Image(image, affine_for((1.0, 1.0, 1.0), "RAS", image.shape)), path)
    return folder


def nnunet_dataset() -> dict:
    """nnU-Net's dataset.json for the cases: one channel, the model's classes."""
    return {"channel_names": {"0": "MRI"}, "labels": {name: value for value, name in enumerate(CLASSES)},
            "file_ending": ".nii.gz"}


def nnunet_architecture() -> dict:
    """A plan's architecture entry for a PlainConvUNet of edge_unet's levels and features, in the
    form nnU-Net's planner writes it. Two convolutions per encoder stage, as its planner gives; one
    per decoder stage (its planner gives two), nearer edge_unet's one residual unit per level."""
    model = default_model()
    stages = len(model["channels"])
    return {"network_class_name": "dynamic_network_architectures.architectures.unet.PlainConvUNet",
            "arch_kwargs": {"n_stages": stages, "features_per_stage": list(model["channels"]),
                            "conv_op": "torch.nn.modules.conv.Conv3d", "kernel_sizes": [3] * stages,
                            "strides": [1, *model["strides"]], "n_conv_per_stage": [2] * stages,
                            "n_conv_per_stage_decoder": [1] * (stages - 1), "conv_bias": True,
                            "norm_op": "torch.nn.modules.instancenorm.InstanceNorm3d",
                            "norm_op_kwargs": {"eps": 1e-05, "affine": True}, "dropout_op": None,
                            "dropout_op_kwargs": None, "nonlin": "torch.nn.LeakyReLU",
                            "nonlin_kwargs": {"inplace": True}},
            "_kw_requires_import": ["conv_op", "norm_op", "dropout_op", "nonlin"]}


def nnunet_plans(window: int, dataset: dict, example: Path) -> dict:
    """nnU-Net's plans with one 3d_fullres configuration planned as segnet's checkpoint is: the
    window as its patch, 1 mm, z-scored within the nonzero mask (segnet's zscore, nonzero); the
    resampling functions of its default planner and the reader it picks for these files."""
    from nnunetv2.experiment_planning.experiment_planners.default_experiment_planner import ExperimentPlanner
    from nnunetv2.imageio.reader_writer_registry import determine_reader_writer_from_dataset_json

    planner = ExperimentPlanner.__new__(ExperimentPlanner)  # its __init__ reads a dataset; these methods read nothing
    data, data_kwargs, seg, seg_kwargs = planner.determine_resampling()
    probabilities, probabilities_kwargs = planner.determine_segmentation_softmax_export_fn()
    configuration = {"preprocessor_name": "DefaultPreprocessor", "patch_size": [window] * 3, "spacing": [1.0, 1.0, 1.0],
                     "normalization_schemes": ["ZScoreNormalization"], "use_mask_for_norm": [True],
                     "resampling_fn_data": data.__name__, "resampling_fn_data_kwargs": data_kwargs,
                     "resampling_fn_seg": seg.__name__, "resampling_fn_seg_kwargs": seg_kwargs,
                     "resampling_fn_probabilities": probabilities.__name__,
                     "resampling_fn_probabilities_kwargs": probabilities_kwargs,
                     "architecture": nnunet_architecture()}
    reader = determine_reader_writer_from_dataset_json(dataset, str(example), verbose=False)
    return {"dataset_name": "Dataset999_BenchPredict", "plans_name": "nnUNetPlans",
            "image_reader_writer": reader.__name__, "transpose_forward": [0, 1, 2], "transpose_backward": [0, 1, 2],
            "label_manager": "LabelManager",
            "foreground_intensity_properties_per_channel": {"0": {}},  # what ZScoreNormalization does not read
            "configurations": {NNUNET: configuration}}


def nnunet_predictor(window: int, example: Path) -> nnUNetPredictor:
    """nnU-Net's predictor of a seeded network, as manual_initialization leaves it (its trainer's
    way to predict without a results folder): the network built by its trainer from the plan."""
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor
    from nnunetv2.training.nnUNetTrainer.nnUNetTrainer import nnUNetTrainer
    from nnunetv2.utilities.plans_handling.plans_handler import PlansManager

    dataset = nnunet_dataset()
    plans = PlansManager(nnunet_plans(window, dataset, example))
    configuration = plans.get_configuration(NNUNET)
    torch.manual_seed(0)
    network = nnUNetTrainer.build_network_architecture(plans, configuration, len(dataset["channel_names"]),
                                                       plans.get_label_manager(dataset).num_segmentation_heads,
                                                       enable_deep_supervision=False)
    predictor = nnUNetPredictor(tile_step_size=1 - OVERLAP, use_gaussian=True, use_mirroring=False,
                                perform_everything_on_device=False, device=torch.device("cpu"), allow_tqdm=False)
    predictor.manual_initialization(network, plans, configuration, [network.state_dict()], dataset,
                                    nnUNetTrainer.__name__, None)
    return predictor


def nnunet_network_seconds(predictor: nnUNetPredictor, images: list[Path]) -> float:
    """nnU-Net's floor: predict_logits_from_preprocessed_data on every case, as its predictor calls
    it, the cases preprocessed beforehand by its preprocessor (read, cropped to the nonzero box,
    normalized, resampled)."""
    preprocessor = predictor.configuration_manager.preprocessor_class(verbose=False)
    preprocessed = [torch.from_numpy(preprocessor.run_case([str(path)], None, predictor.plans_manager,
                                                           predictor.configuration_manager, predictor.dataset_json)[0])
                    for path in images]
    warm_up(predictor.network, predictor.configuration_manager.patch_size)
    start = time.perf_counter()
    for data in preprocessed:
        predictor.predict_logits_from_preprocessed_data(data)
    return time.perf_counter() - start


def nnunet_predict_seconds(predictor: nnUNetPredictor, images: list[Path], output: Path) -> float:
    """predict_from_files on the image files, each written to output under its case's name."""
    ending = predictor.dataset_json["file_ending"]
    start = time.perf_counter()
    predictor.predict_from_files([[str(path)] for path in images],
                                 [str(output / path.name.removesuffix(ending)) for path in images],
                                 num_processes_preprocessing=WORKERS, num_processes_segmentation_export=WORKERS)
    return time.perf_counter() - start


def nnunet_times(predictor: nnUNetPredictor, images: list[Path], work: Path) -> dict[str, float]:
    """Seconds of nnU-Net's paths over the cases, its floor first."""
    return {"nnU-Net: network alone (its floor)": nnunet_network_seconds(predictor, images),
            "nnU-Net: predict_from_files": nnunet_predict_seconds(predictor, images, work / "out_nnunet")}


def point_nnunet_here(work: Path) -> None:
    """nnU-Net's folders (peer_nnunet's, unused here but looked for when nnunetv2 is imported) and
    the same torch threads as segnet's: predict_logits_from_preprocessed_data runs on at most
    nnUNet_def_n_proc threads, read when nnunetv2 is first imported."""
    os.environ["nnUNet_def_n_proc"] = str(torch.get_num_threads())
    point_nnunet_at(work / "nnunet")


def background_share(image: np.ndarray) -> float:
    return 1 - np.count_nonzero(image) / image.size


def table_rows(timed: dict[str, float], cases: int) -> list[str]:
    """A tool's rows: seconds per case, and each path's ratio to the first, the tool's floor."""
    floor = next(iter(timed.values()))
    return [f"| {name} | {seconds / cases:.2f} | {seconds / floor:.2f}x |" for name, seconds in timed.items()]


def compared(checkpoint: Path, predictor: nnUNetPredictor | None, onnx: bool, window: int) -> str:
    """What each group of rows compares."""
    from segnet.inference.loading import load_for_inference

    segnet = parameter_count(load_for_inference(checkpoint, "cpu", "auto").net)
    groups = [f"segnet's edge_unet ({segnet:,} parameters) in torch, cropped to the non-zero box, alone and in "
              f"segnet-predict ckpt_path=, with num_workers=0 and {WORKERS}"]
    if onnx:
        groups.append(f"the same network exported to ONNX, alone in ONNX Runtime and in segnet-predict model=PATH.onnx "
                      f"with num_workers={WORKERS}")
    if predictor is not None:
        groups.append(f"nnU-Net's PlainConvUNet ({parameter_count(predictor.network):,} parameters), cropped to the "
                      f"non-zero box, alone and in predict_from_files with {WORKERS} preprocessing and {WORKERS} "
                      f"export processes (tile_step_size {predictor.tile_step_size})")
    return (f"Compared, each group against its own floor: {'; '.join(groups)}. Windows {window}^3 at overlap "
            f"{OVERLAP}, Gaussian-weighted; mirroring off.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=6)
    parser.add_argument("--quick", action="store_true", help="48^3 cases, 32^3 windows (seconds)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "segnet-bench-predict")
    parser.add_argument("--background", type=float, default=0.0,
                        help="the share of each case's voxels that are air around the head, 0 to below 1")
    parser.add_argument("--onnx", action="store_true", help="also the network exported to ONNX (the onnx extra)")
    parser.add_argument("--nnunet", action="store_true", help="also nnU-Net v2's predictor (the peer extra)")
    args = parser.parse_args(argv)
    if not 0 <= args.background < 1:
        parser.error(f"--background {args.background}: give the air's share of a case, from 0 up to below 1")
    if args.nnunet:
        require_nnunet()
    from bench_data import ensure_cases

    from segnet.config import register_resolvers

    register_resolvers()
    shape, window = SIZES["quick" if args.quick else "full"]
    pool = args.work / "x".join(map(str, shape))
    names = ensure_cases(pool, shape, args.cases)
    folder = with_background(pool, names, args.background) if args.background else pool / "imagesTr"
    images = [folder / f"{name}.nii.gz" for name in names]
    checkpoint = write_model(args.work / "model.ckpt", window)
    table = table_rows(segnet_times(checkpoint, folder, images, args.work), args.cases)
    if args.onnx:
        table += table_rows(onnx_times(write_onnx(checkpoint), folder, images, args.work), args.cases)
    predictor = None
    if args.nnunet:
        point_nnunet_here(args.work)
        with contextlib.redirect_stdout(sys.stderr):  # nnU-Net's progress lines; stdout is the table's
            predictor = nnunet_predictor(window, images[0])
            table += table_rows(nnunet_times(predictor, images, args.work), args.cases)
    first = np.asarray(nib.load(images[0]).dataobj)
    print(f"{args.cases} cases of {' x '.join(map(str, shape))} in a field of {' x '.join(map(str, first.shape))} "
          f"({background_share(first):.0%} of the first background), windows {window}^3, "
          f"torch threads {torch.get_num_threads()}, CPU\n")
    print(compared(checkpoint, predictor, args.onnx, window) + "\n")
    print("| path | s per case | vs its floor |\n|---|---|---|")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
