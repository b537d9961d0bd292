"""A target that ends the call itself and says so in its call report (``hangup``, ``transfer``):
the harness scores it as an outcome, not as a call that failed."""

from __future__ import annotations

from rejoinder.harness.caller import SimulatedCaller
from rejoinder.harness.remote.call import RemoteCallResult
from rejoinder.harness.remote.reports import merge_report


def _result(error: str | None) -> RemoteCallResult:
    return RemoteCallResult("c", [], None, 0.0, 0.0, error=error, caller=SimulatedCaller([]))


def test_an_agent_hang_up_in_the_report_is_an_outcome():
    tr = {"turn_id": 2, "target": "+15550199", "reason": "caller asked for a person", "confirmed": True,
          "action": "webhook", "status": 204}
    res = _result("the target hung up mid-call (close code 1000: the agent transferred the call)")
    merge_report(res, {"caller_origin_ms": 0.0, "hangup": "transfer", "transfer": tr}, 0.0, keyed=True)
    assert res.error is None and res.hangup == "transfer" and res.transfer == tr


def test_an_abnormal_close_stays_a_failure():
    res = _result("the target hung up mid-call (close code 1011: server error)")
    merge_report(res, {"caller_origin_ms": 0.0, "hangup": "end_call"}, 0.0, keyed=True)
    assert res.error.startswith("the target hung up mid-call (close code 1011")
    plain = _result("the target hung up mid-call (close code 1000)")
    merge_report(plain, {"caller_origin_ms": 0.0, "hangup": None}, 0.0, keyed=True)
    assert plain.error and plain.hangup is None
