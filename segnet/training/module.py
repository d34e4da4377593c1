"""The LightningModule: the loss of conf/loss/ (segnet.model.loss_terms: Dice + cross-entropy, deeply
supervised or not, and the terms added to it),
the optimizer and schedule of conf/optim/ (segnet.training.optimizers), per-class validation Dice (segnet.metrics),
whole-image validation inference (segnet.inference.windows), TensorBoard images.

Validation scores every case's Dice per class (per region, for region-based labels: the regions'
sigmoids turned into a label map as prediction writes it, segnet.data.regions); a validation run
by itself (trainer.validate, the final one of every training) also its HD95 and normalized
surface Dice in mm (segnet.metrics.surface_scores, as evaluation computes them) and, for
data.topology_classes, clDice and the Betti errors (segnet.topology_metrics). The periodic
validations during fit skip those: they need only Dice to pick the best checkpoint, and distance
transforms of every case would cost more than the prediction.
validation_step returns the batch's predicted labels, for callbacks that score them further
(segnet.training.postprocessing_trials).

Everything needed to rebuild the model is in its hyperparameters, so a checkpoint alone is
enough to evaluate it (segnet-evaluate).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.trainer.states import TrainerFn
from monai.data import MetaTensor

import ops
from segnet.checkpoints.settings import RunSettings
from segnet.data.cascade_input import network_input
from segnet.data.device_augmentation import BatchAugmentation
from segnet.data.regions import Regions, foreground_units
from segnet.data.samples import MAP_INTERPOLATION, MOVED_WITH_LABEL
from segnet.inference.windows import plain, predict_whole_image
from segnet.metrics import dice_per_class, drop_ignored, mean_per_class, nanmean, surface_scores
from segnet.model.loss_terms import TrainingLoss
from segnet.model.network import build_network
from segnet.topology_metrics import topology_classes, topology_scores
from segnet.training.optimizers import optimizer_and_schedule
from segnet.training.visualize import validation_panel

CaseScores = dict[str, list[float]]  # what was scored ("Dice", "HD95", "NSD", ...) -> one value per class


def gather_from_ranks(scores: dict[str, CaseScores]) -> dict[str, CaseScores]:
    """The union of every process's {case: scores}; a case seen by several ranks counts once."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return scores
    everyone: list[dict[str, CaseScores] | None] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(everyone, scores)
    return {name: value for part in everyone for name, value in sorted(part.items())}


def case_spacing(batch: dict[str, Any], index: int, spatial_dims: int) -> list[float]:
    """The voxel spacing (mm) of the batch's index-th case: the "spacing" its dataset gives (the
    preprocessed cache's grid), else its MetaTensor's (images loaded by MONAI), else 1 mm (generated data)."""
    if "spacing" in batch:
        return [float(s) for s in batch["spacing"][index]]
    image = batch["image"]
    if isinstance(image, MetaTensor):
        spacing = image.pixdim[index] if image.is_batch else image.pixdim
        return [float(s) for s in spacing][:spatial_dims]
    return [1.0] * spatial_dims


class SegmentationModule(L.LightningModule):
    def __init__(
        self,
        model: dict[str, Any],
        data: dict[str, Any],
        optim: dict[str, Any],
        inference: dict[str, Any],
        loss: dict[str, Any],
        backend: str = "auto",
        compile: bool = False,
        precision: str = "32-true",  # the trainer's: evaluation runs under the same autocast
    ):
        super().__init__()
        self.save_hyperparameters()
        self.net = build_network(model, backend)
        if compile:
            # In place: parameter names, and so checkpoints, stay as without it.
            self.net.compile(options=ops.INDUCTOR_OPTIONS if backend == "python" else None)
        self.ignore_label: int | None = data.get("ignore_label")
        self.regions = Regions.from_settings(data.get("regions"))
        self.loss = TrainingLoss(loss, len(data["class_names"]), self.ignore_label,
                                 1 + len(self.net.supervision_heads), backend, self.regions)
        self.settings = RunSettings.from_data(data)  # what the checkpoint's readers read back
        dims = self.settings.spatial_dims
        # data.augment_on=device: the workers only crop (with a margin), the batch is augmented here
        no_affine = {} if data.get("affine_augmentation", True) else {"affine": 0.0}  # data.affine_augmentation=false
        self.augmentation = (BatchAugmentation(dims, list(self.settings.patch_size)[:dims], probs=no_affine)
                             if data.get("augment_on") == "device" else None)
        self.class_names = list(data["class_names"])
        self.units = foreground_units(len(self.class_names), self.regions)  # what each score is of
        self.topology = topology_classes(data.get("topology_classes"), self.class_names)  # thin classes
        self._val_scores: dict[str, CaseScores] = {}  # case name -> its scores, this rank's cases
        self.val_scores_per_case: dict[str, CaseScores] = {}  # every rank's, after a validation

    def per_case(self, metric: str) -> dict[str, list[float]]:
        """The last validation's {case: metric per class} (HD95 and NSD: after a trainer.validate only)."""
        return {case: scores[metric] for case, scores in self.val_scores_per_case.items() if metric in scores}

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.net(image)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if self.augmentation is None or not self.trainer.training:  # validation: whole volumes as they are
            return batch
        # The batch's first draw seeds the device's generator (segnet.data.sampling): its own per
        # rank and step, and the same again after a resume.
        generator = torch.Generator(self.device).manual_seed(int(batch["seed"][0]))
        maps = {name: batch[name] for name in MOVED_WITH_LABEL if name in batch}
        image, label, moved = self.augmentation(batch["image"], batch["label"], generator, maps)
        return {**batch, "image": image, "label": label.long(), **moved}

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        image, dims = batch["image"], batch["image"].dim() - 2
        # a 2D crop of a volume: its plane's spacing, the first two
        spacing = [case_spacing(batch, index, dims)[:dims] for index in range(image.shape[0])]
        maps = {name: batch[name] for name in MAP_INTERPOLATION if name in batch}
        parts = self.loss(self.net(network_input(batch, 1)), batch["label"].float(), self.global_step, spacing, maps)
        self.log("train/loss", parts["loss"], prog_bar=True, batch_size=image.shape[0])
        if len(parts) > 2:  # several terms: each one's own value too
            for name, value in parts.items():
                if name != "loss":
                    self.log(f"train/loss_{name}", value, batch_size=image.shape[0])
        return parts["loss"]

    def predict_logits(self, image: torch.Tensor) -> torch.Tensor:
        return predict_whole_image(self.net, image, self.settings.spatial_dims, self.hparams.inference)

    def label_maps(self, logits: torch.Tensor) -> torch.Tensor:
        """(N, 1, *spatial) label maps of the network's logits: the argmax of the classes, or the
        regions painted in their class order."""
        if self.regions is None:
            return logits.argmax(1, keepdim=True)
        return torch.stack([self.regions.label_map(case.sigmoid())[None] for case in logits])

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        image, labels = plain(batch["image"]), plain(batch["label"])
        prediction = self.label_maps(self.predict_logits(network_input({**batch, "image": image}, 1)))
        surfaces = self.trainer.state.fn == TrainerFn.VALIDATING  # not the validations within fit
        for index, (name, pred, label) in enumerate(zip(batch["name"], prediction, labels, strict=True)):
            pred, label, _ = drop_ignored(pred, label, self.ignore_label)
            scores = {"Dice": dice_per_class(pred, label, self.units)}
            if surfaces:
                spacing = case_spacing(batch, index, label.ndim - 1)
                scores["HD95"], scores["NSD"] = surface_scores(pred[0].cpu(), label[0].cpu(), self.units, spacing)
                scores.update(self._topology_scores(pred[0].cpu().numpy(), label[0].cpu().numpy()))
            self._val_scores[name] = scores
        if batch_idx == 0:
            self._log_panel(image[0], prediction[0], labels[0])
        return prediction

    def _topology_scores(self, prediction, reference) -> CaseScores:
        """clDice and the Betti errors per foreground class: the thin classes' own, NaN for the others."""
        if not self.topology:
            return {}
        found = topology_scores(prediction, reference, [self.units[c - 1] for c in self.topology])
        return {metric: [values[self.topology.index(c)] if c in self.topology else float("nan")
                         for c in range(1, len(self.class_names))] for metric, values in found.items()}

    def on_validation_epoch_end(self) -> None:
        # Every rank's cases, each once (the distributed sampler pads ranks with repeated
        # cases), then one NaN-aware mean: the single-process value on any number of processes.
        self.val_scores_per_case = gather_from_ranks(self._val_scores)  # the last validation's, for metrics.json
        per_class = mean_per_class(list(self.per_case("Dice").values()))
        self._val_scores = {}
        if not per_class:
            return
        for name, value in zip(self.class_names[1:], per_class, strict=True):
            self.log(f"val/dice_{name}", value, sync_dist=True)
        self.log("val/dice_mean", nanmean(per_class), prog_bar=True, sync_dist=True)

    def _log_panel(self, image: torch.Tensor, prediction: torch.Tensor, label: torch.Tensor) -> None:
        boards = [logger for logger in self.loggers if isinstance(logger, TensorBoardLogger)]
        if boards and self.global_rank == 0 and not self.trainer.sanity_checking:
            panel = validation_panel(image, prediction, label)
            for board in boards:
                board.experiment.add_image("val/image_edges_prediction_label", panel, self.global_step)

    def configure_optimizers(self):
        optim = self.hparams.optim
        total = optim.get("schedule_steps") or int(self.trainer.estimated_stepping_batches)
        optimizer, schedule = optimizer_and_schedule(self.parameters(), optim, total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
