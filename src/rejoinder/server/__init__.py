"""Talk to an agent over sockets: ``rejoinder serve`` (browser client, ``/ws``, ``/twilio``).

The protocols are described in ``server/PROTOCOL.md``. Names are imported lazily so that the
command line starts without loading the web stack.
"""

from typing import Any

__all__ = ["AgentProvider", "CallProvider", "ServerConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import app
        return getattr(app, name)
    raise AttributeError(name)
