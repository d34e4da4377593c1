"""segnet's build: setuptools with torch's extension builder, as torch extensions are built.

    pip wheel . --no-build-isolation        # or: make wheel

compiles the CPU library, and the CUDA library where nvcc is found (for TORCH_CUDA_ARCH_LIST,
by default what the JIT build uses), into ops/_lib/ with a build_info.json of what they were
built against (ops/shipped.py checks it at load). They are ops-only libraries, loaded with
torch.ops.load_library: no Python module. The project's metadata is in pyproject.toml.

Every wheel carries the C++/CUDA sources (ops/csrc/), so any install can build the op just in
time, and the configuration (segnet/conf/), so that `segnet-predict` runs from an install.

The op is compiled against the torch the build runs with. With pip's default build isolation
there is none, and the wheel is pure Python (it builds the op just in time, as
SEGNET_BUILD_OPS=0 asks for explicitly). SEGNET_BUILD_CUDA=0 leaves the CUDA library out.
Editable installs (make install) build nothing, and neither does `setup.py build_ext`: the op
is built for wheels (bdist_wheel) only; a checkout builds it just in time.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

PROJECT = Path(__file__).resolve().parent

# Top-level folders that a wheel carries inside its packages.
PACKAGED_FOLDERS = {"csrc": "ops/csrc", "conf": "segnet/conf"}


class BuildPyWithFolders(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            for folder, inside in PACKAGED_FOLDERS.items():
                shutil.copytree(PROJECT / folder, Path(self.build_lib) / inside, dirs_exist_ok=True)


class SdistWithFolders(sdist):
    """A source distribution holds the folders too, so that its wheel can package them."""

    def make_distribution(self) -> None:
        for folder in PACKAGED_FOLDERS:
            self.filelist.extend(str(p.relative_to(PROJECT)) for p in sorted((PROJECT / folder).rglob("*"))
                                 if p.is_file())
        super().make_distribution()


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


def op_extensions() -> dict:
    """ext_modules and the build_ext that writes the build record beside the libraries."""
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
                include_dirs=library.pip_cuda_includes(),
            )
        except library.OpsBuildError as error:
            print(f"segnet: no CUDA library in this wheel: {error}", file=sys.stderr)

    class BuildOps(BuildExtension):
        def run(self) -> None:
            super().run()
            lib_dir = Path(self.get_ext_fullpath("ops._lib.segnet_ops_cpu")).parent
            names = {kind: Path(self.get_ext_fullpath(ext.name)).name for kind, ext in extensions.items()}
            (lib_dir / BUILD_INFO).write_text(json.dumps(build_record(names, cpu_flags, archs), indent=2) + "\n")

    return {"ext_modules": list(extensions.values()), "cmdclass": {"build_ext": BuildOps}}


commands = {"build_py": BuildPyWithFolders, "sdist": SdistWithFolders}
ops = op_extensions() if builds_ops() else {"ext_modules": [], "cmdclass": {}}
setup(ext_modules=ops["ext_modules"], cmdclass={**commands, **ops["cmdclass"]})
