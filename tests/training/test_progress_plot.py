"""progress.png's loss axis names the loss the run trains (its terms of nonzero weight), as the
run's configuration wires it into the callback."""

from __future__ import annotations

from hydra.utils import instantiate

from helpers.training import compose_config


def test_the_loss_axis_names_the_terms_that_train(tmp_path):
    cfg = compose_config(["loss=edge", "loss.edge.weight=0.5"], output_dir=tmp_path)
    plot = instantiate(cfg.callbacks.progress_plot)
    plot.loss, plot.lr = [(0, 1.2), (1, 0.9)], [(0, 0.01), (1, 0.009)]
    plot.dice = {"class1": [(1, 0.4)]}
    top = plot.figure().axes[0]
    assert top.get_ylabel() == "train loss (dice_ce + 0.5 edge)"
    default = instantiate(compose_config([], output_dir=tmp_path).callbacks.progress_plot)
    assert default.loss_name == "dice_ce"
