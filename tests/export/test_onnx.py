"""ONNX: segnet-export format=onnx (and a model package's exports=[onnx]) writes standard
operators that ONNX Runtime runs as eager torch computes; segnet-predict model=PATH.onnx predicts
the checkpoint's label maps; segnet.load_model predicts what segnet-predict writes."""

from __future__ import annotations

import json
import zipfile

import nibabel as nib
import numpy as np
import pytest
import torch

from helpers.training import compose_config
from ops import edge_magnitude, edge_magnitude_reference
from segnet.errors import ConfigError
from segnet.export.export_checkpoint import export_command
from segnet.export.export_model import export_model_command
from segnet.inference.loading import load_checkpoint
from segnet.inference.predict import predict_command

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


@pytest.fixture(scope="module")
def onnx_file(trained_3d, tmp_path_factory):
    """segnet-export's ONNX file of the shared 3D model, written once for the tests below."""
    output = tmp_path_factory.mktemp("onnx") / "model.onnx"
    export_command(compose_config([f"ckpt_path={trained_3d.checkpoint}", "format=onnx", f"output={output}"],
                                  name="export"))
    return output


def run_onnx(path, x: torch.Tensor) -> np.ndarray:
    runtime = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return runtime.run(None, {runtime.get_inputs()[0].name: x.numpy()})[0]


def test_the_onnx_export_is_standard_operators_and_runs_as_eager_torch(trained_3d, onnx_file):
    model = onnx.load(str(onnx_file))
    onnx.checker.check_model(model, full_check=True)
    assert {node.domain for node in model.graph.node} <= {"", "ai.onnx"}  # no custom op: ONNX Runtime runs it alone
    assert {"Conv", "Pad", "Sqrt", "Mul", "Add"} <= {node.op_type for node in model.graph.node}  # the edge layers
    metadata = json.loads(onnx_file.with_suffix(".json").read_text())
    assert metadata["format"] == "onnx" and metadata["data"]["class_names"] == ["background", "core", "shell"]
    # eager with the fused op, as the checkpoint predicts; the edge layers must count
    eager = load_checkpoint(trained_3d.checkpoint, backend="cpp").net
    assert any(layer.alpha.abs().max() > 0 for layer in eager.edge_layers())
    stride = eager.downsampling
    assert metadata["input"]["multiple_of"] == list(stride)
    torch.manual_seed(0)
    # dynamic batch and sizes: several multiples of the stride per axis, none of them the traced one
    for batch, blocks in ((1, (2, 3, 4)), (3, (5, 2, 3)), (2, (4, 4, 2))):
        x = torch.randn(batch, 1, *(b * s for b, s in zip(blocks, stride, strict=True)))
        with torch.no_grad():
            expected = eager(x).numpy()
        got = run_onnx(onnx_file, x)
        assert got.shape == expected.shape and np.abs(got - expected).max() <= 1e-4


class Magnitude(torch.nn.Module):
    def forward(self, x):
        return edge_magnitude(x, backend="python")


def test_the_magnitude_form_exports_as_standard_operators(tmp_path):
    x = torch.randn(1, 2, 6, 7, 5)
    torch.onnx.export(Magnitude(), (x,), str(tmp_path / "m.onnx"), dynamo=True, input_names=["x"], verbose=False)
    model = onnx.load(str(tmp_path / "m.onnx"))
    assert {node.domain for node in model.graph.node} <= {"", "ai.onnx"}
    assert np.abs(run_onnx(tmp_path / "m.onnx", x) - edge_magnitude_reference(x).numpy()).max() <= 1e-5


def test_an_onnx_export_is_written_to_an_onnx_file(trained_3d, tmp_path):
    with pytest.raises(ConfigError, match=r"format=onnx writes an ONNX file, not output=.*model.pt2: give output="):
        export_command(compose_config([f"ckpt_path={trained_3d.checkpoint}", "format=onnx",
                                       f"output={tmp_path / 'model.pt2'}"], name="export"))


def predict(tmp_path, name, model, image):
    predict_command(compose_config([model, f"input={image}", f"output={tmp_path / name}", "device=cpu",
                                    "num_workers=0"], name="predict"))
    return np.asarray(nib.load(tmp_path / name / image.name).dataobj)


@pytest.mark.slow
def test_predict_with_onnx_runtime_and_from_python_equals_the_checkpoint(trained_3d, onnx_file, tmp_path):
    import segnet

    image = trained_3d.root / "imagesTr" / "case_001.nii.gz"
    from_checkpoint = predict(tmp_path, "checkpoint", f"ckpt_path={trained_3d.checkpoint}", image)
    assert len(np.unique(from_checkpoint)) == 3
    assert np.array_equal(predict(tmp_path, "onnx", f"exported={onnx_file}", image), from_checkpoint)

    model = segnet.load_model(onnx_file, device="cpu")
    assert model.network is None  # ONNX Runtime runs it: no torch module
    assert np.array_equal(model.predict(image), from_checkpoint)
    from_run = segnet.load_model(trained_3d.checkpoint, device="cpu")
    assert isinstance(from_run.network, torch.nn.Module)
    labels, probabilities = from_run.predict(image, probabilities=True)
    assert np.array_equal(labels, from_checkpoint) and np.array_equal(probabilities.argmax(0), labels)
    # an array with its affine is the file it came from
    scan = nib.load(image)
    assert np.array_equal(from_run.predict(scan.get_fdata(), affine=scan.affine), from_checkpoint)


@pytest.mark.slow
def test_a_model_package_holds_its_networks_as_onnx(trained_3d, onnx_file, tmp_path):
    package = tmp_path / "model.zip"
    manifest = export_model_command(compose_config([f"runs=[{trained_3d.run}]", "checkpoint=last.ckpt",
                                                    "exports=[onnx]", f"output={package}"], name="export_model"))
    assert manifest["exports"]["formats"] == ["onnx"]
    with zipfile.ZipFile(package) as archive:
        (tmp_path / "packed.onnx").write_bytes(archive.read("models/0/exports/onnx.onnx"))
        assert json.loads(archive.read("models/0/exports/onnx.json"))["format"] == "onnx"
    x = torch.randn(1, 1, 8, 12, 8)
    assert np.abs(run_onnx(tmp_path / "packed.onnx", x) - run_onnx(onnx_file, x)).max() <= 1e-6
