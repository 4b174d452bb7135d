"""The probe aims at a decode front door's real bound: its pool less the tokens it reserves per
request, below the max_req_input_len it states (docs/sglang-internals.md, Decode reservation)."""

from __future__ import annotations

from kvcheck.engines.base import ServerInfo
from kvcheck.probe.limits import limits_from_server_info
from kvcheck.probe.options import ProbeOptions


def info(mode: str | None, pool: int, **args) -> ServerInfo:
    return ServerInfo(
        url="http://decode:30000", version="0.5.23", max_total_num_tokens=pool,
        max_req_input_len=min(4095, pool - 1) - 5, dp_token_capacities=(pool,), swa_token_capacities=(),
        context_length_arg=4096, served_context_len=4096,
        resolved_args={"disaggregation_mode": mode, **args}, launch_command=None, endpoint="/server_info",
    )


def test_a_decode_front_door_is_probed_at_pool_less_reserved() -> None:
    limits = limits_from_server_info(info("decode", 2048), ProbeOptions(url="http://decode:30000"))
    assert (limits.max_req_input_len, limits.bound_source) == (
        1537, "/server_info: the decode role's pool (2048) less its reservation")
    smaller = limits_from_server_info(info("decode", 2048, num_reserved_decode_tokens=16),
                                      ProbeOptions(url="http://decode:30000"))
    assert smaller.max_req_input_len == 2033


def test_a_unified_front_door_keeps_its_own_figure() -> None:
    limits = limits_from_server_info(info(None, 2048), ProbeOptions(url="http://decode:30000"))
    assert (limits.max_req_input_len, limits.bound_source) == (2042, "/server_info max_req_input_len")
