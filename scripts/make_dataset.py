"""Write a generated dataset folder: python scripts/make_dataset.py KIND DIR [--cases N] [--seed S]

Seven kinds, each a dataset folder (dataset.json, imagesTr, labelsTr) that trains and plans as a
real dataset does (folds, the plan's patch and batch, RandAffined); nothing is downloaded:
- hard: thin tubes and rings at low contrast with partial volume (segnet.generated.hard), volumes of
  independent 96 x 96 slices: train it in 2D (data.spatial_dims=2);
- anisotropic: a 3D core-and-shell phantom among distractors (segnet.generated.phantom) on thick-slice
  grids (0.7-0.9 mm in plane, 2-3 mm slices, RAS or LPS storage): train it in 3D;
- brain: T1-like heads, grey and white matter with a folded cortex and partial volume
  (segnet.generated.brain), 1 x 1 x 4 mm: train it in 2D;
- scanners: the brain heads, each case from its own scanner (intensity scale, tissue contrast as a
  gamma, bias field strength, noise level), as a multi-site MRI dataset's: train it in 2D;
- heads: the brain heads as an archive holds them (segnet.generated.heads): fields of view from
  cutting into the scalp to 98 % air, noise backgrounds, some zero-filled borders, a scanner per
  case, and a splits_final.json whose folds each hold out a band of the head's height (fold 0 the
  brain's top, scanned with wide fields only): train it in 2D;
- tumour: four-channel MRI heads (T1, T1ce, T2, FLAIR) with BraTS's nested region-based labels
  (segnet.generated.tumour), as an nnU-Net v2 folder: train it in 2D or 3D;
- fundus: RGB photographs of thin vessels on a textured background (segnet.generated.fundus), as
  nnU-Net v2's natural-image layout (one RGB PNG per case, 8-bit PNG labels): train it in 2D.
The first five are Decathlon folders of NIfTI volumes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from segnet.generated.brain import write_brain_dataset
from segnet.generated.fundus import write_fundus_dataset
from segnet.generated.hard import write_hard_dataset
from segnet.generated.heads import write_heads_dataset
from segnet.generated.phantom import anisotropic_grids, write_phantom_dataset
from segnet.generated.tumour import write_tumour_dataset

WRITERS = {
    "hard": lambda root, cases, args: write_hard_dataset(root, cases, args.size, args.slices, args.seed),
    "anisotropic": lambda root, cases, args: write_phantom_dataset(root, anisotropic_grids(cases, args.seed),
                                                                   100 * args.seed),
    "brain": lambda root, cases, args: write_brain_dataset(root, cases, args.seed),
    "scanners": lambda root, cases, args: write_brain_dataset(root, cases, args.seed, scanner_variation=True),
    "heads": lambda root, cases, args: write_heads_dataset(root, cases, args.seed),
    "tumour": lambda root, cases, args: write_tumour_dataset(root, cases, args.size // 2, args.seed),
    "fundus": lambda root, cases, args: write_fundus_dataset(root, cases, args.size, args.seed),
}
DEFAULT_CASES = {"hard": 40, "anisotropic": 25, "brain": 40, "scanners": 40, "heads": 20, "tumour": 30, "fundus": 40}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=sorted(WRITERS))
    parser.add_argument("root", type=Path, help="the dataset folder to write (made if missing)")
    parser.add_argument("--cases", type=int, default=None,
                        help="default: 20 (heads), 25 (anisotropic), 30 (tumour), else 40")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, default=96,
                        help="hard, fundus: in-plane pixels per side; tumour: twice its heads' side")
    parser.add_argument("--slices", type=int, default=4, help="hard: independent slices per volume")
    args = parser.parse_args(argv)
    cases = args.cases or DEFAULT_CASES[args.kind]
    if cases < 1:
        parser.error("--cases must be positive")
    root = WRITERS[args.kind](args.root, cases, args)
    print(f"wrote {cases} {args.kind} cases to {root}")


if __name__ == "__main__":
    main()
