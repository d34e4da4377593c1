"""The PEP 517 build backend (pyproject.toml): setuptools', plus the compiled op in the wheel.

    pip wheel . --no-build-isolation        # or: python -m build --wheel --no-isolation

compiles the CPU library, and the CUDA library where nvcc is found (for TORCH_CUDA_ARCH_LIST,
by default what the JIT build uses), with torch.utils.cpp_extension (CppExtension,
CUDAExtension: ops-only libraries, no Python module) into ops/_lib/ with a build_info.json of
what they were built against (ops/shipped.py checks it at load). The C++/CUDA sources travel
in the package (ops/csrc/), so any install can still build the op just in time, and so does the
configuration (segnet/conf/), so an install predicts with `segnet-predict`.

The op is compiled against the torch the build runs with, so the build needs that torch: with
pip's default build isolation there is none, and the wheel is pure Python (it JIT-builds, as
SEGNET_BUILD_OPS=0 asks for explicitly). SEGNET_BUILD_CUDA=0 leaves the CUDA library out.
Editable installs (make install) build nothing: a checkout builds just in time.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from setuptools import build_meta
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

PROJECT = Path(__file__).resolve().parent.parent


# Top-level folders a wheel carries inside its packages: the op's sources (for JIT builds), and
# the configuration (so that `segnet-predict` runs from an install).
PACKAGED_FOLDERS = {"csrc": "ops/csrc", "conf": "segnet/conf"}


class _BuildPyWithSources(build_py):
    """Copies PACKAGED_FOLDERS into the packages."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            for folder, inside in PACKAGED_FOLDERS.items():
                shutil.copytree(PROJECT / folder, Path(self.build_lib) / inside, dirs_exist_ok=True)


class _SdistWithSources(sdist):
    """Puts PACKAGED_FOLDERS into the source distribution, whose wheel then packages them."""

    def make_distribution(self) -> None:
        for folder in PACKAGED_FOLDERS:
            self.filelist.extend(str(p.relative_to(PROJECT)) for p in sorted((PROJECT / folder).rglob("*"))
                                 if p.is_file())
        super().make_distribution()


def _wants_ops() -> bool:
    if os.environ.get("SEGNET_BUILD_OPS", "1") == "0":
        return False
    try:
        import torch  # noqa: F401
    except ImportError:
        print("segnet: torch is not importable in this build environment, so the wheel is pure Python and "
              "builds the op just in time; build with --no-build-isolation to ship the compiled op",
              file=sys.stderr)
        return False
    return True


def _ops_arguments() -> dict:
    """ext_modules and cmdclass for the op libraries, and the build record."""
    sys.path.insert(0, str(PROJECT))
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

    from ops import library
    from ops.shipped import BUILD_INFO, build_record

    def sources(names):
        return [f"csrc/{name}" for name in names]  # setuptools wants them relative to the project

    cpu_flags = list(library.cpu_flags())
    # -g0: Python's own CFLAGS ask for debug information, which would make the wheel ten times larger
    extensions = {"cpu": CppExtension("ops._lib.segnet_ops_cpu", sources(library.CPU_SOURCES),
                                      extra_compile_args={"cxx": [*cpu_flags, "-g0"]}, extra_link_args=["-fopenmp"])}
    archs = None
    if os.environ.get("SEGNET_BUILD_CUDA", "1") != "0":
        try:
            library.configure_cuda_environment()
            archs = os.environ["TORCH_CUDA_ARCH_LIST"]
            extensions["cuda"] = CUDAExtension(
                "ops._lib.segnet_ops_cuda", sources(library.CUDA_SOURCES),
                extra_compile_args={"cxx": ["-g0"], "nvcc": list(library.CUDA_FLAGS)},
                include_dirs=library._pip_cuda_includes(),
            )
        except library.OpsBuildError as error:
            print(f"segnet: no CUDA library in this wheel: {error}", file=sys.stderr)

    class BuildOps(BuildExtension):
        def run(self) -> None:
            super().run()
            lib_dir = Path(self.get_ext_fullpath("ops._lib.segnet_ops_cpu")).parent
            names = {kind: Path(self.get_ext_fullpath(ext.name)).name for kind, ext in extensions.items()}
            record = build_record(names, cpu_flags, archs)
            (lib_dir / BUILD_INFO).write_text(json.dumps(record, indent=2) + "\n")

    return {"ext_modules": list(extensions.values()), "cmdclass": {"build_ext": BuildOps}}


class _Backend(build_meta._BuildMetaBackend):
    """setuptools' backend, with the arguments a setup.py would pass (its run_setup is the one
    place setuptools lets a backend supply them)."""

    _building_wheel = False  # editable installs and sdists build no op

    def run_setup(self, setup_script: str = "setup.py") -> None:
        import setuptools

        arguments = {"cmdclass": {"build_py": _BuildPyWithSources, "sdist": _SdistWithSources}}
        if self._building_wheel and _wants_ops():
            ops = _ops_arguments()
            arguments = {"ext_modules": ops["ext_modules"], "cmdclass": {**arguments["cmdclass"], **ops["cmdclass"]}}
        setuptools.setup(**arguments)

    def build_wheel(self, wheel_directory, config_settings=None, metadata_directory=None):
        self._building_wheel = True
        try:
            return super().build_wheel(wheel_directory, config_settings, metadata_directory)
        finally:
            self._building_wheel = False


_BACKEND = _Backend()
get_requires_for_build_wheel = _BACKEND.get_requires_for_build_wheel
get_requires_for_build_sdist = _BACKEND.get_requires_for_build_sdist
get_requires_for_build_editable = _BACKEND.get_requires_for_build_editable
prepare_metadata_for_build_wheel = _BACKEND.prepare_metadata_for_build_wheel
prepare_metadata_for_build_editable = _BACKEND.prepare_metadata_for_build_editable
build_wheel = _BACKEND.build_wheel
build_sdist = _BACKEND.build_sdist
build_editable = _BACKEND.build_editable
