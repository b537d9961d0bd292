#!/usr/bin/env bash
# One-time (idempotent) set-up: Debian packages, a virtual environment with rejoinder and all its
# models, and the cached model preparation. Re-running it is fast: each step is skipped when done.
#
# The llama-cpp-python build compiles llama.cpp from source (PyPI has only the sdist): about
# 5 minutes on 2 cores the first time; pip caches the built wheel, so later runs take seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
APT_PKGS="asterisk-core-sounds-en-wav asterisk-core-sounds-en espeak-ng sox chromium chromium-driver postgresql iproute2"

missing=""
for p in $APT_PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "== installing Debian packages:$missing"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  $PY -m venv .venv
fi
stamp=.venv/.rejoinder-installed
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat $stamp 2>/dev/null)" != "$want" ]; then
  echo "== installing rejoinder and its models into .venv (first time: ~5 min for llama.cpp)"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  # portable x86-64-v3 build of llama.cpp (measured: ≈4.5 min on 2 cores); never GGML_CPU_ALL_VARIANTS
  export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}"
  .venv/bin/pip install -q -e '.[piper,espeak,postgres,llm-server,ray,test]'
  # Smart Turn v3.2 ships inside the pipecat-ai wheel; we only read its ONNX file, so no deps.
  .venv/bin/pip install -q --no-deps pipecat-ai==1.14.0
  echo "$want" > $stamp
fi
.venv/bin/rejoinder prepare >/dev/null
