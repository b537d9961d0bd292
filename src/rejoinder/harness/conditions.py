"""The conditions of a run, recorded automatically so two runs can be told apart later.

Code (git commit + dirty flag, rejoinder version), software (Python and key package versions),
models (names and file hashes via ``rejoinder.adapters.registry.describe_models`` when the
registry provides it), machine (CPU model, cores, memory, OS), the full agent configuration, the
hosting-arrangement and network-profile labels, the concurrency levels and the scenarios' hashes.
Nothing here may fail a run: a fact that cannot be read is recorded as ``None`` or an error string.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

KEY_PACKAGES = ("numpy", "onnxruntime", "faster-whisper", "ctranslate2", "llama_cpp_python",
                "piper-tts", "espeakng-loader", "pydantic", "soxr", "plotly")


def git_state(start: Path | None = None) -> dict[str, Any]:
    """``{"commit", "dirty", "branch"}`` of the checkout holding this package (read-only git)."""
    where = str((start or Path(__file__)).resolve().parent)

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", where, *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None, "branch": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None,
            "branch": git("rev-parse", "--abbrev-ref", "HEAD")}


def package_versions(names: tuple[str, ...] = KEY_PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    import psutil
    return {
        "cpu_model": cpu_model(),
        "cores_logical": os.cpu_count(),
        "cores_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 2),
        "os": platform.platform(),
        "hostname": platform.node(),
    }


def models(cfg: Any) -> Any:
    """Model names and file hashes from the adapter registry, when it offers them."""
    try:
        from ..adapters import registry
    except Exception as exc:  # noqa: BLE001 — recorded, never fatal
        return {"error": f"adapter registry unavailable: {exc!r}"}
    describe = getattr(registry, "describe_models", None)
    if describe is None:
        return {"error": "adapters.registry.describe_models is not available"}
    try:
        return describe(getattr(cfg, "stack", cfg))
    except Exception as exc:  # noqa: BLE001
        return {"error": f"describe_models failed: {exc!r}"}


def file_hash(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def collect(cfg: Any, *, concurrency: list[int], scenarios: dict[str, str], repeat: int,
            suite: str, hosting: str | None = None, network: str | None = None,
            agent: Any = None) -> dict[str, Any]:
    """Everything that defines a run's conditions (JSON-ready), including the agent that ran
    (its name, source, instructions and tools: :meth:`rejoinder.agent.Agent.describe`)."""
    try:
        version = metadata.version("rejoinder")
    except metadata.PackageNotFoundError:
        version = None
    config = redact(cfg.model_dump(mode="json") if hasattr(cfg, "model_dump") else cfg)
    return {
        "code": {**git_state(), "rejoinder": version},
        "software": {"python": sys.version.split()[0], "implementation": platform.python_implementation(),
                     "packages": package_versions()},
        "models": models(cfg),
        "machine": machine(),
        "config": config,
        "agent": agent.describe() if agent is not None else None,
        "hosting": hosting or getattr(cfg, "hosting", None),
        "network": network or getattr(cfg, "network", None),
        "arrangement": "one process, N concurrent calls as asyncio tasks sharing the loaded models",
        "concurrency": concurrency,
        "repeat": repeat,
        "suite": suite,
        "scenarios": scenarios,
    }


_SECRET = ("api_key", "apikey", "token", "secret", "password")


def redact(obj: Any) -> Any:
    """A copy of ``obj`` with secret-looking values (``api_key``, ``token`` …) replaced."""
    if isinstance(obj, dict):
        return {k: ("<redacted>" if v and any(s in str(k).lower() for s in _SECRET) else redact(v))
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


def differences(a: dict[str, Any], b: dict[str, Any], prefix: str = "",
                skip: tuple[str, ...] = ("machine.hostname", "scenarios")) -> list[tuple[str, Any, Any]]:
    """Leaves that differ between two condition dicts: ``[(dotted key, a, b)]``."""
    out: list[tuple[str, Any, Any]] = []
    for key in sorted(set(a) | set(b), key=str):
        path = f"{prefix}{key}"
        if path in skip:
            continue
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += differences(va, vb, path + ".", skip)
        elif va != vb:
            out.append((path, va, vb))
    return out
