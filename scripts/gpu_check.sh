#!/usr/bin/env bash
# One call on a GPU machine with nothing prepared: build the CUDA op, run the CUDA tests, measure
# every kernel and dtype against a device-to-device copy next to the static model
# (scripts/kernel_bandwidth.py), benchmark the op's backends, train 50 steps with
# op.backend=cuda compile=true, export that model for the GPU and run the package on its own, and
# end with one summary table. Logs go to $OUT (or
# outputs/gpu_check). Python packages the machine lacks (monai, hydra-core, ...) are installed
# from wheels in .whl/ (scripts/fetch_gpu_wheels.sh puts them there); nothing is downloaded.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-outputs/gpu_check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
# One op cache for the build step, the tests (and the wheel they package) and the training: the
# CUDA library compiles once per check.
export SEGNET_OPS_CACHE=${SEGNET_OPS_CACHE:-/tmp/segnet-gpu-check-ops}
summary="$out/summary.md"
printf '| step | result | seconds |\n|---|---|---|\n' >"$summary"

missing=$(python3 -c '
import importlib.util
needed = {"monai": "monai", "hydra": "hydra-core", "omegaconf": "omegaconf", "nibabel": "nibabel",
          "lightning": "lightning", "tensorboard": "tensorboard", "ninja": "ninja"}
print(" ".join(p for m, p in needed.items() if importlib.util.find_spec(m) is None))')
if [ -n "$missing" ]; then
  if compgen -G ".whl/*.whl" >/dev/null; then
    echo "installing from .whl/: $missing"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/segnet-site .whl/*.whl \
      || { echo "error: installing the wheels in .whl/ failed"; exit 2; }
    export PYTHONPATH=/tmp/segnet-site
  else
    echo "error: this machine lacks $missing and .whl/ holds no wheels: run scripts/fetch_gpu_wheels.sh where pip can download, then carry .whl/"
    exit 2
  fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -c 'import torch; assert torch.cuda.is_available(), "no GPU visible"; print(torch.__version__, torch.cuda.get_device_name())' \
  || { echo "error: no visible GPU; this script is for a GPU machine"; exit 2; }

failed=0
step() {  # step NAME COMMAND...: run, log to $out/NAME.log, add a summary row
  local name=$1 start status
  shift
  start=$(date +%s)
  echo "== $name: $*"
  if "$@" >"$out/$name.log" 2>&1; then status=ok; else status=FAILED; failed=1; fi
  tail -n 30 "$out/$name.log"
  printf '| %s | %s | %s |\n' "$name" "$status" "$(( $(date +%s) - start ))" >>"$summary"
}

# The checkout installed as a user's is (editable: it builds nothing), for the commands and the
# package metadata the tests use.
step install python3 -m pip install -q --no-deps --no-build-isolation --no-index -e .
step build python3 -m ops.build --cuda
step cuda-tests python3 -m pytest tests -m cuda -q -p no:cacheprovider
step kernels python3 scripts/kernel_bandwidth.py --device cuda --out "$out"
step bench python3 scripts/bench_op.py --device cuda --out "$out"
step train python3 train.py op.backend=cuda compile=true trainer=gpu trainer.max_steps=50 trainer.max_epochs=-1 \
  trainer.check_val_every_n_epoch=1 "hydra.run.dir=$out/train"
# The trained network as an AOTInductor package for the GPU, run on its own (ops/standalone.py, which segnet-export runs).
step export python3 scripts/export.py "ckpt_path=$out/train/checkpoints/last.ckpt" device=cuda \
  "output=$out/export/model.pt2" "hydra.run.dir=$out/export"

echo
echo "== summary"
cat "$summary"
echo
grep '^|' "$out/kernels.log" || true
[ -f "$out/bench_op.csv" ] && python3 - "$out/bench_op.csv" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["backend"] == "cuda"]
for r in rows:
    print(f"cuda {r['shape']}: forward {float(r['forward_ms']):.3f} ms ({float(r['forward_bandwidth_vs_copy']):.0%} of copy bandwidth), "
          f"backward {float(r['forward_backward_ms']) - float(r['forward_ms']):.3f} ms ({float(r['backward_bandwidth_vs_copy']):.0%})")
PY
[ -f "$out/train/metrics.json" ] && python3 -c "
import json, sys; m = json.load(open(sys.argv[1]))
print(f\"train: backend {m['backend']}, compile {m['compile']}, steps {m['global_step']}, step {m['step_time_ms_median']:.1f} ms, \"
      f\"{m['samples_per_s']:.0f} samples/s, peak {m['peak_memory_mb']:.0f} MB, val Dice {m['val_dice_mean']:.3f}\")" "$out/train/metrics.json"
exit $failed
