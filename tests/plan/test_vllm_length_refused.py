"""`kvcheck plan` on a vLLM role whose --max-model-len is above the model's own length: vLLM refuses the
length before it sizes memory, so the utilization advice says so instead of a sweep that cannot help."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_kvcheck

CONFIG = Path("docs/examples/vllm/config.json").resolve()  # Llama-3.1-8B: 131,072 with llama3 rope

MANIFEST = f"""\
context_length: 600000
model: {{path: meta-llama/Llama-3.1-8B-Instruct, config: {CONFIG}}}
engine: {{name: vllm, version: "0.32.0"}}
gpu: H100
args: {{tensor-parallel-size: 2, max-model-len: 600000}}
roles:
  server: {{gpus: [0, 1]}}
"""


def test_the_utilization_advice_names_the_refused_length(tmp_path: Path) -> None:
    path = tmp_path / "kvcheck.yaml"
    path.write_text(MANIFEST, encoding="utf-8")
    result = run_kvcheck("plan", str(path), "--format", "json")
    report = json.loads(result.stdout)
    advice = [f for f in report["findings"] if f["rule"] == "KV106" and "gpu-memory-utilization" in f["message"]]
    assert [(f["message"], f["hint"]) for f in advice] == [(
        "gpu-memory-utilization: no value helps: vLLM refuses --max-model-len 600,000, above the model's own "
        "length 131,072 (KV220), before it sizes any memory",
        "lower --max-model-len to 131,072, or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the role's env where the "
        "model is known to serve longer")]
    assert "KV220" in [f["rule"] for f in report["findings"]]


def test_with_the_override_the_sweep_runs_again(tmp_path: Path) -> None:
    path = tmp_path / "kvcheck.yaml"
    path.write_text(MANIFEST.replace("  server: {gpus: [0, 1]}",
                                     "  server: {gpus: [0, 1], env: {VLLM_ALLOW_LONG_MAX_MODEL_LEN: '1'}}"),
                    encoding="utf-8")
    result = run_kvcheck("plan", str(path), "--format", "json")
    report = json.loads(result.stdout)
    assert "KV220" not in [f["rule"] for f in report["findings"]]
    fraction = report["roles"][0]["details"]["plan"]["memory_fraction"]
    assert fraction["min_fitting"] is not None and fraction["min_fitting_pool_tokens"] >= 600_000


def test_no_tp_or_kv_dtype_reads_as_capacity_when_the_length_is_refused(tmp_path: Path) -> None:
    """Before: TP 8 'holds' 4,341,136 tokens and KV106 said no TP degree holds the window, while vLLM refuses the
    length before it sizes any memory whatever the TP degree or dtype."""
    path = tmp_path / "kvcheck.yaml"
    path.write_text(MANIFEST, encoding="utf-8")
    report = json.loads(run_kvcheck("plan", str(path), "--format", "json").stdout)
    plan = report["roles"][0]["details"]["plan"]
    for option in plan["tp_options"] + plan["kv_dtype_options"]:
        assert (option["fits"], option["note"]) == (False, "vLLM refuses --max-model-len 600,000 (KV220)"), option
    blocked = ("no value helps: vLLM refuses --max-model-len 600,000, above the model's own length 131,072 (KV220), "
               "before it sizes any memory")
    messages = [f["message"] for f in report["findings"] if f["rule"] == "KV106"]
    assert f"tensor-parallel-size: {blocked}" in messages
    assert f"kv-cache-dtype: {blocked}" in messages

    text = run_kvcheck("plan", str(path)).stdout
    assert "holds" not in text.split("findings")[0].split("setting")[1]  # the table: every row is refused
    rows = [line for line in text.splitlines() if "refused" in line and ("tensor-parallel-size" in line or
                                                                       "gpu-memory-utilization" in line)]
    assert len(rows) == 2, text
