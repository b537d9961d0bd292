"""Runtime configuration (pydantic): which agent, which adapters, and the runtime's policies
(turn-taking, recovery, fillers, faults) — everything but the agent's own definition
(:mod:`rejoinder.agent`).

One YAML/JSON file (``--config``) or CLI flags. Unknown keys are errors that name the key
(``extra="forbid"``).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .adapters.registry import StackConfig
from .errors import ConfigError
from .reply import FillerPolicy, RecoveryPolicy
from .turns import TurnPolicy


class AgentConfig(BaseModel):
    """Everything that defines a run besides the agent's definition. Recorded in full with every
    run (with the agent's own description, :meth:`rejoinder.agent.Agent.describe`)."""

    model_config = ConfigDict(extra="forbid")
    agent: str | None = Field(None, description="the agent: a YAML file, 'module:attribute' or a "
                              "bundled name (default: the reference support assistant)")
    stack: StackConfig = Field(default_factory=StackConfig)
    turns: TurnPolicy = Field(default_factory=TurnPolicy)
    recovery: RecoveryPolicy = Field(default_factory=RecoveryPolicy)
    filler: FillerPolicy = Field(default_factory=FillerPolicy)
    preemptive: bool = Field(True, description="start the LLM on a pause's transcript before the "
                             "turn is decided over (nothing is spoken or done irreversibly early)")
    backup_tts: str | None = Field("espeak", description="TTS used when the primary fails mid-reply")
    faults: str | None = Field(None, description="fault injection spec (rejoinder.adapters.faults), "
                               "e.g. 'tts:drop@1%0.3' or 'default'")
    fault_seed: int = 0
    hosting: str = Field("embedded-cpu", description="hosting-arrangement label, e.g. 'embedded-cpu'")
    network: str = Field("loopback", description="network-profile label")


def load_config(path: str | Path | None, *, agent: str | None = None, tts: str | None = None,
                llm: str | None = None, llm_model: str | Path | None = None) -> AgentConfig:
    """Load an :class:`AgentConfig` from YAML/JSON (``None``: the embedded defaults), then apply
    the command line's choices: ``agent`` (``--agent``), ``tts`` and ``llm`` (adapter names),
    ``llm_model`` (``--llm-model``: a local GGUF for the in-process llama.cpp LLM, i.e.
    ``stack.llama.model_path``; the file itself is checked by ``registry.validate``).

    Raises:
        ConfigError: unreadable file, bad syntax, an invalid/unknown field (named), or
            ``llm_model`` with an LLM adapter that does not run GGUF files.
    """
    cfg = _load(path)
    if agent:
        cfg.agent = agent
    if tts:
        cfg.stack.tts = tts
    if llm:
        cfg.stack.llm = llm
    if llm_model:
        from .adapters.registry import LLAMA_ADAPTERS
        if cfg.stack.llm not in LLAMA_ADAPTERS:
            raise ConfigError(f"--llm-model runs a GGUF in-process, but the LLM adapter is "
                              f"{cfg.stack.llm!r}; drop --llm {cfg.stack.llm} (or set stack.llm "
                              f"to 'llama') to use {llm_model}")
        cfg.stack.llama.model_path = str(Path(llm_model).expanduser())
    return cfg


def _load(path: str | Path | None) -> AgentConfig:
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
