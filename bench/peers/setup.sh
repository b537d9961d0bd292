#!/usr/bin/env bash
# Make bench/peers/.venv: Pipecat 1.14 with its Silero VAD, Smart Turn v3 (ONNX), faster-whisper,
# Piper and the FastAPI WebSocket transport — no torch. Idempotent. Models are not downloaded:
# bench/vs_pipecat.py passes the bot rejoinder's local Whisper base folder, the joe Piper voice and
# the SmolLM2 GGUF (served by llama.cpp's OpenAI-compatible server from rejoinder's venv).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "== creating bench/peers/.venv"
  $PY -m venv .venv
fi
want=$(sha256sum requirements.txt | cut -c1-16)
if [ "$(cat .venv/.installed 2>/dev/null)" != "$want" ]; then
  echo "== installing Pipecat 1.14 into bench/peers/.venv"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -r requirements.txt
  if .venv/bin/python -c "import torch" 2>/dev/null; then
    echo "error: torch got installed into bench/peers/.venv; the reference bot must run without it" >&2
    exit 1
  fi
  echo "$want" > .venv/.installed
fi
.venv/bin/python -c "import pipecat, importlib.metadata as m; print('pipecat-ai', m.version('pipecat-ai'), 'ready in bench/peers/.venv')"
