"""EstimateBackend: PoolMeasurement values, KV305 for roles it cannot predict, KV105 in the band."""

from __future__ import annotations

import json

from kvcheck.backends.estimate import EstimateBackend

from .helpers import role


def test_backend_returns_estimate_measurements_in_target_order(tmp_path):
    unknown = tmp_path / "config.json"
    unknown.write_text(json.dumps({"architectures": ["MysteryForCausalLM"], "num_hidden_layers": 2}))
    targets = [
        role("meta-llama--Meta-Llama-3.1-8B", name="prefill", disaggregation_mode="prefill"),
        role(unknown, name="odd"),
        role("meta-llama--Meta-Llama-3.1-8B", name="decode", disaggregation_mode="decode"),
    ]
    got = EstimateBackend(offline=True).measure(targets)
    assert [m.role for m in got] == ["prefill", "odd", "decode"]
    prefill, odd, decode = got
    assert prefill.source == "estimate"
    assert prefill.pool_tokens is not None and prefill.pool_tokens > 300000
    assert prefill.context_len == 131072
    assert prefill.max_input_tokens == 131072 - 6
    assert prefill.engine_version == "0.5.23"
    low, high = prefill.pool_range
    assert low < prefill.pool_tokens < high
    assert prefill.details["mem_fraction_static"] == 0.836
    assert decode.details["mem_fraction_static"] == 0.874
    assert odd.pool_tokens is None
    assert [f.rule for f in odd.findings] == ["KV305"]
    assert odd.findings[0].severity == "error"
    assert "architecture MysteryForCausalLM is not understood by the estimate model" in odd.findings[0].message


def test_unknown_gpu_and_missing_gpu_are_kv305():
    got = EstimateBackend(offline=True).measure(
        [role("meta-llama--Meta-Llama-3.1-8B", gpu="TPU-v5"), role("meta-llama--Meta-Llama-3.1-8B", gpu=None)]
    )
    assert [m.findings[0].rule for m in got] == ["KV305", "KV305"]
    assert "no GPU profile for 'TPU-v5'" in got[0].findings[0].message
    assert "names no GPU type" in got[1].findings[0].message


def test_hub_is_not_asked_offline():
    target = role("meta-llama--Meta-Llama-3.1-8B")
    from dataclasses import replace

    hub_only = replace(target, model_config=None, model_path="meta-llama/Llama-3.1-8B-Instruct")
    (m,) = EstimateBackend(offline=True).measure([hub_only])
    assert m.pool_tokens is None
    assert m.findings[0].rule == "KV305"
    assert "model.config" in (m.findings[0].hint or "")


def test_window_inside_the_uncertainty_range_is_kv105():
    probe = EstimateBackend(offline=True).measure([role("meta-llama--Meta-Llama-3.1-8B")])[0]
    low, high = probe.pool_range
    inside = role("meta-llama--Meta-Llama-3.1-8B", window=131072)
    from dataclasses import replace

    inside = replace(inside, min_headroom=(low + 1) / 131072)
    (m,) = EstimateBackend(offline=True).measure([inside])
    assert [f.rule for f in m.findings] == ["KV105"]
    assert m.findings[0].severity == "warning"
    below = replace(inside, min_headroom=(low - 10) / 131072)
    assert EstimateBackend(offline=True).measure([below])[0].findings == ()
