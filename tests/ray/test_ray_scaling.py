"""Our own logic around Ray Serve, without a cluster: deployment options from the CLI's
settings, which calls a removed replica drained, and the ray-serve hosting plan."""

from __future__ import annotations

from rejoinder.harness.hosting import plans
from rejoinder.server.ray_driver import drained
from rejoinder.server.ray_serve import CallLedger, ScaleOptions


def test_autoscaling_follows_calls_in_progress_and_drains_for_the_longest_call():
    opts = ScaleOptions(min_replicas=1, max_replicas=3, target_calls=2, max_calls=4, drain_s=900).deployment_options()
    auto = opts["autoscaling_config"]
    assert (auto["min_replicas"], auto["max_replicas"], auto["target_ongoing_requests"]) == (1, 3, 2)
    assert opts["max_ongoing_requests"] == 4          # never more sockets than the replica's server takes
    assert opts["graceful_shutdown_timeout_s"] == 900  # a replica being removed waits for its calls


def test_the_calls_running_on_the_replica_scale_down_chose_are_the_drained_ones():
    ledger = CallLedger()
    ledger.hello("a", 0.0)
    ledger.hello("b", 5.0)
    for cid, rep, start, end in (("c1", "a", 1.0, 30.0), ("c2", "b", 6.0, 12.0), ("c3", "b", 8.0, 25.0),
                                 ("c4", "b", 9.0, 15.0)):
        ledger.put([cid], {"call_id": cid, "status": "ended", "ended": {"code": 1000}, "at_unix": start,
                           "ended_unix": end}, rep)
    ledger.bye("b", 25.5)   # b drained: c3 was still running when scale-down chose it at t = 20
    events = [{"kind": "scale-up", "at_unix": 5.0}, {"kind": "scale-down", "at_unix": 20.0}]
    got = drained(ledger.lifetimes(), events)
    assert [(d["replica"], d["call_id"], d["ended"]) for d in got] == [("b", "c3", {"code": 1000})]
    assert ledger.served() == {"a": 1, "b": 3} and ledger.in_progress() == {}


def test_ray_serve_is_a_hosting_arrangement_without_network_profiles():
    got = plans(["in-process", "ray-serve"], ["loopback", "regional"], failures=True)
    assert [(p.arrangement, p.profile, bool(p.failure)) for p in got] == [
        ("in-process", None, False), ("in-process", None, True), ("ray-serve", None, False), ("ray-serve", None, True)]


def test_model_deployments_are_planned_scaled_separately_and_the_agent_is_pointed_at_them():
    import pytest

    from rejoinder.config import AgentConfig
    from rejoinder.errors import ConfigError
    from rejoinder.server.ray_models import model_scale, parse_models, plan, point

    assert parse_models("llm, stt,llm") == ["stt", "llm"]
    with pytest.raises(ConfigError, match="'asr' is not a model server; deployable: stt, tts, llm"):
        parse_models("asr,llm")
    agent = ScaleOptions(max_replicas=3, target_calls=2, max_calls=4, drain_s=600)
    stt, llm = model_scale("stt", agent, replicas=2), model_scale("llm", agent)
    assert (stt.max_replicas, stt.target_calls, stt.max_calls, stt.cpus, stt.drain_s) == (2, 4.0, 16, 0.25, 600)
    assert (llm.max_replicas, llm.target_calls, llm.max_calls) == (3, 1.0, 4)  # one completion at a time
    cfg = AgentConfig()
    deps = plan({"stt": stt, "llm": llm, "tts": model_scale("tts", agent)}, cfg, api_key="k" * 16)
    assert [d.route_prefix for d in deps] == ["/models/stt", "/models/llm", "/models/tts"]
    assert deps[0].args["whisper"]["initial_prompt"]  # the agent's vocabulary, as in-process
    argv = deps[1].args["argv"]
    assert argv[argv.index("--api_key") + 1] == "k" * 16 and argv[argv.index("--n_ctx") + 1] == "8192"
    assert deps[0].describe()["autoscaling_config"]["max_replicas"] == 2 and "api_key" not in str(deps[0].describe())
    got = point(cfg, deps, "0.0.0.0", 8800).stack
    assert (got.stt, got.cartesia_stt.base_url, got.cartesia_stt.api_key) == ("cartesia", "ws://127.0.0.1:8800/models/stt",
                                                                            "k" * 16)
    assert (got.llm, got.openai.base_url, got.openai.model) == ("openai", "http://127.0.0.1:8800/models/llm/v1", "smollm2")
    assert (got.tts, got.sagemaker.base_url) == ("sagemaker", "http://127.0.0.1:8800/models/tts")
    assert cfg.stack.stt == "whisper-base"  # the caller's configuration is left alone


def test_the_llm_deployment_runs_with_the_settings_of_models_serve_llm():
    from rejoinder.adapters.llama_server import CHAT_FORMAT, settings

    mode, server, [model] = settings(["--n_threads", "1", "--api_key", "secret-key"])
    assert (mode, server.api_key, model.chat_format, model.n_ctx, model.n_batch, model.n_threads) == (
        "lazy", "secret-key", CHAT_FORMAT, 8192, 256, 1)
    assert model.model.endswith(".gguf")  # the installed SmolLM2
