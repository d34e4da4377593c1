"""Predict label maps for new images with one checkpoint or an ensemble, like nnUNetv2_predict.

    python scripts/predict.py ckpt_path=PATH input=DIR_OR_FILE output=DIR [tta=false] [save_probabilities=true]
    python scripts/predict.py model=PATH.pt2 input=DIR_OR_FILE output=DIR      (scripts/export.py's package)

Writes <output>/<case>.nii.gz (uint8, in each image's own geometry) and, with
save_probabilities=true, <output>/<case>.npz (probabilities, class_names). conf/predict.yaml
lists the options. Where segnet is installed from a wheel, `python -m segnet.predict_run` is the
same command.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from segnet.predict_run import main  # noqa: E402

if __name__ == "__main__":
    main()
