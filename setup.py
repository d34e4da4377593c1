"""segnet's build: setuptools, with the op's libraries compiled by the same loader that builds
them just in time (ops/library.py), so the wheel ships exactly the libraries the test suite ran.

    pip wheel . --no-build-isolation        # or: make wheel

builds the CPU library, and the CUDA library where nvcc is found (for TORCH_CUDA_ARCH_LIST, by
default what the JIT build uses), or finds them finished in the op cache (SEGNET_OPS_CACHE,
else ~/.cache/segnet/ops; `python -m ops.build --cuda` fills it), and puts them into ops/_lib/
with a build_info.json of what they were built against (ops/shipped.py checks it at load).
They are ops-only libraries, loaded with torch.ops.load_library: no Python module, so the wheel
is marked as holding compiled code (a platform wheel) without setuptools' extension builder.
The project's metadata is in pyproject.toml.

Every wheel carries the C++/CUDA sources (ops/csrc/), so any install can build the op just in
time, and the configuration (segnet/conf/), so that `segnet-predict` runs from an install.

The op is compiled against the torch the build runs with. With pip's default build isolation
there is none, and the wheel is pure Python (it builds the op just in time, as
SEGNET_BUILD_OPS=0 asks for explicitly). SEGNET_BUILD_CUDA=0 leaves the CUDA library out.
Editable installs (make install) build nothing: the op is built for wheels (bdist_wheel) only; a
checkout builds it just in time.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

PROJECT = Path(__file__).resolve().parent

# Top-level folders that a wheel carries inside its packages.
PACKAGED_FOLDERS = {"csrc": "ops/csrc", "conf": "segnet/conf"}


@functools.cache
def builds_ops() -> bool:
    """Whether this build compiles the op: a wheel (not an editable install or an sdist) built
    where torch is importable, unless SEGNET_BUILD_OPS=0."""
    if "bdist_wheel" not in sys.argv or os.environ.get("SEGNET_BUILD_OPS", "1") == "0":
        return False
    try:
        import torch  # noqa: F401
    except ImportError:
        print("segnet: torch is not importable in this build environment, so the wheel is pure Python and "
              "builds the op just in time; build with --no-build-isolation to ship the compiled op",
              file=sys.stderr)
        return False
    return True


def ship_op_libraries(lib_dir: Path) -> None:
    """The CPU (and where it can be built, CUDA) library of this tree's sources, built or found in
    the op cache, copied into lib_dir with the build record."""
    sys.path.insert(0, str(PROJECT))
    from ops import library
    from ops.shipped import BUILD_INFO, build_record

    built = {"cpu": library.build_cpu_library()}
    archs = None
    if os.environ.get("SEGNET_BUILD_CUDA", "1") != "0":
        try:
            built["cuda"] = library.build_cuda_library()
            archs = os.environ["TORCH_CUDA_ARCH_LIST"]  # what configure_cuda_environment chose
        except library.OpsBuildError as error:
            print(f"segnet: no CUDA library in this wheel: {error}", file=sys.stderr)
    lib_dir.mkdir(parents=True, exist_ok=True)
    for lib in built.values():
        shutil.copy2(lib.path, lib_dir / lib.path.name)
    names = {kind: lib.path.name for kind, lib in built.items()}
    record = build_record(names, list(library.cpu_flags()), archs)
    (lib_dir / BUILD_INFO).write_text(json.dumps(record, indent=2) + "\n")


class BuildPyWithFolders(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        for folder, inside in PACKAGED_FOLDERS.items():
            shutil.copytree(PROJECT / folder, Path(self.build_lib) / inside, dirs_exist_ok=True)
        if builds_ops():
            ship_op_libraries(Path(self.build_lib) / "ops" / "_lib")


class SdistWithFolders(sdist):
    """A source distribution holds the folders too, so that its wheel can package them."""

    def make_distribution(self) -> None:
        for folder in PACKAGED_FOLDERS:
            self.filelist.extend(str(p.relative_to(PROJECT)) for p in sorted((PROJECT / folder).rglob("*"))
                                 if p.is_file())
        super().make_distribution()


class OpDistribution(Distribution):
    """A wheel that ships the compiled op holds code for one platform and one torch: a platform
    wheel, not a pure-Python one."""

    def has_ext_modules(self) -> bool:
        return builds_ops()


setup(distclass=OpDistribution, cmdclass={"build_py": BuildPyWithFolders, "sdist": SdistWithFolders})
