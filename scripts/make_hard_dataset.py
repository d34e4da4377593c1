"""Write the hard generated task as a dataset folder: python scripts/make_hard_dataset.py DIR [--cases 40]

Thin tubes and rings at low contrast with partial volume (segnet.data.hard), as a Decathlon folder
(dataset.json, imagesTr, labelsTr) of volumes of independent slices, so that the ablations run on it
as on a real dataset: folds, the plan's patch and batch, RandAffined. Train it in 2D:
  python train.py experiment=ablation_placement data.root=DIR data.spatial_dims=2
"""

from __future__ import annotations

import argparse
from pathlib import Path

from segnet.data.hard import write_hard_dataset


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the dataset folder to write (made if missing)")
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--size", type=int, default=96, help="in-plane voxels per side")
    parser.add_argument("--slices", type=int, default=4, help="independent slices per volume")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    root = write_hard_dataset(args.root, args.cases, args.size, args.slices, args.seed)
    print(f"wrote {args.cases} cases to {root}")


if __name__ == "__main__":
    main()
