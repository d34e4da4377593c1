"""segnet-predict ckpt_path=CKPT input=IMAGES output=FOLDER (or model=PATH.pt2 for an export),
like nnUNetv2_predict; conf/predict.yaml lists the options. `python -m segnet.inference.command`
is the same command."""

from segnet.commands import hydra_command


def _exported_package(argument: str) -> str:
    # model=PATH.pt2 names an exported package; Hydra would take `model` for the config group
    # conf/model/, so it reaches the configuration as `exported`.
    return "exported=" + argument.removeprefix("model=") if argument.startswith("model=") else argument


main = hydra_command("predict", "segnet.inference.api:predict", rewrite=_exported_package)

if __name__ == "__main__":
    main()
