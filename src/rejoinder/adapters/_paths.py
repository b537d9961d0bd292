"""Where the embedded model files live (inside installed wheels; nothing is downloaded)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ..errors import ConfigError, MissingExtra


def package_dir(package: str, *, what: str, pip_spec: str) -> Path:
    """Directory of an installed package, found without importing it.

    Raises:
        MissingExtra: the package is not installed.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtra(what, pip_spec)
    return Path(list(spec.submodule_search_locations)[0])


def model_file(package: str, relpath: str, *, what: str, pip_spec: str) -> Path:
    """Path of ``relpath`` inside an installed package.

    Raises:
        MissingExtra: the package is not installed.
        ConfigError: the package is installed but the file is missing (broken install).
    """
    path = package_dir(package, what=what, pip_spec=pip_spec) / relpath
    if not path.is_file():
        raise ConfigError(f"{what}: expected model file {path} is missing; reinstall with "
                          f"pip install --force-reinstall '{pip_spec}'")
    return path


def cache_dir() -> Path:
    """rejoinder's cache folder: ``$REJOINDER_CACHE`` or platformdirs' user cache dir."""
    env = os.environ.get("REJOINDER_CACHE")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("rejoinder"))
