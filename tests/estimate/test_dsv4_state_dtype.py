"""DeepSeek-V4's compress states as SGLANG_DSV4_COMPRESS_STATE_DTYPE stores them, by release.

From 0.5.14 SGLang reads the variable (pool_configurator._get_dsv4_compress_state_dtype_sizes): float32/fp32
(the default) prices the c4 and c128 compress states at 4 bytes an element, bfloat16/bf16 at 2, anything else
stops the server with a ValueError; 0.5.14-0.5.15 also stop on bf16 with SGLANG_OPT_USE_ONLINE_COMPRESS=1.
Before 0.5.14 no release reads it: the states are float32 whatever it says.

The real log checked here (tests/data/logs/sglang-dsv4-flash-8xH100-tp8-bf16state-pqlet.log) is a DeepSeek-V4-Flash
on 8 GPUs with the variable at bf16, built from source on 2026-09-03 (the 0.5.19 wheel is dated 2026-09-04).
Nothing in the estimate was fit to it.
"""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from kvcheck.engines.sglang.sizing import dsv4, estimate_role
from kvcheck.engines.sglang.sizing.environ import effective_env
from kvcheck.engines.sglang.sizing.refusals import EngineRefusal
from kvcheck.errors import EstimateError

from .helpers import model_config, role
from .test_dsv4_releases import _flash_ratios

FLASH = "deepseek-ai--DeepSeek-V4-Flash"
BF16 = {dsv4.STATE_DTYPE_ENV: "bf16"}
# the log's sizing lines (every rank prints the same): GB there is GiB (bytes / 2**30)
LOGGED_BYTES_PER_FULL_TOKEN = 7033.45
LOGGED_AVAILABLE_GIB = 45.26
LOGGED_C128_FIXED_GIB = 0.33
LOGGED_FULL = 6_859_008  # full_token = max_total_num_tokens
LOGGED_SWA = 685_824


def _pqlet(version: str | None, env: dict[str, str] | None = None, **kw):
    # sglang_serve.sh: --tp 8 --kv-cache-dtype fp8_e4m3 --mem-fraction-static 0.85 --context-length 1048576
    # --chunked-prefill-size 8192 --max-running-requests 64; the GPU is not printed (an 80 GB Hopper inferred)
    args = dict(tp_size=8, kv_cache_dtype="fp8_e4m3", mem_fraction_static=0.85, context_length=1_048_576,
                chunked_prefill_size=8192, max_running_requests=64)
    args.update(kw)
    target = role(FLASH, gpu="H100", window=1_048_576, env=BF16 if env is None else env, **args)
    return replace(target, engine_version=version)


def test_the_logged_cell_is_the_0_5_15_to_0_5_20_layout_with_bf16_states():
    est = estimate_role(_pqlet("0.5.19"), offline=True)
    parts = est.details["kv_cell_parts"]
    assert round(est.kv_bytes_per_token, 2) == LOGGED_BYTES_PER_FULL_TOKEN
    assert parts["compress_state_bytes_per_element"] == 2
    # (65 request slots x 128 + 129 rows, padded to 8,576) x 2 x 512 x 2 B x 20 layers of ratio 128
    assert parts["c128_state_fixed_bytes"] == 8576 * 2 * 512 * 2 * 20
    assert round(parts["c128_state_fixed_bytes"] / 2**30, 2) == LOGGED_C128_FIXED_GIB
    assert any("compress states at 2 bytes per element (SGLANG_DSV4_COMPRESS_STATE_DTYPE=bf16)" in a
               for a in est.details["assumptions"])
    # float32 states (the default, and what kvcheck priced before, as KV305) would be 7705.45 B and 0.65 GiB
    fp32 = estimate_role(_pqlet("0.5.19", env={}), offline=True)
    assert round(fp32.kv_bytes_per_token, 2) == 7705.45
    assert fp32.details["kv_cell_parts"]["c128_state_fixed_bytes"] == 2 * parts["c128_state_fixed_bytes"]
    # 0.5.21's page-padded layout is not this build's: 6750.75 B
    assert round(estimate_role(_pqlet("0.5.23"), offline=True).kv_bytes_per_token, 2) == 6750.75


def test_the_logged_pool_follows_from_the_logged_budget():
    plan = dsv4.plan(
        compress_ratios=tuple(_flash_ratios()), stage=range(43), head_dim=512, index_head_dim=128, sliding_window=128,
        page_size=256, max_running_requests=64, attn_dp=1, role=None, chunked_prefill_size=8192, swa_ratio_arg=None,
        cap_mode_default=False, draft_tokens=0, speculative=False, radix_cache=True, decode_extra_slots=0,
        layout=dsv4.LAYOUT_0_5_15, state_bytes=dsv4.compress_state_bytes(BF16, reads_env=True),
    )
    # available_bytes is printed to 0.01 GiB: the logged full_token lies within what that rounding allows
    low = dsv4.full_tokens(plan, (LOGGED_AVAILABLE_GIB - 0.005) * 2**30, 256)
    high = dsv4.full_tokens(plan, (LOGGED_AVAILABLE_GIB + 0.005) * 2**30, 256)
    assert low <= LOGGED_FULL <= high
    assert dsv4.swa_tokens(plan, LOGGED_FULL, 256) == LOGGED_SWA
    # c4_state_pool_size = swa // page x ring 8 ... as 0.5.15-0.5.20 print it: 42,864
    assert LOGGED_SWA // 256 * 16 == 42_864


def test_the_pool_on_an_h100_is_within_one_and_a_half_percent_of_the_log():
    # the GPU is inferred, not printed: an 80 GB H100 (81,559 MiB) is what the author's repository names; 0.5.19 keeps
    # FP8 wo_a on SM90 only when SGLANG_OPT_FP8_WO_A_GEMM is set (arg_groups/serving_hook.py), so it is bf16 here
    est = estimate_role(_pqlet("0.5.19"), offline=True)
    assert est.pool_tokens == 6_774_528
    assert abs(est.pool_tokens - LOGGED_FULL) / LOGGED_FULL < 0.015  # -1.23 % (-0.86 % with wo_a in FP8)
    low, high = est.pool_range
    assert low <= LOGGED_FULL <= high
    assert est.findings == ()


def test_a_release_before_0_5_14_does_not_read_the_variable():
    est = estimate_role(_pqlet("0.5.13"), offline=True)
    assert est.details["kv_cell_parts"]["compress_state_bytes_per_element"] == 4
    assert any("SGLANG_DSV4_COMPRESS_STATE_DTYPE=bf16, which this release does not read: float32" in a
               for a in est.details["assumptions"])
    # nor does a value 0.5.14 would stop on stop 0.5.13
    odd = estimate_role(_pqlet("0.5.13", env={dsv4.STATE_DTYPE_ENV: "fp16"}), offline=True)
    assert odd.kv_bytes_per_token == est.kv_bytes_per_token


@pytest.mark.parametrize(("value", "size"), [("bf16", 2), (" BFloat16 ", 2), ("fp32", 4), ("FLOAT32", 4)])
def test_every_name_sglang_accepts_is_priced_as_stored(value, size):
    est = estimate_role(_pqlet("0.5.23", env={dsv4.STATE_DTYPE_ENV: value}), offline=True)
    assert est.details["kv_cell_parts"]["compress_state_bytes_per_element"] == size


@pytest.mark.parametrize("version", ["0.5.14", "0.5.23", None])
def test_a_name_sglang_rejects_is_its_refusal(version):
    with pytest.raises(EngineRefusal) as e:
        estimate_role(_pqlet(version, env={dsv4.STATE_DTYPE_ENV: "fp16"}), offline=True)
    assert ("SGLANG_DSV4_COMPRESS_STATE_DTYPE=fp16 stops SGLang while it sizes the DeepSeek-V4 pools: "
            "'Unsupported SGLANG_DSV4_COMPRESS_STATE_DTYPE='fp16'. Expected one of: float32, fp32, bfloat16, bf16.'"
            ) in e.value.message


def test_bf16_with_online_compress_stops_0_5_15_and_is_not_priced_later():
    env = {**BF16, "SGLANG_OPT_USE_ONLINE_COMPRESS": "1"}
    with pytest.raises(EngineRefusal, match="online c128 state must stay float32"):
        estimate_role(_pqlet("0.5.15", env=env), offline=True)
    # 0.5.16 starts; the online c128 state is a layout the estimate does not price (KV305, never a guess)
    with pytest.raises(EstimateError, match="SGLANG_OPT_USE_ONLINE_COMPRESS=1 selects a DeepSeek-V4 pool layout"):
        estimate_role(_pqlet("0.5.16", env=env), offline=True)


# --- the environment as SGLang reads it (sglang/srt/environ.py) -----------------------------------------------

LEGACY = "SGL_DSV4_COMPRESS_STATE_DTYPE"


@pytest.mark.parametrize("version", ["0.5.14", "0.5.19", "0.5.23"])
def test_a_legacy_sgl_name_is_read_as_sglang_reads_it(version):
    # environ.py copies every SGL_X to SGLANG_X at import (0.5.3 on): SGL_ names are refused and priced the same
    with pytest.raises(EngineRefusal, match="SGLANG_DSV4_COMPRESS_STATE_DTYPE=fp16 stops SGLang"):
        estimate_role(_pqlet(version, env={LEGACY: "fp16"}), offline=True)
    legacy = estimate_role(_pqlet(version, env={LEGACY: "bf16"}), offline=True)
    assert legacy.details["kv_cell_parts"]["compress_state_bytes_per_element"] == 2
    assert legacy.pool_tokens == estimate_role(_pqlet(version), offline=True).pool_tokens


@pytest.mark.parametrize("version", ["0.5.14", "0.5.19"])
def test_the_legacy_name_overrides_the_new_one_as_sglang_copies_it(version):
    # SGLANG_...=bf16 with SGL_...=fp32: SGLang overwrites the bf16 with fp32, so the pool is the float32 one
    both = estimate_role(_pqlet(version, env={**BF16, LEGACY: "fp32"}), offline=True)
    fp32 = estimate_role(_pqlet(version, env={}), offline=True)
    assert both.details["kv_cell_parts"]["compress_state_bytes_per_element"] == 4
    assert both.pool_tokens == fp32.pool_tokens
    assert both.pool_tokens < estimate_role(_pqlet(version), offline=True).pool_tokens


def test_a_legacy_online_compress_switch_is_read_too():
    with pytest.raises(EngineRefusal, match="online c128 state must stay float32"):
        estimate_role(_pqlet("0.5.14", env={**BF16, "SGL_OPT_USE_ONLINE_COMPRESS": "1"}), offline=True)


def test_no_rename_before_0_5_3():
    env = {"SGL_X": "1", "SGLANG_X": "0"}
    assert effective_env(env, "0.5.2") == env
    assert effective_env(env, "0.5.3") == {"SGL_X": "1", "SGLANG_X": "1"}
    assert effective_env(env, None)["SGLANG_X"] == "1"


@pytest.mark.parametrize("value", [" 1", "off", "no", "n", "0", "FALSE", "maybe"])
def test_online_compress_off_as_envbool_reads_it(value):
    # EnvBool lower-cases only: " 1" is invalid (the default, off), as are "off" and "maybe"; "no" and "n" are off.
    # 0.5.14 starts with bf16 states then, so they are priced, never refused and never KV305
    est = estimate_role(_pqlet("0.5.14", env={**BF16, "SGLANG_OPT_USE_ONLINE_COMPRESS": value}), offline=True)
    assert est.details["kv_cell_parts"]["compress_state_bytes_per_element"] == 2


@pytest.mark.parametrize("value", ["fp16", ""])
def test_other_models_do_not_read_the_v4_variable(value):
    # only DeepSeek-V4's pool configurator reads it: a Qwen3 role with any value is priced as without it
    qwen = role("Qwen--Qwen3-32B", gpu="H100", window=32768, env={dsv4.STATE_DTYPE_ENV: value}, tp_size=1)
    plain = role("Qwen--Qwen3-32B", gpu="H100", window=32768, tp_size=1)
    for version in ("0.5.19", "0.5.23"):
        assert (estimate_role(replace(qwen, engine_version=version), offline=True).pool_tokens
                == estimate_role(replace(plain, engine_version=version), offline=True).pool_tokens > 0)


@pytest.mark.parametrize("version", ["0.5.14rc1", "0.5.14.dev0", "0.5.16rc0", "0.5.24", None])
def test_a_build_kvcheck_cannot_place_refuses_a_name_sglang_rejects(version):
    # 0.5.14rc1 sorts before 0.5.14, but such a build may read the variable: fp16 is its refusal, not float32
    with pytest.raises(EngineRefusal, match="SGLANG_DSV4_COMPRESS_STATE_DTYPE=fp16 stops SGLang"):
        estimate_role(_pqlet(version, env={dsv4.STATE_DTYPE_ENV: "fp16"}), offline=True)


def test_a_build_kvcheck_cannot_place_spans_float32_states_too():
    # a release candidate may predate the variable's reading (KV108): the range carries both element sizes
    bf16 = estimate_role(_pqlet("0.5.22rc1"), offline=True)
    fp32 = estimate_role(_pqlet("0.5.22rc1", env={}), offline=True)
    assert [f.rule for f in bf16.findings] == ["KV108"]
    assert bf16.pool_range[0] == fp32.pool_range[0]  # 0.5.12's float32 layout is the low end of both
    assert bf16.pool_range[1] > fp32.pool_range[1]  # 0.5.21's bf16 layout is the high end
    assert bf16.pool_range[0] <= LOGGED_FULL <= bf16.pool_range[1]


# --- end to end -----------------------------------------------------------------------------------------------


def _manifest(tmp_path: Path, state: str, name: str = dsv4.STATE_DTYPE_ENV) -> Path:
    (tmp_path / "config.json").write_text(model_config(FLASH).read_text())
    path = tmp_path / "manifest.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: dsv4 bf16 compress state
        context_length: 1048576
        model:
          path: deepseek-ai/DeepSeek-V4-Flash
          config: config.json
        gpu: H100
        engine:
          version: "0.5.19"
          env:
            {name}: {state}
        args: {{tp-size: 8, kv-cache-dtype: fp8_e4m3, mem-fraction-static: 0.85, context-length: 1048576,
               chunked-prefill-size: 8192, max-running-requests: 64}}
        roles:
          server: {{}}
        """))
    return path


def test_cli_prices_bf16_states(tmp_path, kvcheck):
    result = kvcheck("verify", str(_manifest(tmp_path, "bf16")), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 0, result.stderr
    role_ = json.loads(result.stdout)["roles"][0]
    assert role_["pool_tokens"] == 6_774_528
    assert role_["details"]["kv_cell_parts"]["compress_state_bytes_per_element"] == 2
    assert math.isclose(role_["details"]["kv_bytes_per_token"], LOGGED_BYTES_PER_FULL_TOKEN, abs_tol=0.005)


def test_cli_a_rejected_name_is_exit_2(tmp_path, kvcheck):
    manifest = _manifest(tmp_path, "fp16")
    result = kvcheck("verify", str(manifest), "--mode", "estimate")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"kvcheck: error: {manifest}:")
    assert "role server: SGLANG_DSV4_COMPRESS_STATE_DTYPE=fp16 stops SGLang" in first


def test_cli_a_rejected_legacy_name_is_exit_2(tmp_path, kvcheck):
    # the SGL_ spelling reaches the server as SGLANG_DSV4_COMPRESS_STATE_DTYPE (environ.py): the same refusal
    manifest = _manifest(tmp_path, "fp16", name=LEGACY)
    result = kvcheck("verify", str(manifest), "--mode", "estimate")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "SGLANG_DSV4_COMPRESS_STATE_DTYPE=fp16 stops SGLang" in result.stderr.splitlines()[0]
