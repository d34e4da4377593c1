"""progress.png in the run folder, like nnU-Net's: training loss, validation Dice per class and
learning rate over optimizer steps, redrawn after every validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L

from segnet.files import atomic_path


class ProgressPlot(L.Callback):
    def __init__(self, path: str):
        self.path = Path(path)
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

    def draw(self) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True, height_ratios=(2, 1))
        if self.loss:
            top.plot(*zip(*self.loss, strict=True), color="C0", alpha=0.7, label="train loss")
        top.set_ylabel("train loss (conf/loss/)")
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
        fig.tight_layout()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.path) as temporary:
            fig.savefig(temporary, dpi=100)
        plt.close(fig)

    def state_dict(self) -> dict[str, Any]:  # a resumed run continues the curves
        return {"loss": self.loss, "lr": self.lr, "dice": self.dice}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.loss = [tuple(p) for p in state_dict["loss"]]
        self.lr = [tuple(p) for p in state_dict["lr"]]
        self.dice = {name: [tuple(p) for p in points] for name, points in state_dict["dice"].items()}
