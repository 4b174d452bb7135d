"""The planner offers only settings the declared SGLang release accepts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvcheck.plan import plan_role
from tests.plan.helpers import role, write_config


@pytest.mark.parametrize(
    ("version", "gpu", "offered"),
    [
        # 0.4.0-0.4.2's --kv-cache-dtype: auto, fp8_e5m2
        ("0.4.0", "H100", [("bf16", True), ("fp8_e5m2", False)]),
        ("0.4.3", "H100", [("bf16", True), ("fp8_e4m3", False)]),
        # no FP4 KV before it was a choice (0.5.13 has fp4_e2m1, not nvfp4 / fp4_mx_block16)
        ("0.5.13", "B200", [("bf16", True), ("fp8_e4m3", False)]),
        ("0.5.23", "B200", [("bf16", True), ("fp8_e4m3", False), ("nvfp4", False), ("fp4_mx_block16", False)]),
    ],
)
def test_kv_dtype_options_follow_the_release(tmp_path, version, gpu, offered) -> None:
    target = replace(role(write_config(tmp_path), gpu=gpu, min_headroom=4.0), engine_version=version)
    assert [(o.value, o.current) for o in plan_role(target).kv_dtype_options] == offered
