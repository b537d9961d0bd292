"""The speech-to-speech and SageMaker-bidirectional arrangements in ``bench --hosting``: plans and
how the agent's stack is pointed at their servers (the runs themselves: README, bench commands)."""

from __future__ import annotations

from pathlib import Path

from rejoinder.adapters.registry import StackConfig
from rejoinder.harness import hosting


def test_plans_give_speech_to_speech_no_tts_failure_run():
    items = hosting.plans(["speech-to-speech", "managed-bidi"], ["loopback"], failures=True)
    assert [p.label for p in items] == ["speech-to-speech@loopback", "managed-bidi@loopback",
                                        "managed-bidi@loopback +failure"]
    assert items[2].failure == "tts:drop@10%0.5"


def test_managed_bidi_points_stt_and_tts_at_the_bidirectional_containers():
    dep = hosting.Deployment(hosting.Plan("managed-bidi", hosting.PROFILES["loopback"]), 0, Path("/tmp"))
    stack = dep.stack_config(StackConfig())
    assert stack.stt == stack.tts == "sagemaker-bidi" and stack.llm == "openai"
    assert stack.sagemaker_bidi.stt_url == f"ws://127.0.0.1:{dep._port(0)}"
    assert stack.sagemaker_bidi.tts_url == f"ws://127.0.0.1:{dep._port(1)}"
    s2s = hosting.Deployment(hosting.Plan("speech-to-speech", hosting.PROFILES["loopback"]), 1, Path("/tmp"))
    assert s2s.stack_config(StackConfig()) == StackConfig()  # the agent runs no models of its own
    assert s2s.s2s_url == f"ws://127.0.0.1:{s2s._port(0)}"
