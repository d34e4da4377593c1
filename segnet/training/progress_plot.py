"""progress.png in the run folder, like nnU-Net's: training loss, validation Dice per class and
learning rate over optimizer steps, redrawn after every validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from matplotlib.figure import Figure  # drawn without pyplot: no backend chosen for the process
from omegaconf import DictConfig, OmegaConf

from segnet.files import atomic_path
from segnet.model.loss_terms import effective_loss


def loss_label(loss: DictConfig | dict[str, Any]) -> str:
    """The loss a run trains, as the plot's axis names it: its terms of nonzero weight, each with
    its weight where that is not 1, e.g. "dice_ce + 0.5 edge"."""
    settings = OmegaConf.to_container(loss, resolve=True) if OmegaConf.is_config(loss) else loss
    return " + ".join(name if float(term["weight"]) == 1 else f"{float(term['weight']):g} {name}"
                      for name, term in effective_loss(settings).items() if name != "ramp_steps")


class ProgressPlot(L.Callback):
    def __init__(self, path: str, loss: DictConfig | dict[str, Any]):
        self.path = Path(path)
        self.loss_name = loss_label(loss)
        self.loss: list[tuple[int, float]] = []
        self.lr: list[tuple[int, float]] = []
        self.dice: dict[str, list[tuple[int, float]]] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.optimizers:  # the rate this batch trains with, at the step it belongs to
            self.lr.append((trainer.global_step, float(trainer.optimizers[0].param_groups[0]["lr"])))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None and self.lr:
            self.loss.append((self.lr[-1][0], float(loss)))

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        for name in pl_module.class_names[1:]:
            value = trainer.callback_metrics.get(f"val/dice_{name}")
            if value is not None:
                self.dice.setdefault(name, []).append((trainer.global_step, float(value)))
        if trainer.is_global_zero:
            self.draw()

    def figure(self) -> Figure:
        """The picture: loss and validation Dice above, the learning rate below."""
        figure = Figure(figsize=(9, 7))
        top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=(2, 1))
        if self.loss:
            top.plot(*zip(*self.loss, strict=True), color="C0", alpha=0.7, label="train loss")
        top.set_ylabel(f"train loss ({self.loss_name})")
        dice_axis = top.twinx()
        for i, (name, points) in enumerate(self.dice.items()):
            dice_axis.plot(*zip(*points, strict=True), marker="o", color=f"C{i + 1}", label=f"val Dice {name}")
        dice_axis.set_ylabel("validation Dice")
        dice_axis.set_ylim(0, 1)
        lines = top.get_legend_handles_labels()[0] + dice_axis.get_legend_handles_labels()[0]
        top.legend(lines, [line.get_label() for line in lines], loc="center right")
        if self.lr:
            bottom.plot(*zip(*self.lr, strict=True), color="C7")
        bottom.set_ylabel("learning rate")
        bottom.set_xlabel("optimizer step")
        for axis in (top, bottom):
            axis.grid(True, alpha=0.3)
        figure.tight_layout()
        return figure

    def draw(self) -> None:
        figure = self.figure()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.path) as temporary:
            figure.savefig(temporary, dpi=100, format="png")

    def state_dict(self) -> dict[str, Any]:  # a resumed run continues the curves
        return {"loss": self.loss, "lr": self.lr, "dice": self.dice}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.loss = [tuple(p) for p in state_dict["loss"]]
        self.lr = [tuple(p) for p in state_dict["lr"]]
        self.dice = {name: [tuple(p) for p in points] for name, points in state_dict["dice"].items()}
