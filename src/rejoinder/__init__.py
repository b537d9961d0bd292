"""rejoinder: a real-time voice agent runtime and an honest latency harness.

Public names are re-exported here; everything else is an implementation module.
"""

from .agent import Agent, load_caller
from .clock import RealClock, VirtualClock
from .config import AgentConfig, load_config
from .errors import AudioInputError, ConfigError, MissingExtra, RejoinderError
from .events import BOUNDARIES, Boundary, Event, EventBus
from .ports import LLMPort, LLMRequest, PortError, STTPort, TTSPort, TurnPort, VADPort
from .reply import RecoveryPolicy
from .session import Session, Stack
from .timeline import SEGMENTS, Timeline, TurnRecord
from .dictation import NumberPolicy
from .sounds import SoundPolicy
from .turns import IdlePolicy, TurnPolicy, TurnTaker

__version__ = "0.1.0"

__all__ = [
    "Agent", "AgentConfig", "AudioInputError", "BOUNDARIES", "Boundary", "ConfigError", "Event",
    "EventBus", "LLMPort", "LLMRequest", "MissingExtra", "PortError", "RealClock", "RecoveryPolicy",
    "RejoinderError", "SEGMENTS", "STTPort", "Session", "Stack", "TTSPort", "Timeline", "TurnPolicy",
    "TurnPort", "TurnRecord", "TurnTaker", "VADPort", "VirtualClock", "load_caller", "load_config",
    "IdlePolicy", "NumberPolicy", "SoundPolicy", "__version__",
]
