"""Fingerprint a dataset and plan its training, or check its integrity, like nnU-Net's
nnUNetv2_plan_and_preprocess and its --verify_dataset_integrity.

    python scripts/plan.py data.root=DATASET [output=plans.json] [data.memory_budget_gb=8]
    python scripts/plan.py --verify data.root=DATASET

train.py plans by itself when no plan is given; this writes one to read, edit or share, and
train.py takes it back with data.plan=PATH. --verify lists every broken case and exits non-zero.
"""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from segnet.config import register_resolvers  # noqa: E402
from segnet.errors import user_errors_as_one_line  # noqa: E402
from segnet.plan_run import plan_command  # noqa: E402

register_resolvers()


@hydra.main(version_base="1.3", config_path="../conf", config_name="plan")
def main(cfg: DictConfig) -> None:
    with user_errors_as_one_line():
        plan_command(cfg)


if __name__ == "__main__":
    if "--verify" in sys.argv:  # a flag, as nnU-Net spells it; Hydra takes key=value
        sys.argv = [a for a in sys.argv if a != "--verify"] + ["verify=true"]
    main()
