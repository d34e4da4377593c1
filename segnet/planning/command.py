"""segnet-plan data.root=DATASET [output=plans.json] [data.memory_budget_gb=8], and
segnet-plan --verify data.root=DATASET: a dataset's fingerprint and plan, or its integrity check
alone, like nnUNetv2_plan_and_preprocess and its --verify_dataset_integrity.

Training plans by itself when no plan is given; this writes one to read, edit or share, and
training takes it back with data.plan=PATH. --verify lists every broken case and exits non-zero.
"""

from segnet.commands import hydra_command


def _verify_flag(argument: str) -> str:
    return "verify=true" if argument == "--verify" else argument  # nnU-Net's flag; Hydra takes key=value


main = hydra_command("plan", "segnet.planning.api:plan_command", rewrite=_verify_flag)

if __name__ == "__main__":
    main()
