"""Building and loading the compiled edge-op libraries.

Two ops-only shared libraries, loaded with ``torch.ops.load_library``: the ones shipped in the
installed wheel when they were built for this torch (ops/shipped.py), otherwise built just in
time with ``torch.utils.cpp_extension.load`` (ninja) into a cache:

- ``segnet_ops_cpu``: the schemas, the CPU kernels and the host emulation of the CUDA kernels;
- ``segnet_ops_cuda``: the CUDA kernels, built with nvcc, loaded after the CPU library (which
  owns the schemas) and only where a GPU is visible.

Each build lives in a folder named by a hash of the C++/CUDA sources' contents, the torch and
Python versions and the flags, so changing any of them rebuilds. The folder is a cache by
content: a finished build (its `built` stamp, written once the library linked) is loaded as it
is, so another checkout or clone of the same sources, or a wheel built from them, does not
compile again. Each build holds an OS-level lock (`build_lock`), so DDP ranks that load at once
build once and the others wait, and a killed builder releases it (a lock file an older torch
left behind is removed) and leaves no stamp, so the next one builds again.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .shipped import shipped_library

# The sources: inside the package in a wheel or sdist install, beside it in a checkout.
_PACKAGED_CSRC = Path(__file__).resolve().parent / "csrc"
CSRC = _PACKAGED_CSRC if _PACKAGED_CSRC.is_dir() else Path(__file__).resolve().parent.parent / "csrc"
CPU_SOURCES = ("schema.cpp", "cpu/edge_enhance.cpp", "cpu/emulation.cpp")
CUDA_SOURCES = ("cuda/edge_enhance.cu",)
# -fopenmp: at::parallel_for is a header template over OpenMP; without it the loops run serially.
# -fno-math-errno: no errno from sqrt, so its loops vectorize.
CPU_FLAGS = ("-O3", "-fopenmp", "-fno-math-errno")
# --threads 0: nvcc compiles the architectures side by side, on every core (one at a time otherwise).
CUDA_FLAGS = ("-O3", "-lineinfo", "--threads", "0")
BASE_CUDA_ARCHS = ("7.5", "8.0", "9.0")  # T4/RTX 20xx (plain loads, no cp.async), A100, H100/H200
# The oldest architecture torch's CUDA 13 builds run on; an older GPU gets no CUDA library, said in
# milliseconds from the device instead of after a failed compile.
MIN_CUDA_CAPABILITY = (7, 5)
NEWER_CUDA_ARCHS = ("10.0", "12.0")  # B200, RTX 50xx/RTX PRO: native code where nvcc knows them
DEFAULT_CUDA_HOME = "/usr/local/cuda"


# cpp_extension reads CUDA_HOME once, when first imported, and otherwise guesses it from the nvcc
# on PATH (a wrapper here) with a warning; point it at the toolkit before anything imports it.
if "CUDA_HOME" not in os.environ and Path(DEFAULT_CUDA_HOME, "bin", "nvcc").exists():
    os.environ["CUDA_HOME"] = DEFAULT_CUDA_HOME


log = logging.getLogger(__name__)


class OpsBuildError(RuntimeError):
    """The compiled edge op cannot be built or loaded here; the message says why and what to do."""


@dataclass(frozen=True)
class BuiltLibrary:
    name: str
    path: Path
    seconds: float


def cache_root() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "segnet" / "ops"
    return Path(os.environ.get("SEGNET_OPS_CACHE", default))


def _source_hash(root: Path, extra: tuple[str, ...]) -> str:
    """The sources under `root` (every .h, .cpp and .cu: a header change rebuilds) by content,
    not by where they are."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in {".h", ".cpp", ".cu"}:
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    digest.update(torch.__version__.encode())
    digest.update(sys.version.encode())
    digest.update("\0".join(extra).encode())
    return digest.hexdigest()[:12]


def _require_compiler() -> None:
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        raise OpsBuildError(
            f"No C++ compiler found (looked for {compiler!r}): install one (e.g. apt-get install g++) "
            "or point CXX at it, or use op.backend=python."
        )
    if shutil.which("ninja") is None and not _ninja_from_pip():
        raise OpsBuildError("ninja is not installed: pip install ninja (it is a dependency of segnet).")


def _ninja_from_pip() -> bool:
    try:
        import ninja  # noqa: F401  the wheel puts its binary on PATH of the environment
    except ImportError:
        return False
    os.environ["PATH"] = f"{Path(ninja.BIN_DIR)}{os.pathsep}{os.environ['PATH']}"
    return True


def configure_cuda_environment() -> None:
    """Set what a CUDA build needs on a machine that may have no GPU: CUDA_HOME (cpp_extension
    guesses wrong from a wrapper nvcc) and TORCH_CUDA_ARCH_LIST (no GPU to detect)."""
    cuda_home = Path(os.environ.setdefault("CUDA_HOME", DEFAULT_CUDA_HOME))
    nvcc = cuda_home / "bin" / "nvcc"
    if not nvcc.exists():
        raise OpsBuildError(
            f"nvcc not found at {nvcc}: the CUDA backend needs the CUDA toolkit. Install it and set "
            "CUDA_HOME to its folder, or use op.backend=cpp (CPU) or op.backend=python."
        )
    if torch.version.cuda is None:
        raise OpsBuildError(
            f"torch {torch.__version__} is a CPU-only build: install a CUDA build of torch to build the "
            "CUDA backend, or use op.backend=cpp."
        )
    if "TORCH_CUDA_ARCH_LIST" not in os.environ:
        os.environ["TORCH_CUDA_ARCH_LIST"] = default_cuda_archs(nvcc)
    cpp_extension = _cpp_extension()
    cpp_extension.CUDA_HOME = str(cuda_home)  # read once at import; make it follow the env var


def default_cuda_archs(nvcc: Path) -> str:
    """Native code for A100 and H100/H200, for the visible GPU's architecture, and for the newer
    architectures this nvcc supports; PTX of the newest one, which the driver compiles for
    anything newer still."""
    listed = subprocess.run([str(nvcc), "--list-gpu-code"], capture_output=True, text=True).stdout.split()
    archs = set(BASE_CUDA_ARCHS) | {a for a in NEWER_CUDA_ARCHS if f"sm_{a.replace('.', '')}" in listed}
    if torch.cuda.is_available():
        archs.add("{}.{}".format(*torch.cuda.get_device_capability()))
    ordered = sorted(archs, key=lambda a: tuple(map(int, a.split("."))))
    return ";".join(ordered) + "+PTX"


def _cpp_extension():
    """torch.utils.cpp_extension, imported without its warning that no GPU is visible (on a
    machine without one that is expected; the CUDA backend reports it when it matters)."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        import torch.utils.cpp_extension as cpp_extension
    finally:
        logger.setLevel(level)
    return cpp_extension


def pip_cuda_includes() -> list[str]:
    """The CUDA headers of torch's pip dependencies (ATen's CUDA headers include cusparse.h)."""
    try:
        import nvidia
    except ImportError:
        return []
    return [str(p) for root in nvidia.__path__ for p in Path(root).glob("cu*/include") if p.is_dir()]


@contextlib.contextmanager
def build_lock(build_dir: Path):
    """Held while this process builds or loads into build_dir: an OS-level lock (flock), which
    the kernel releases when its holder dies, so a build killed by SIGKILL, the OOM killer or a
    cluster's time limit never blocks the next one, whichever torch is installed. torch versions
    before the OS-level lock in cpp_extension coordinate with a `lock` file that a killed build
    leaves behind and every later build waits on forever; whoever holds this lock knows that no
    build is running, so such a file is stale and is removed, with a warning."""
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / "segnet-build.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another rank or process builds: say why this one waits
            log.info("waiting for another process building or loading in %s ...", build_dir)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            stale = build_dir / "lock"
            if not _torch_lock_is_os_level() and stale.exists():
                log.warning("removing %s, left by a build that was killed (this torch's lock file outlives it)", stale)
                stale.unlink()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _torch_lock_is_os_level() -> bool:
    """Whether this torch's cpp_extension locks builds with filelock (released by the kernel)
    rather than with a FileBaton lock file."""
    return hasattr(_cpp_extension(), "FileLock")


BUILT_STAMP = "built"
# What a build of each library is and about how long it takes, said before it starts (a build
# that runs minutes in silence looks hung).
BUILDS = {
    "segnet_ops_cpu": "the C++ edge op (once per torch version and source change; one to two minutes on 2 cores)",
    "segnet_ops_cuda": "the CUDA edge op (once per torch version and source change; minutes: nvcc compiles "
                       "every architecture)",
}


# How often a build that is still compiling says so: each second in place on a terminal, every
# half minute as a line in a log file or a pipe.
TICK_SECONDS = 1.0
LINE_SECONDS = 30.0


@contextlib.contextmanager
def elapsed_said(what: str):
    """While the block runs, its elapsed time said from a thread (the compiler prints nothing for
    minutes, which looks hung): redrawn in place on a terminal, a line now and then elsewhere."""
    on_terminal = sys.stderr.isatty()
    done = threading.Event()
    start = time.perf_counter()

    def tell() -> None:
        while not done.wait(TICK_SECONDS if on_terminal else LINE_SECONDS):
            elapsed = time.perf_counter() - start
            if on_terminal:
                sys.stderr.write(f"\rbuilding {what}: {elapsed:.0f} s")
                sys.stderr.flush()
            else:
                log.info("still building %s: %.0f s ...", what, elapsed)

    teller = threading.Thread(target=tell, daemon=True)
    teller.start()
    try:
        yield
    finally:
        done.set()
        teller.join()
        if on_terminal and time.perf_counter() - start >= TICK_SECONDS:
            sys.stderr.write("\n")


def _finished(build_dir: Path, library: Path) -> bool:
    """A build that linked (its stamp) and whose library is still there (a library deleted by
    hand is built again rather than failing to load)."""
    return (build_dir / BUILT_STAMP).exists() and library.exists()


def build(name: str, root: Path, sources: tuple[str, ...], flags: tuple[str, ...], **kwargs) -> BuiltLibrary:
    """Build (or find finished in the cache) and load the ops-only library `name` from `sources`
    (relative to `root`); `kwargs` go to torch's cpp_extension.load."""
    cpp_extension = _cpp_extension()
    build_dir = build_folder(name, root, flags)
    library = build_dir / f"{name}.so"
    if not _finished(build_dir, library):
        _require_compiler()  # a finished build loads without one
    start = time.perf_counter()
    try:
        with build_lock(build_dir):
            if _finished(build_dir, library):  # ninja's file names another checkout's paths: not rerun
                torch.ops.load_library(str(library))
            else:
                log.info("building %s into %s ...", BUILDS.get(name, name), build_dir)
                compiling = time.perf_counter()
                with elapsed_said(name):
                    cpp_extension.load(
                        name=name,
                        sources=[str(root / s) for s in sources],
                        build_directory=str(build_dir),
                        is_python_module=False,
                        verbose=os.environ.get("SEGNET_OPS_VERBOSE") == "1",
                        **kwargs,
                    )
                (build_dir / BUILT_STAMP).touch()
                log.info("built %s in %.0f s", name, time.perf_counter() - compiling)
    except (RuntimeError, OSError, ImportError) as error:  # compiler errors arrive as RuntimeError
        raise OpsBuildError(
            f"Building {name} in {build_dir} failed: {error}\n"
            "Rerun with SEGNET_OPS_VERBOSE=1 for the compiler output, or use op.backend=python."
        ) from error
    return BuiltLibrary(name, library, time.perf_counter() - start)


def cpu_flags() -> tuple[str, ...]:
    """Vector instructions as far as this CPU has them (what torch itself dispatches to); the
    flags are part of the build's hash, so a machine with another CPU builds its own."""
    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        return CPU_FLAGS + ("-mavx2", "-mfma")
    return CPU_FLAGS


def _load_shipped(kind: str, name: str) -> BuiltLibrary | None:
    """The wheel's library if it may be loaded here; a refused one is said in one line."""
    choice = shipped_library(kind)
    if choice.path is None:
        if choice.refused:
            log.warning("segnet: not loading the shipped op library: %s", choice.reason)
        return None
    start = time.perf_counter()
    torch.ops.load_library(str(choice.path))
    return BuiltLibrary(name, choice.path, time.perf_counter() - start)


def build_folder(name: str, root: Path, flags: tuple[str, ...]) -> Path:
    """Where the library `name` of the sources under `root`, built with `flags`, is cached."""
    return cache_root() / f"{name}-{_source_hash(root, flags)}"


def jit_flags(kind: str) -> tuple[str, ...]:
    """The flags (and so the cache folder) of a JIT build of the "cpu" or "cuda" library."""
    if kind == "cpu":
        return cpu_flags()
    configure_cuda_environment()
    return CUDA_FLAGS + (os.environ["TORCH_CUDA_ARCH_LIST"],)


def where_from(kind: str) -> tuple[str, Path, str]:
    """What loading the "cpu" or "cuda" library would load: ("shipped", "JIT cache" or "JIT
    build", its path, why not the shipped one); OpsBuildError if it cannot be built here."""
    name = f"segnet_ops_{kind}"
    choice = shipped_library(kind)
    if choice.path is not None:
        return "shipped", choice.path, choice.reason
    build_dir = build_folder(name, CSRC, jit_flags(kind))
    library = build_dir / f"{name}.so"
    return ("JIT cache" if _finished(build_dir, library) else "JIT build"), library, choice.reason


@functools.cache
def load(kind: str) -> BuiltLibrary:
    """Load the "cpu" or "cuda" library: the shipped one, else the JIT cache's, else a JIT build;
    idempotent within a process. The CUDA one needs a visible GPU."""
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"ops.library.load: kind must be 'cpu' or 'cuda', got {kind!r}")
    if kind == "cuda":
        return _load_cuda()
    return _load_shipped("cpu", "segnet_ops_cpu") or build_cpu_library()


def build_cpu_library() -> BuiltLibrary:
    """Build (or find in the cache) and load the CPU library from the checkout's sources."""
    flags = jit_flags("cpu")
    return build(
        "segnet_ops_cpu", CSRC, CPU_SOURCES, flags, extra_cflags=list(flags), extra_ldflags=["-fopenmp"],
        with_cuda=False,
    )


def build_cuda_library() -> BuiltLibrary:
    """Build and load the CUDA library; needs nvcc and a CUDA build of torch, not a GPU."""
    load("cpu")  # owns the schemas the CUDA kernels register against
    flags = jit_flags("cuda")
    return build(
        "segnet_ops_cuda",
        CSRC,
        CUDA_SOURCES,
        flags,
        extra_cuda_cflags=list(CUDA_FLAGS),  # the library is one .cu file: no host-compiler sources
        extra_include_paths=pip_cuda_includes(),
        with_cuda=True,
    )


def _load_cuda() -> BuiltLibrary:
    if not torch.cuda.is_available():
        raise OpsBuildError(
            "The CUDA backend needs a visible GPU and none is (torch.cuda.is_available() is False): "
            "use op.backend=cpp or op.backend=auto on this machine."
        )
    capability = torch.cuda.get_device_capability()
    if capability < MIN_CUDA_CAPABILITY:
        raise OpsBuildError(
            f"The CUDA backend needs compute capability {'.'.join(map(str, MIN_CUDA_CAPABILITY))} or newer and "
            f"{torch.cuda.get_device_name()} is {capability[0]}.{capability[1]}: "
            "use op.backend=python on this GPU (op.backend=auto does)."
        )
    load("cpu")  # owns the schemas the CUDA kernels register against
    return _load_shipped("cuda", "segnet_ops_cuda") or build_cuda_library()
