"""Code run around a package's first import, wherever that import happens: a meta path finder
that finds the package as usual and has its own loader run it inside a wrapping loader."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType


class WrappingLoader(importlib.abc.Loader):
    """A package's own loader; a subclass runs code around exec_module."""

    def __init__(self, loader: importlib.abc.Loader):
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)

    def __getattr__(self, name: str):
        return getattr(self.loader, name)  # resources, source and the rest, as the real loader has them


class PackageFinder(importlib.abc.MetaPathFinder):
    """Finds `package` where Python would, to be loaded by `wrapping(its loader)`."""

    def __init__(self, package: str, wrapping: Callable[[importlib.abc.Loader], WrappingLoader]):
        self.package, self.wrapping = package, wrapping

    def find_spec(self, name, path, target=None):
        if name != self.package:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = self.wrapping(spec.loader)
        return spec


def at_first_import(package: str, wrapping: Callable[[importlib.abc.Loader], WrappingLoader]) -> None:
    """`package`'s first import loaded by `wrapping`; nothing when it is imported already or hooked."""
    hooked = any(isinstance(finder, PackageFinder) and finder.package == package for finder in sys.meta_path)
    if package not in sys.modules and not hooked:
        sys.meta_path.insert(0, PackageFinder(package, wrapping))
