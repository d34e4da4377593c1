"""Report of an Optuna search: python scripts/search_report.py SWEEP_DIR

For a sweep of hydra/sweeper=optuna whose study lives in SWEEP_DIR/optuna.db (experiment=search_loss
keeps each study there, in multirun/search_loss/<study>), every trial: its number, state, objective
and parameters, best first. Writes search.md (what it prints) and search.png (each trial's
objective in the order they ran, and the best so far) into SWEEP_DIR. Comparing the best trial
with the defaults per case, paired, is the ablation report's job: train both over the same folds
and seeds as one sweep and run scripts/ablation_report.py on it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

STORAGE = "optuna.db"


def load_study(sweep_dir: Path):
    import optuna

    storage = f"sqlite:///{sweep_dir / STORAGE}"
    summaries = optuna.get_all_study_summaries(storage)
    if len(summaries) != 1:
        names = ", ".join(s.study_name for s in summaries) or "none"
        raise SystemExit(f"error: {sweep_dir / STORAGE} holds {len(summaries)} studies ({names}); one was expected")
    return optuna.load_study(study_name=summaries[0].study_name, storage=storage)


def table(study) -> str:
    finished = [t for t in study.trials if t.value is not None]
    ranked = sorted(finished, key=lambda t: t.value, reverse=study.direction.name == "MAXIMIZE")
    ranked += [t for t in study.trials if t.value is None]
    names = sorted({name for trial in study.trials for name in trial.params})
    lines = [f"| trial | state | objective | {' | '.join(names)} |", "|---|---|---|" + "---|" * len(names)]
    for trial in ranked:
        value = f"{trial.value:.4f}" if trial.value is not None else "-"
        params = [f"{trial.params[name]:.4g}" if isinstance(trial.params.get(name), float)
                  else str(trial.params.get(name, "-")) for name in names]
        lines.append(f"| {trial.number} | {trial.state.name.lower()} | {value} | {' | '.join(params)} |")
    return "\n".join(lines)


def plot(study, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trials = [t for t in study.trials if t.value is not None]
    values = [t.value for t in trials]
    best = max if study.direction.name == "MAXIMIZE" else min
    running = [best(values[: i + 1]) for i in range(len(values))]
    figure, axis = plt.subplots(figsize=(6, 3.4))
    axis.scatter([t.number for t in trials], values, s=16, label="trial")
    axis.step([t.number for t in trials], running, where="post", color="black", label="best so far")
    axis.set_xlabel("trial")
    axis.set_ylabel("objective")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    args = parser.parse_args(argv)
    if not (args.sweep_dir / STORAGE).is_file():
        studies = sorted(path.parent.name for path in args.sweep_dir.glob(f"*/{STORAGE}"))
        if studies:  # multirun/search_loss: experiment=search_loss keeps each study in a folder of its own
            parser.error(f"{args.sweep_dir} holds the searches {', '.join(studies)}; pass one of their folders")
        parser.error(f"{args.sweep_dir} has no {STORAGE}; pass the sweep folder of experiment=search_loss "
                     "(multirun/search_loss/<study>), or one whose hydra.sweeper.storage was "
                     "sqlite:///<sweep folder>/optuna.db")
    study = load_study(args.sweep_dir)
    best = study.best_trial
    text = (f"# Search {study.study_name}: {len(study.trials)} trial(s), {study.direction.name.lower()}\n\n"
            f"Best: trial {best.number}, objective {best.value:.4f}, {best.params}\n\n{table(study)}\n")
    print(text)
    (args.sweep_dir / "search.md").write_text(text)
    plot(study, args.sweep_dir / "search.png")
    print(f"wrote search.md and search.png in {args.sweep_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
