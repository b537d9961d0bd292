"""rejoinder: a real-time voice agent runtime and an honest latency harness.

Public names are re-exported here; everything else is an implementation module.
"""

from .agent import Agent, LLMSettings, load_agent
from .flow import AgentStep, GoTo, HandOff, HangUp, Transfer
from .runtime import Runtime, load_caller
from .tools import CallContext, Tool, ToolError, tool
from .clock import RealClock, VirtualClock
from .config import AgentConfig, load_config
from .errors import AudioInputError, ConfigError, MissingExtra, RejoinderError
from .events import BOUNDARIES, Boundary, Event, EventBus
from .ports import LLMPort, LLMRequest, PortError, STTPort, TTSPort, TurnPort, VADPort
from .reply import FillerPolicy, RecoveryPolicy
from .session import Session, Stack
from .livesession import AgentFrame, LiveSession
from .timeline import SEGMENTS, Timeline, TurnRecord
from .dictation import NumberPolicy
from .sounds import SoundPolicy
from .turns import IdlePolicy, TurnPolicy, TurnTaker

__version__ = "0.1.0"

__all__ = [
    "Agent", "AgentConfig", "AgentFrame", "AgentStep", "GoTo", "HandOff", "HangUp", "Transfer",
    "AudioInputError", "BOUNDARIES", "Boundary", "CallContext", "ConfigError", "LiveSession",
    "Event", "EventBus", "FillerPolicy", "IdlePolicy", "LLMPort", "LLMRequest", "LLMSettings",
    "MissingExtra", "NumberPolicy", "PortError", "RealClock", "RecoveryPolicy", "RejoinderError",
    "Runtime", "SEGMENTS", "STTPort", "Session", "SoundPolicy", "Stack", "TTSPort", "Timeline", "Tool",
    "ToolError", "TurnPolicy", "TurnPort", "TurnRecord", "TurnTaker", "VADPort", "VirtualClock",
    "load_agent", "load_caller", "load_config", "tool", "__version__",
]
