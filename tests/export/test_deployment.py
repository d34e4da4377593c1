"""Deployment: a wheel with the compiled op that runs without a compiler and predicts from an
install, and exported networks (torch.export, AOTInductor) that run without the training code
and predict what the checkpoint predicts."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch

from helpers import ROOT
from helpers.commands import run_command
from ops import library, standalone
from segnet.data.dataset_json import Case
from segnet.export.exporter import export_network
from segnet.inference.ensemble import Predictor
from segnet.inference.loading import load_checkpoint
from segnet.inference.prediction_writer import PredictionWriter


def venv_seeing_this_interpreters_packages(venv: Path) -> Path:
    """A new venv that imports torch and the other dependencies from this interpreter's
    site-packages, whatever this interpreter is (a venv, a conda env, a system Python): `venv
    --system-site-packages` would see only the base interpreter's. The folders are listed in a .pth
    file, so they come after the venv's own site-packages (the wheel's package wins) and their own
    .pth files, an editable install of the checkout among them, are not run."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    own = next(venv.glob("lib/python*/site-packages"))
    outer = [p for p in (*site.getsitepackages(), site.getusersitepackages()) if Path(p).is_dir()]
    (own / "outer_site_packages.pth").write_text("".join(f"{p}\n" for p in outer))
    return venv


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory):
    """The checkout's wheel (with the compiled op), installed in a new venv, and the environment
    to run it in: no compiler, no ninja, an empty op cache. Built once for the tests below, from a
    copy of the tracked files: its libraries are the test run's own builds (tests/conftest.py's
    op cache; the CUDA one for the default architectures, which tests/ops/test_cuda_build.py
    checks), found there by their sources' content and packaged, not compiled again."""
    folder = tmp_path_factory.mktemp("wheel")
    source = folder / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-build-isolation", "--no-deps", "-q",
                    "-w", str(folder / "dist")], check=True, timeout=1200, capture_output=True)
    (wheel,) = (folder / "dist").glob("segnet-*.whl")
    assert not wheel.name.endswith("-none-any.whl"), wheel.name  # compiled code: a platform wheel
    venv = venv_seeing_this_interpreters_packages(folder / "venv")
    subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True,
                   timeout=300, capture_output=True)
    empty_cache = folder / "cache"
    bare = {"HOME": str(folder), "PATH": str(venv / "bin"), "CXX": "/no/compiler",
            "SEGNET_OPS_CACHE": str(empty_cache)}
    assert shutil.which("c++", path=bare["PATH"]) is None and shutil.which("ninja", path=bare["PATH"]) is None
    return venv, bare, empty_cache


@pytest.mark.slow
def test_the_wheel_runs_the_op_and_predicts_without_a_compiler(tmp_path, trained_2d, installed_wheel):
    venv, bare, empty_cache = installed_wheel
    check = (
        "import torch, ops; from pathlib import Path; from ops import library; "
        "x = torch.randn(2, 3, 9, 11, dtype=torch.float64); a = torch.randn(3, dtype=torch.float64); "
        "assert torch.allclose(ops.edge_enhance(x, a, backend='cpp'), ops.edge_enhance_reference(x, a)); "
        "assert library.CSRC == Path(ops.__file__).parent / 'csrc'; "  # a JIT build would use the packaged sources
        "print(ops.__file__)"
    )
    ran = subprocess.run([venv / "bin" / "python", "-c", check], env=bare, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip().startswith(str(venv))  # the wheel's package, not the checkout
    assert not empty_cache.exists() or not any(empty_cache.iterdir())  # nothing was built
    info = subprocess.run([venv / "bin" / "python", "-m", "ops.build", "--info"], env=bare, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300).stdout
    assert "cpu: shipped: " in info and "built for torch " + torch.__version__ in info
    recorded = json.loads(next(venv.glob("lib/python*/site-packages/ops/_lib/build_info.json")).read_text())
    assert recorded["torch"] == torch.__version__
    nvcc = Path(library.DEFAULT_CUDA_HOME, "bin", "nvcc")
    if nvcc.exists():
        assert "cuda" in recorded["libraries"] and recorded["cuda_archs"] == (
            os.environ.get("TORCH_CUDA_ARCH_LIST") or library.default_cuda_archs(nvcc))
    assert next(venv.glob("lib/python*/site-packages/ops/csrc/march/window.h")).is_file()  # sources for a JIT build

    # Prediction from an exported model, with the installed package alone (no scripts/, no checkout).
    model = load_checkpoint(trained_2d.checkpoint, backend="cpp")
    export_network(model, tmp_path / "model.pt2", "exported_program")
    image = trained_2d.root / "imagesTr" / "case_000.nii.gz"
    predicted = subprocess.run(
        [venv / "bin" / "segnet-predict", f"model={tmp_path / 'model.pt2'}", f"input={image}",
         f"output={tmp_path / 'labels'}", "device=cpu", f"hydra.run.dir={tmp_path / 'predict'}"],
        env=bare, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    expected = PredictionWriter(Predictor([model], tta=True), tmp_path / "expected").run_case(
        Case("case_000", (str(image),), None))
    written = nib.load(tmp_path / "labels" / "case_000.nii.gz")
    assert np.array_equal(np.asarray(written.dataobj), expected.label_map)


# Run in the wheel's venv: the shipped CUDA library loads (nothing is built) and runs the op on
# the GPU, forward and backward, as the python reference computes it on the CPU.
WHEEL_GPU_CHECK = """
import torch, ops
from pathlib import Path
from ops import library

def relative_error(got, expected):
    return ((got.cpu().double() - expected.double()).abs().max() / expected.abs().max()).item()

assert torch.cuda.is_available(), "the wheel's venv sees no GPU"
where, path, why = library.where_from("cuda")
assert where == "shipped" and path.parent == Path(ops.__file__).parent / "_lib", (where, path, why)
assert library.load("cuda").path == path
for dtype, tolerance in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
    for shape in ((2, 3, 9, 11), (2, 2, 5, 7, 33)):
        x, g = torch.randn(shape, dtype=torch.float64), torch.randn(shape, dtype=torch.float64)
        a = torch.randn(shape[1], dtype=torch.float64)
        xr, ar = x.clone().requires_grad_(), a.clone().requires_grad_()
        yr = ops.edge_enhance_reference(xr, ar)
        expected = (yr.detach(), *torch.autograd.grad(yr, (xr, ar), g))
        xc, ac = x.to("cuda", dtype).requires_grad_(), a.to("cuda", dtype).requires_grad_()
        yc = ops.edge_enhance(xc, ac, backend="cuda")
        got = (yc.detach(), *torch.autograd.grad(yc, (xc, ac), g.to("cuda", dtype)))
        for name, r, e in zip(("y", "grad_x", "grad_alpha"), got, expected):
            assert r.is_cuda and r.dtype == dtype, (name, r.device, r.dtype)
            assert relative_error(r, e) <= tolerance, (name, dtype, shape, relative_error(r, e))
print(path)
"""


@pytest.mark.slow
@pytest.mark.cuda
def test_the_wheel_runs_the_op_on_the_gpu_with_its_shipped_cuda_library(tmp_path, installed_wheel):
    venv, bare, empty_cache = installed_wheel
    recorded = json.loads(next(venv.glob("lib/python*/site-packages/ops/_lib/build_info.json")).read_text())
    if "cuda" not in recorded["libraries"]:
        pytest.skip("the wheel was built without the CUDA library (no nvcc at CUDA_HOME on this machine)")
    passed_on = {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH") if k in os.environ}
    ran = subprocess.run([venv / "bin" / "python", "-c", WHEEL_GPU_CHECK], env={**bare, **passed_on}, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    shipped_cuda = ran.stdout.strip()
    assert shipped_cuda.startswith(str(venv)) and shipped_cuda.endswith(recorded["libraries"]["cuda"])
    assert not empty_cache.exists() or not any(empty_cache.iterdir())  # nothing was built


@pytest.fixture(scope="module")
def aoti_package(trained_2d, tmp_path_factory):
    """segnet-export's package of the shared 2D model (AOTInductor, its default format): compiled
    once, for the two tests below that run it."""
    package = tmp_path_factory.mktemp("export") / "model.pt2"
    done = run_command("segnet-export", f"ckpt_path={trained_2d.checkpoint}", f"output={package}", timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return package


@pytest.mark.slow
@pytest.mark.parametrize("export_format", ["exported_program", "aoti"])
def test_the_export_runs_without_the_training_code_and_equals_eager(trained_2d, tmp_path, export_format, request):
    model = load_checkpoint(trained_2d.checkpoint, backend="cpp")
    if export_format == "aoti":
        package = request.getfixturevalue("aoti_package")
    else:
        package = tmp_path / "model.pt2"
        export_network(model, package, export_format)
    metadata = json.loads(package.with_suffix(".json").read_text())
    assert metadata["format"] == export_format and metadata["device"] == "cpu"
    assert metadata["edge_op_nodes"] == len(model.net.edge_layers()) == 2  # the op is one node per layer
    assert metadata["data"]["class_names"] == ["background", "core", "shell"]
    torch.manual_seed(0)
    rows, columns = stride = model.net.downsampling  # per axis
    declared = metadata["input"]
    assert declared["multiple_of"] == list(stride) and declared["min_side"] == [2 * s for s in stride]  # the padding
    # sizes that are odd multiples of the stride: an export for a coarser multiple would refuse them
    inputs = [torch.randn(2, 1, 3 * rows, 5 * columns), torch.randn(1, 1, 20 * rows, 7 * columns)]
    torch.save(inputs, tmp_path / "inputs.pt")
    # ops/standalone.py fails if the training code (segnet, Hydra, Lightning, MONAI) was imported
    ran = subprocess.run(standalone.command(package, "--inputs", str(tmp_path / "inputs.pt"),
                                            "--outputs", str(tmp_path / "outputs.pt")),
                         capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert set(json.loads(ran.stdout)["seconds"]) == {"import_torch_and_ops", "load_op_library", "load_package",
                                                      "first_call"}
    with torch.no_grad():
        for x, exported in zip(inputs, torch.load(tmp_path / "outputs.pt"), strict=True):
            eager = model.net(x)
            assert exported.shape == eager.shape
            assert (exported - eager).abs().max() <= 1e-5


@pytest.mark.slow
def test_predict_from_the_package_equals_predict_from_the_checkpoint(trained_2d, aoti_package, tmp_path):

    def command(name, *args):
        done = run_command(name, *args, f"hydra.run.dir={tmp_path}/h", timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]

    images = trained_2d.root / "imagesTr"
    command("segnet-predict", f"model={aoti_package}", f"input={images}", f"output={tmp_path / 'exported'}",
            "device=cpu")
    command("segnet-predict", f"ckpt_path={trained_2d.checkpoint}", f"input={images}",
            f"output={tmp_path / 'checkpoint'}", "device=cpu")
    for case in sorted(images.iterdir()):
        a, b = (nib.load(tmp_path / side / case.name) for side in ("exported", "checkpoint"))
        assert np.array_equal(np.asarray(a.dataobj), np.asarray(b.dataobj)) and np.allclose(a.affine, b.affine)


@pytest.mark.parametrize("overrides,message", [
    (["exports=[tflite]"], r"exports=\['tflite'\]: tflite is no export format; use aoti, exported_program, onnx"),
    (["exports=[aoti]", "device=auto"], r"device=auto: name the device the exports will run on"),
])
def test_a_package_s_exports_are_checked_before_anything_is_read(tmp_path, overrides, message):
    from helpers.training import compose_config
    from segnet.errors import ConfigError
    from segnet.export.export_model import export_model_command as export_package

    cfg = compose_config([f"runs=[{tmp_path / 'no-run'}]", f"output={tmp_path / 'model.zip'}", *overrides],
                         name="export_model")
    with pytest.raises(ConfigError, match=message):
        export_package(cfg)
    assert not (tmp_path / "model.zip").exists()
