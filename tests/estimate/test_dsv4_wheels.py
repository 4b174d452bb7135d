"""kvcheck's DeepSeek-V4 layouts against the released code itself: each release's
DSV4PoolConfigurator methods, taken from its wheel and run on the attributes its __init__ sets.

The methods are pure arithmetic over those attributes, so running them needs no GPU and no import of
SGLang: the function is compiled from the wheel's source with `envs` (every switch off: no online c128)
and the compress-state dtype sizes stubbed (fp32, the default, or bf16 as SGLANG_DSV4_COMPRESS_STATE_DTYPE=bf16
gives them from 0.5.14; a release before reads no such variable and its method never calls the stub). Wheels are read from
$KVCHECK_SGLANG_WHEELS or /tmp/tf-wheels; a test skips when its release's wheel is absent.
"""

from __future__ import annotations

import ast
import os
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest

from kvcheck.engines.sglang.sizing import dsv4
from kvcheck.engines.sglang.sizing import releases as rel

from .test_dsv4_releases import _flash_ratios

WHEELS = Path(os.environ.get("KVCHECK_SGLANG_WHEELS", "/tmp/tf-wheels"))


class _Off:
    def get(self) -> bool:
        return False


class _Envs:
    def __getattr__(self, name: str) -> _Off:
        return _Off()


def _method(version: str, name: str, state_bytes: int = 4) -> Any:
    wheels = sorted(WHEELS.glob(f"sglang-{version}-*.whl"))
    if not wheels:
        pytest.skip(f"sglang {version} wheel not in {WHEELS}")
    source = zipfile.ZipFile(wheels[0]).read("sglang/srt/model_executor/pool_configurator.py").decode()
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DSV4PoolConfigurator")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace: dict[str, Any] = {
        "envs": _Envs(),
        "_get_dsv4_compress_state_dtype_sizes": lambda: (state_bytes, state_bytes),
        "ceil_div": lambda a, b: -(-a // b),
    }
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(wheels[0]), "exec"), namespace)
    return namespace[name]


def _configurator(layers: int, *, speculative: bool = False) -> types.SimpleNamespace:
    """The attributes DSV4PoolConfigurator.__init__ sets for V4-Flash (head dims 448 + 64, indexer 128)."""
    ratios = _flash_ratios()[:layers]
    return types.SimpleNamespace(
        qk_nope_head_dim=448, qk_rope_head_dim=64, indexer_head_dim=128, attn_head_dim=512, swa_ratio=0.1,
        c4_ring_size=16 if speculative else 8, c128_ring_size=256 if speculative else 128, swa_page_size=128,
        num_layers_total=len(ratios), num_layers_ca4=ratios.count(4), num_layers_ca128=ratios.count(128),
        c4_shrink_factor=1, online_c128_mtp_max_draft_tokens=0, _unified=False, indexer_bytes_per_token=132,
        _get_num_req_slots=lambda max_running_requests: max_running_requests + 1,
    )


@pytest.mark.parametrize(("version", "layout", "layers"), [
    ("0.5.12", dsv4.LAYOUT_0_5_12, 44),  # self.compression_ratios = cfg.compress_ratios: all 44 entries
    ("0.5.13", dsv4.LAYOUT_0_5_13, 43),  # cfg.compress_ratios[start_layer:end_layer]
    ("0.5.14", dsv4.LAYOUT_0_5_13, 43),
    ("0.5.15", dsv4.LAYOUT_0_5_15, 43),
    ("0.5.20", dsv4.LAYOUT_0_5_15, 43),
])
@pytest.mark.parametrize("speculative", [False, True])
@pytest.mark.parametrize("state_env", [None, "bf16"])
def test_bytes_per_full_token_is_the_releases_own(version, layout, layers, speculative, state_env):
    env = {} if state_env is None else {dsv4.STATE_DTYPE_ENV: state_env}
    state = dsv4.compress_state_bytes(env, reads_env=rel.rules_for(version).has(rel.DSV4_STATE_DTYPE_ENV))
    # what SGLang's _get_dsv4_compress_state_dtype_sizes returns under that env, where the release calls it
    stub = 2 if state_env else 4
    released = _method(version, "_get_bytes_per_full_token", stub)(_configurator(layers, speculative=speculative))
    plan = dsv4.plan(
        compress_ratios=tuple(_flash_ratios()), stage=range(layers), head_dim=512, index_head_dim=128,
        sliding_window=128, page_size=256, max_running_requests=256, attn_dp=1, role=None, chunked_prefill_size=8192,
        swa_ratio_arg=None, cap_mode_default=False, draft_tokens=4 if speculative else 0, speculative=speculative,
        radix_cache=True, decode_extra_slots=0, layout=layout, state_bytes=state,
    )
    # the release applies the draft's (T + 1) / T after this method; kvcheck's figure includes it
    inflation = (layers + 1) / layers if speculative else 1.0
    assert plan.bytes_per_full_token == pytest.approx(released * inflation, rel=1e-12)
    if layout == dsv4.LAYOUT_0_5_15:
        fixed = _method(version, "_get_c128_state_fixed_bytes", stub)(
            _configurator(layers, speculative=speculative), 256)
        assert plan.fixed_bytes == fixed
    else:
        assert plan.fixed_bytes == 0
