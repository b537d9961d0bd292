"""Remote targets: measure any voice agent over a socket with the same scenarios and ground truth.

Public names::

    RemoteTarget, TargetSpec, parse_target   a target agent reached over a socket
    TargetError, CallFailed                  the target cannot be reached / a call went wrong
    JitterBuffer                             the caller's playout, sample-accurate
    serve_echo                               the loopback echo target (the harness's error bar)

Modules: :mod:`.links` (Twilio Media Streams and rejoinder ``/ws`` clients), :mod:`.jitter`,
:mod:`.call` (the caller loop), :mod:`.replies` (what was heard → turns), :mod:`.reports` (what a
target reports about itself), :mod:`.transcribe` (Whisper on what was heard), :mod:`.echo`,
:mod:`.cli` (``bench --target`` / ``call --target``).
"""

from importlib import import_module
from typing import Any

_EXPORTS = {"RemoteTarget": "target", "TargetSpec": "target", "parse_target": "target",
            "TargetError": "links", "CallFailed": "links", "JitterBuffer": "jitter", "serve_echo": "echo"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
