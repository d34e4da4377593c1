"""segnet-postprocess data.root=DATASET 'runs=[RUN_FOLD0,...]': which connected-component rules
raise the cross-validation's mean Dice, like nnU-Net's postprocessing determination; the rules
go into postprocessing.json in every run folder, which segnet-predict and segnet-evaluate apply."""

from segnet.commands import hydra_command

main = hydra_command("postprocess", "segnet.postprocessing.api:postprocess")

if __name__ == "__main__":
    main()
