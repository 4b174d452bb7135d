"""The defaults the estimate resolves equal SGLang 0.5.23's own, as its argument code printed them
(tests/estimate/oracle_defaults_0.5.23.json, recorded with ../shared/tools/sglang-reference)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.engines.sglang.sizing import estimate_role

from .helpers import role

ORACLE = json.loads((Path(__file__).parent / "oracle_defaults_0.5.23.json").read_text())["cases"]


@pytest.mark.parametrize("case", ORACLE, ids=lambda c: f"{c['model']}-{c['gpu']}-{c['args']}")
def test_resolved_defaults_match_sglangs_own_resolution(case):
    est = estimate_role(role(case["model"], gpu=case["gpu"], **case["args"]), offline=True)
    got = est.details
    assert got["mem_fraction_static"] == pytest.approx(case["mem_fraction_static"], abs=5e-5)
    assert (got["chunked_prefill_size"], got["page_size"], got["attention_backend"], got["cuda_graph_max_bs_decode"]) == (
        case["chunked_prefill_size"], case["page_size"], case["attention_backend"], case["cuda_graph_max_bs_decode"]
    )
