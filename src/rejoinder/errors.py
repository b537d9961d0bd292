"""Exceptions raised by rejoinder.

::

    RejoinderError
    ├── ConfigError          malformed configuration / unknown adapter name
    │   └── MissingExtra     an optional dependency is not installed (names the pip install)
    ├── AudioInputError      unreadable, empty, silent or non-audio input
    ├── hosting.network.NetworkUnavailable   network profiles cannot be applied here (no CAP_NET_ADMIN…)
    ├── hosting.servers.ServerStartError     a model server process did not come up
    └── ports.PortError      a model stage failed to serve a request (see rejoinder.ports)
"""

from __future__ import annotations


class RejoinderError(Exception):
    """Base of every error rejoinder raises on purpose."""


class ConfigError(RejoinderError, ValueError):
    """The configuration names something that does not exist or is malformed."""


class MissingExtra(ConfigError):
    """An optional dependency is missing; the message names the ``pip install`` that fixes it."""

    def __init__(self, what: str, pip_spec: str) -> None:
        super().__init__(f"{what} is not installed; fix it with: pip install '{pip_spec}'")
        self.pip_spec = pip_spec


class AudioInputError(RejoinderError, ValueError):
    """The input audio cannot be used (unreadable, empty, silent, not audio)."""
