"""segnet-preprocess data.root=DATASET [data.plan=plans.json] [data.spatial_dims=2]: the dataset
planned (or its plan read) and every labelled case written to the preprocessed cache."""

from segnet.commands import hydra_command

main = hydra_command("preprocess", "segnet.preprocessing.api:preprocess_command")

if __name__ == "__main__":
    main()
