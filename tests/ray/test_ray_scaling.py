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
