"""Agent configuration (pydantic): which adapters to use and the turn-taking policy.

One YAML/JSON file or CLI flags. Unknown keys are errors that name the key (``extra="forbid"``).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .adapters.registry import StackConfig
from .errors import ConfigError
from .reply import RecoveryPolicy
from .turns import TurnPolicy


class AgentConfig(BaseModel):
    """Everything that defines an agent run. Recorded in full with every run."""

    model_config = ConfigDict(extra="forbid")
    stack: StackConfig = Field(default_factory=StackConfig)
    turns: TurnPolicy = Field(default_factory=TurnPolicy)
    recovery: RecoveryPolicy = Field(default_factory=RecoveryPolicy)
    backup_tts: str | None = Field("espeak", description="TTS used when the primary fails mid-reply")
    faults: str | None = Field(None, description="fault injection spec (rejoinder.adapters.faults), "
                               "e.g. 'tts:drop@1%0.3' or 'default'")
    fault_seed: int = 0
    hosting: str = Field("embedded-cpu", description="hosting-arrangement label, e.g. 'embedded-cpu'")
    network: str = Field("loopback", description="network-profile label")


def load_config(path: str | Path | None) -> AgentConfig:
    """Load an :class:`AgentConfig` from YAML/JSON; ``None`` gives the embedded defaults.

    Raises:
        ConfigError: unreadable file, bad syntax, or an invalid/unknown field (named).
    """
    if path is None:
        return AgentConfig()
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read config: {exc}") from exc
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        raise ConfigError(f"{p}: field '{field}': {err['msg']}") from exc
