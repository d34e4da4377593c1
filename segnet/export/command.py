"""segnet-export ckpt_path=CKPT [format=aoti|exported_program] [device=cpu|cuda] [output=model.pt2]:
a trained network as a torch.export program or an AOTInductor package with model.json beside it,
then run once on its own (torch and the op library alone) to prove it deploys."""

from segnet.commands import hydra_command

main = hydra_command("export", "segnet.export.api:export")

if __name__ == "__main__":
    main()
