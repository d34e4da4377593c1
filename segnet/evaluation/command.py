"""segnet-evaluate ckpt_path=CKPT data.root=DATASET [data.split=validation] [tta=true], nnU-Net
style: summary.json (metric_per_case, mean, foreground_mean), per_case.csv,
predictions/<case>.nii.gz (in each image's own geometry) and, per class, cases_<class>.png (its
worst, median and best case: segnet.evaluation.pictures) in the run folder."""

from segnet.commands import hydra_command

main = hydra_command("evaluate", "segnet.evaluation.api:evaluate")

if __name__ == "__main__":
    main()
