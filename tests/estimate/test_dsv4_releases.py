"""DeepSeek-V4's pools by SGLang release, and the KV-cache dtypes the engine stops on.

Figures are the arithmetic of each release's own DSV4PoolConfigurator (model_executor/pool_configurator.py
of the wheel), for DeepSeek-V4-Flash: 43 decoder layers; compress_ratios has 44 entries (the last, a 0,
is the MTP layer's), 21 of ratio 4 and 20 of ratio 128 in both the 43 and the 44.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from kvcheck.engines.sglang.sizing import dsv4, estimate_role
from kvcheck.engines.sglang.sizing.refusals import EngineRefusal
from kvcheck.errors import EstimateError
from kvcheck.model import EstimateInputs

from .helpers import model_config, role

FLASH = "deepseek-ai--DeepSeek-V4-Flash"
LOG = Path(__file__).resolve().parents[1] / "data" / "logs" / "sglang-dsv4-flash-base-8xH20-tp8-mfs060-fixture.log"
LOGGED_POOL = 1_317_632  # max_total_num_tokens of that log
LOGGED_WEIGHTS_GIB = 93.61 - 57.01  # Load weight begin avail 93.61 GB, Memory profiling available 57.01 GB

# The per-token terms every pre-0.5.21 layout shares (DSV4PoolConfigurator._get_bytes_per_full_token):
KV = 448 + 64 * 2 + 8  # kv_bytes: fp8 nope + bf16 rope + 7 scales + 1 pad = 584, unpadded
IDX = 128 + 128 // 128 * 4  # indexer_bytes: fp8 index_head_dim + one fp32 scale per 128 = 132
C4_STATE = 2 * 2 * 512 * 4  # c4_state_bytes: 2 x 2 x attn_head_dim (512) x fp32
C4_IDX_STATE = 2 * 2 * 128 * 4  # c4_indexer_state_bytes
C128_STATE = 2 * 512 * 4  # c128_state_bytes (offline): 2 x attn_head_dim x fp32
WINDOW = 128  # swa_page_size = config.window_size (sliding_window)


def _flash_ratios() -> list[int]:
    return json.loads(model_config(FLASH).read_text())["compress_ratios"]


def _per_slot_bytes(layers: int, l4: int, l128: int, *, c128_per_slot: bool, ring4: int = 8, ring128: int = 128,
                    swa: float = 0.1) -> float:
    """0.5.12's formula, term by term (ring sizes: get_compress_state_ring_size(ratio, is_speculative))."""
    full = (swa * KV * layers + KV / 4 * l4 + KV / 128 * l128 + IDX / 4 * l4
            + swa * ring4 / WINDOW * C4_STATE * l4 + swa * ring4 / WINDOW * C4_IDX_STATE * l4)
    if c128_per_slot:
        full += swa * ring128 / WINDOW * C128_STATE * l128
    return full


def _plan(layout: str, stage: range, **kw) -> dsv4.Dsv4Plan:
    args = dict(
        compress_ratios=tuple(_flash_ratios()), stage=stage, head_dim=512, index_head_dim=128, sliding_window=128,
        page_size=256, max_running_requests=256, attn_dp=1, role=None, chunked_prefill_size=8192,
        swa_ratio_arg=None, cap_mode_default=False, draft_tokens=0, speculative=False, radix_cache=True,
        decode_extra_slots=0, layout=layout,
    )
    args.update(kw)
    return dsv4.plan(**args)


def test_flash_layer_counts():
    ratios = _flash_ratios()
    assert len(ratios) == 44 and ratios[-3:] == [128, 4, 0]
    assert (ratios.count(4), ratios.count(128), ratios.count(0)) == (21, 20, 3)  # all 44 entries
    assert (ratios[:43].count(4), ratios[:43].count(128)) == (21, 20)  # the 43 decoder layers


def test_0_5_12_prices_every_entry_with_both_states_per_swa_slot():
    # 0.5.12: self.compression_ratios = cfg.compress_ratios (all 44), c128 state per SWA slot
    plan = _plan(dsv4.LAYOUT_0_5_12, range(44))
    expected = _per_slot_bytes(44, 21, 20, c128_per_slot=True)
    assert plan.bytes_per_full_token == pytest.approx(expected, abs=1e-9)
    # = 0.1*584*44 + 584/4*21 + 584/128*20 + 132/4*21 + 0.1*8/128*(8192 + 2048)*21 + 0.1*128/128*4096*20
    #   = 2569.6 + 3066 + 91.25 + 693 + 134.4 + 8192 = 15955.85, the figure the log prints
    assert round(plan.bytes_per_full_token, 2) == 15955.85
    assert "bytes_per_full_token=15955.85" in LOG.read_text()
    assert plan.fixed_bytes == 0


def test_0_5_13_slices_the_stage():
    # 0.5.13: compress_ratios[start_layer:end_layer] = the 43 decoder layers: one SWA layer fewer, 0.1 x 584 B less
    plan = _plan(dsv4.LAYOUT_0_5_13, range(43))
    assert plan.bytes_per_full_token == pytest.approx(_per_slot_bytes(43, 21, 20, c128_per_slot=True), abs=1e-9)
    assert round(plan.bytes_per_full_token, 2) == 15897.45  # 15955.85 - 58.4


def test_0_5_15_makes_the_c128_state_request_scoped():
    plan = _plan(dsv4.LAYOUT_0_5_15, range(43))
    assert plan.bytes_per_full_token == pytest.approx(_per_slot_bytes(43, 21, 20, c128_per_slot=False), abs=1e-9)
    assert round(plan.bytes_per_full_token, 2) == 7705.45  # 15897.45 - 0.1 x 4096 x 20
    # _get_c128_state_fixed_bytes(256): slots 257, rows 257*128 + 128 + 1 = 33025 -> 33152 (x128), x 2*512*4 x 20
    assert plan.fixed_bytes == 33152 * 2 * 512 * 4 * 20


def test_old_layouts_inflate_for_the_draft_and_use_the_speculative_rings():
    plain = _plan(dsv4.LAYOUT_0_5_15, range(43))
    mtp = _plan(dsv4.LAYOUT_0_5_15, range(43), speculative=True, draft_tokens=4)
    # rings 16 / 256 (is_speculative), then x (43 + 1) / 43
    expected = _per_slot_bytes(43, 21, 20, c128_per_slot=False, ring4=16, ring128=256) * 44 / 43
    assert mtp.bytes_per_full_token == pytest.approx(expected, abs=1e-9)
    # 257 slots x 256-row rings + 256 + 1 = 66049 rows -> 66176 (a multiple of 128)
    assert mtp.fixed_bytes == 66176 * 2 * 512 * 4 * 20
    assert plain.bytes_per_full_token < mtp.bytes_per_full_token


@pytest.mark.parametrize(("version", "layout", "flagged"), [
    ("0.5.12", dsv4.LAYOUT_0_5_12, False),
    ("0.5.12.post1", dsv4.LAYOUT_0_5_12, False),
    ("0.5.13", dsv4.LAYOUT_0_5_13, False),
    ("0.5.14", dsv4.LAYOUT_0_5_13, False),
    ("0.5.15", dsv4.LAYOUT_0_5_15, False),
    ("0.5.20", dsv4.LAYOUT_0_5_15, False),
    ("0.5.21", dsv4.LAYOUT_0_5_21, False),
    ("0.5.23+cu129", dsv4.LAYOUT_0_5_21, False),
    (None, dsv4.LAYOUT_0_5_21, True),
    ("0.5.21.dev3", dsv4.LAYOUT_0_5_21, True),
    ("0.5.24", dsv4.LAYOUT_0_5_21, True),
])
def test_layout_by_release(version, layout, flagged):
    got, why = dsv4.layout_for(version)
    assert got == layout
    assert (why is not None) == flagged


def test_a_release_before_v4_cannot_estimate_it():
    with pytest.raises(EstimateError, match=r"SGLang 0\.5\.11 has no DeepSeek-V4 support \(DeepseekV4ForCausalLM "
                                            r"first appears in 0\.5\.12\)"):
        estimate_role(replace(role(FLASH, gpu="B200", tp_size=8), engine_version="0.5.11"), offline=True)


def _fixture_role(version: str | None, **kw):
    # the log's deployment: H20 TP8, mem-fraction-static 0.60, fp8 KV, radix cache off, mrr 256; DeepSeek-V4-Flash-Base
    # has the Flash pool shapes but no FP4 experts, so its weights are the log's (the pool layout is what is scored)
    target = role(FLASH, gpu="H20", tp_size=8, mem_fraction_static=0.6, kv_cache_dtype="fp8_e4m3",
                  disable_radix_cache=True, max_running_requests=256, chunked_prefill_size=8192,
                  cuda_graph_max_bs=320, page_size=256, window=1_048_576,
                  estimate=EstimateInputs(weights_gib_per_gpu=LOGGED_WEIGHTS_GIB), **kw)
    return replace(target, engine_version=version)


def test_the_0_5_12_layout_reproduces_the_logged_pool():
    est = estimate_role(_fixture_role("0.5.12"), offline=True)
    assert round(est.kv_bytes_per_token, 2) == 15955.85
    assert est.pool_tokens == 1_316_352  # -0.10 % of the logged 1,317,632
    low, high = est.pool_range
    assert low <= LOGGED_POOL <= high
    assert est.findings == ()
    # 0.5.23's layout on the same budget: 7086.75 B per full token, twice the pool
    newest = estimate_role(_fixture_role("0.5.23"), offline=True)
    assert round(newest.kv_bytes_per_token, 2) == 7086.75
    assert newest.pool_tokens == 2_580_992
    assert not newest.pool_range[0] <= LOGGED_POOL <= newest.pool_range[1]


def test_an_undeclared_release_is_flagged_with_a_range_that_holds_the_log():
    est = estimate_role(_fixture_role(None), offline=True)
    assert est.pool_tokens == 2_580_992  # the newest layout's figure ...
    low, high = est.pool_range
    # ... inside a range from the pre-0.5.12 development layout's low (ratio 0.8, rings 16/256: issue 25118's
    # ROCm image) to 0.5.23's high; 0.5.12's low alone would be 1,293,568
    assert (low, high) == (116_480, 2_632_448)
    assert low <= LOGGED_POOL <= high
    [kv108] = est.findings
    assert kv108.rule == "KV108" and kv108.severity == "warning"
    assert kv108.message.startswith("engine.version is not stated, and DeepSeek-V4's pool layout changed")
    assert "range 116,480-2,632,448 spans every layout" in kv108.message


def test_0_5_12_prices_every_entry_on_every_pp_stage():
    est = estimate_role(replace(role(FLASH, gpu="B200", tp_size=4, pp_size=2), engine_version="0.5.12"), offline=True)
    assert est.details["kv_cell_parts"]["layers"] == 44
    assert est.details["kv_cell_parts"]["compressed_layers_by_ratio"] == {4: 21, 128: 20}
    sliced = estimate_role(replace(role(FLASH, gpu="B200", tp_size=4, pp_size=2), engine_version="0.5.13"),
                           offline=True)
    assert sliced.details["kv_cell_parts"]["layers"] < 44


@pytest.mark.parametrize(("version", "ratio"), [("0.5.15", 0.1), ("0.5.19", 0.1), ("0.5.20", 0.8)])
def test_a_given_0_8_was_the_default_to_the_v4_hook_before_0_5_20(version, ratio):
    # 0.5.12-0.5.19: `if swa_full_tokens_ratio == ServerArgs.swa_full_tokens_ratio (0.8): 0.1`;
    # 0.5.20: `if cfg.swa_full_tokens_ratio is None: 0.1`
    est = estimate_role(replace(role(FLASH, gpu="B200", tp_size=8, swa_full_tokens_ratio=0.8), engine_version=version),
                        offline=True)
    assert est.details["swa_full_tokens_ratio"] == ratio


# --- KV-cache dtypes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "dtype", "message"), [
    ("0.5.23", "bf16", "SGLang's DeepSeek-V4 hook asserts the KV-cache dtype is one of [fp8_e4m3, bfloat16] and "
                       "stops with 'bf16 is not supported for DeepseekV4ForCausalLM'"),
    ("0.5.23", "bfloat16", "DeepSeekV4SingleKVPool.create_buffer asserts its store dtype is torch.uint8"),
    ("0.5.14", "bfloat16", "DeepSeekV4SingleKVPool.create_buffer asserts its store dtype is torch.uint8"),
    ("0.5.13", "bfloat16", "asserts the KV-cache dtype is one of [fp8_e4m3] and stops with 'bfloat16 is not"),
    ("0.5.23", "fp8_e5m2", "stops with 'fp8_e5m2 is not supported for DeepseekV4ForCausalLM'"),
    (None, "bf16", "stops with 'bf16 is not supported for DeepseekV4ForCausalLM'"),
])
def test_kv_dtypes_sglang_stops_on_are_refused(version, dtype, message):
    # Checked with the reference oracle (/work/shared/tools/sglang-reference, 0.5.23, V4-Flash on B200 TP8):
    # bf16 -> "AssertionError: bf16 is not supported for DeepseekV4ForCausalLM", fp8_e5m2 likewise; bfloat16
    # resolves (kv_cache_dtype bfloat16), and stops later, at the pool's uint8 store assertion, which argument
    # resolution does not reach.
    target = replace(role(FLASH, gpu="B200", tp_size=8, kv_cache_dtype=dtype), engine_version=version)
    with pytest.raises(EngineRefusal, match=r"--kv-cache-dtype " + dtype + r" cannot serve DeepseekV4ForCausalLM") as e:
        estimate_role(target, offline=True)
    assert message in e.value.message


@pytest.mark.parametrize("dtype", [None, "auto", "fp8_e4m3"])
def test_fp8_is_priced_as_the_packed_v4_row(dtype):
    args = {} if dtype is None else {"kv_cache_dtype": dtype}
    est = estimate_role(role(FLASH, gpu="B200", tp_size=8, **args), offline=True)
    assert est.kv_dtype == "fp8_e4m3"
    # 0.5.23: 585 B per padded row x 43 layers + 8-row c4 rings / 256-token page x 10240 B x 21 layers = 31,875
    assert est.details["kv_cell_parts"]["swa_bytes_per_token"] == 31875.0


def test_the_rocm_fp4_indexer_is_not_priced():
    with pytest.raises(EstimateError, match="FP4 indexer pool on ROCm"):
        estimate_role(role(FLASH, gpu="MI355X", tp_size=8, enable_deepseek_v4_fp4_indexer=True), offline=True)
    # on CUDA the switch keeps the FP8 estimate (pool_configurator: "The NVIDIA FP4 path keeps the FP8 estimate")
    cuda = estimate_role(role(FLASH, gpu="B200", tp_size=8, enable_deepseek_v4_fp4_indexer=True), offline=True)
    assert cuda.kv_bytes_per_token == estimate_role(role(FLASH, gpu="B200", tp_size=8), offline=True).kv_bytes_per_token


def test_an_npu_v4_pool_is_not_priced():
    with pytest.raises(EstimateError, match="DSV4NPUTokenToKVPool"):
        estimate_role(role(FLASH, gpu="Ascend-910B", tp_size=8), offline=True)


# --- end to end -----------------------------------------------------------------------------------------------


def _manifest(tmp_path: Path, version: str, args: str) -> Path:
    (tmp_path / "config.json").write_text(model_config(FLASH).read_text())
    engine = f'engine:\n  version: "{version}"\n'
    path = tmp_path / "manifest.yaml"
    path.write_text(textwrap.dedent("""\
        name: dsv4 by release
        context_length: 1048576
        model:
          path: deepseek-ai/DeepSeek-V4-Flash-Base
          config: config.json
        gpu: H20
        estimate:
          weights_gib_per_gpu: 36.6
        """) + engine + f"args: {{{args}}}\nroles:\n  server: {{}}\n")
    return path


FIXTURE_ARGS = ("tp-size: 8, mem-fraction-static: 0.6, kv-cache-dtype: fp8_e4m3, disable-radix-cache: true, "
                "max-running-requests: 256, chunked-prefill-size: 8192, page-size: 256")


def test_cli_bf16_on_v4_is_the_engines_refusal(tmp_path, kvcheck):
    manifest = _manifest(tmp_path, "0.5.23", "tp-size: 8, kv-cache-dtype: bf16")
    result = kvcheck("verify", str(manifest), "--mode", "estimate")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"kvcheck: error: {manifest}:")
    assert ("role server: --kv-cache-dtype bf16 cannot serve DeepseekV4ForCausalLM on a GPU: SGLang's DeepSeek-V4 "
            "hook asserts the KV-cache dtype is one of [fp8_e4m3, bfloat16]") in first


def test_cli_0_5_12_prices_the_logged_pool(tmp_path, kvcheck):
    manifest = _manifest(tmp_path, "0.5.12", FIXTURE_ARGS)
    result = kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    report = json.loads(result.stdout)
    role_ = report["roles"][0]
    assert role_["pool_tokens"] == 1_316_352
    assert role_["details"]["kv_cell_parts"]["layout"] == dsv4.LAYOUTS[dsv4.LAYOUT_0_5_12]
    assert result.exit_code == 0, result.stderr  # 1,316,352 tokens hold the 1,048,576 window
    assert report["findings"] == []


def test_cli_development_build_raises_kv108(tmp_path, kvcheck):
    # a manifest must state engine.version; a release candidate is a build whose layout kvcheck cannot place
    manifest = _manifest(tmp_path, "0.5.22rc1", FIXTURE_ARGS)
    result = kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    report = json.loads(result.stdout)
    [kv108] = [f for f in report["findings"] if f["rule"] == "KV108"]
    assert kv108["severity"] == "warning" and kv108["role"] == "server"
    assert report["roles"][0]["details"]["pool_range"] == [1_293_568, 2_632_448]
    assert result.exit_code == 0, result.stderr  # a warning: the window lies below the range's low end
