"""Export: a trained network as a torch.export program or an AOTInductor package that runs with
torch and the op library alone; segnet-export."""
