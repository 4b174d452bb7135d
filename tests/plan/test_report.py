"""`kvcheck plan` end to end: the report's structure, every format, exit codes, real example files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.commands.plan import PlanOptions, run_plan
from kvcheck.errors import InputError
from kvcheck.plan.text import plan_markdown, render_plan_text
from kvcheck.report.formats import FORMATTERS, TableFormat
from tests.conftest import EXAMPLES
from tests.plan.helpers import LLAMA_31_8B, write_config

WORKED = """\
name: worked example
context_length: 131072
model:
  path: meta-llama/Llama-3.1-8B
  config: config.json
engine:
  version: "0.5.23"
gpu: H100
estimate:
  weights_gib_per_gpu: 15.0
roles:
  server:
    gpus: [0]
policy:
  min_headroom: {headroom}
"""


def _manifest(tmp_path: Path, headroom: float = 2.5, text: str = WORKED, config: dict | None = None) -> Path:
    write_config(tmp_path, config or LLAMA_31_8B)
    path = tmp_path / "manifest.yaml"
    path.write_text(text.replace("{headroom}", str(headroom)))
    return path


def _option(key: str, value, nnodes, gpus, pool, low, high, fits, current, note=None) -> dict:
    out = {key: value}
    if key == "tp_size":
        out.update(nnodes=nnodes, gpus=gpus)
    out.update(pool_tokens=pool, pool_range=[low, high], fits=fits, uncertain=False, current=current, note=note)
    return out


def _sharded(tp: int) -> str:
    return f"weights per GPU scaled from estimate.weights_gib_per_gpu: 15 x 1/{tp}"


def test_json_plan_structure_is_exact(tmp_path) -> None:
    report = run_plan(PlanOptions(_manifest(tmp_path)))
    data = json.loads(FORMATTERS["json"]().render(report))
    assert (data["command"], data["mode"], data["verdict"], data["exit_code"]) == ("plan", "estimate", "pass", 0)
    (role,) = data["roles"]
    assert (role["name"], role["status"], role["pool_tokens"], role["required_tokens"], role["source"]) == (
        "server", "pass", 412_695, 327_680, "estimate",
    )
    assert "fit_hints" not in role["details"]  # only a role that falls short needs them
    assert role["details"]["plan"] == {
        "required_tokens": 327_680,
        "min_headroom": 2.5,
        "largest_context_tokens": 131_072,
        "binding_limit": "model_context_length",
        "pool_context_tokens": 165_078,
        "model_context_tokens": 131_072,
        "uncertain": False,
        "memory_fraction": {
            "flag": "mem-fraction-static",
            "current": 0.83,
            "current_source": "sglang default",
            "current_pool_tokens": 412_695,
            "min_fitting": 0.699,
            "min_fitting_pool_tokens": 328_165,
            "min_fitting_worst_case": 0.701,
            "max_safe": 0.83,
            "max_safe_pool_tokens": 412_695,
            "safe_reserve_mib": 13_904.0,
            "note": None,
        },
        "mem_fraction_static": {
            "current": 0.83,
            "current_source": "sglang default",
            "current_pool_tokens": 412_695,
            "min_fitting": 0.699,
            "min_fitting_pool_tokens": 328_165,
            "min_fitting_worst_case": 0.701,
            "max_safe": 0.83,
            "max_safe_pool_tokens": 412_695,
            "safe_reserve_mib": 13_904.0,
            "note": None,
        },
        "tp_options": [
            _option("tp_size", 1, 1, 1, 412_695, 410_703, 414_687, True, True),
            _option("tp_size", 2, 1, 2, 938_907, 934_403, 944_206, True, False, _sharded(2)),
            _option("tp_size", 4, 1, 4, 1_950_775, 1_939_768, 1_966_500, True, False, _sharded(4)),
            _option("tp_size", 8, 1, 8, 3_960_193, 3_930_052, 4_012_161, True, False, _sharded(8)),
            _option("tp_size", 16, 2, 16, 3_961_292, 3_931_596, 4_012_492, True, False, _sharded(16)),
        ],
        "kv_dtype_options": [
            _option("kv_cache_dtype", "bf16", None, None, 412_695, 410_703, 414_687, True, True),
            _option("kv_cache_dtype", "fp8_e4m3", None, None, 825_391, 821_407, 829_375, True, False),
        ],
    }
    assert [(f["rule"], f["severity"], f["role"]) for f in data["findings"]] == [("KV106", "info", "server")] * 4
    assert [f["message"] for f in data["findings"]] == [
        "largest context that fits: 131,072 tokens, bound by the model's own context length (the predicted "
        "pool of 412,695 tokens would hold 165,078 with min_headroom 2.5); the advertised 131,072 fits",
        "mem-fraction-static: SGLang's default 0.83 gives 412,695 tokens, enough; 0.699 is the smallest value "
        "that holds 327,680 tokens (328,165 predicted); safe up to 0.83, SGLang's own default for this role "
        "(it keeps 13,904 MiB for activations and CUDA graphs); 0.701 holds it even at the low end of the "
        "estimate's range",
        "tp-size 1 holds the window (412,695 tokens)",
        "kv-cache-dtype bf16 holds the window (412,695 tokens)",
    ]


def test_shortfall_reports_kv101_with_the_plans_hints_then_the_advice(tmp_path) -> None:
    report = run_plan(PlanOptions(_manifest(tmp_path, headroom=4.0)))
    assert (report.verdict, report.exit_code) == ("fail", 1)
    assert [(f.rule, f.severity) for f in report.findings] == [("KV101", "error")] + [("KV106", "info")] * 4
    assert report.findings[0].hint == (
        "the largest context that fits this pool is 103,173 tokens (with min_headroom 4); no "
        "mem-fraction-static up to SGLang's own 0.83 holds it (412,695 tokens at 0.83, estimate); "
        "kv-cache-dtype fp8_e4m3 would hold 825,391 tokens (estimate); tp-size 2 would hold 938,907 tokens "
        "(estimate)"
    )
    assert report.findings[3].message == (
        "tp-size 2 would hold the window: 938,907 tokens (tp-size 1 gives 412,695 tokens)"
    )
    assert report.findings[3].hint == "set tp-size: 2"
    assert report.findings[4].message == (
        "kv-cache-dtype fp8_e4m3 would hold the window: 825,391 tokens (bf16 gives 412,695 tokens)"
    )
    assert report.roles[0].fit_hints == (
        "no mem-fraction-static up to SGLang's own 0.83 holds it (412,695 tokens at 0.83, estimate)",
        "kv-cache-dtype fp8_e4m3 would hold 825,391 tokens (estimate)",
        "tp-size 2 would hold 938,907 tokens (estimate)",
    )


@pytest.mark.parametrize("fmt", sorted(FORMATTERS))
def test_every_format_renders_the_plan(tmp_path, fmt: str) -> None:
    report = run_plan(PlanOptions(_manifest(tmp_path, headroom=4.0)))
    text = FORMATTERS[fmt]().render(report)
    assert "KV106" in text and "KV101" in text
    assert "tp-size 2 would hold the window" in text


def test_plan_section_for_the_table(tmp_path) -> None:
    report = run_plan(PlanOptions(_manifest(tmp_path, headroom=4.0)))
    assert render_plan_text(report, width=110) == """\
plan for server: largest context that fits 103,173 tokens (bound by the predicted pool; the model allows
131,072); the window needs 524,288
setting               value      pool tokens            pool range   window   note
────────────────────────────────────────────────────────────────────────────────────────────
mem-fraction-static   0.83 *         412,695       410,703-414,687   short    SGLang default
                      none                 -                     -   short    no safe value
                      0.83           412,695                     -   short    safe maximum
tp-size               1 *            412,695       410,703-414,687   short
                      2              938,907       934,403-944,206   holds
                      4            1,950,775   1,939,768-1,966,500   holds
                      8            3,960,193   3,930,052-4,012,161   holds
                      16           3,961,292   3,931,596-4,012,492   holds    2 nodes
kv-cache-dtype        bf16 *         412,695       410,703-414,687   short
                      fp8_e4m3       825,391       821,407-829,375   holds
* = the manifest's setting; figures are predictions (estimate mode)
"""
    table = TableFormat(width=110).render(report)
    assert table.startswith("kvcheck plan: FAIL (exit 1)")
    markdown = plan_markdown(report)
    assert "| tp-size | 1 * | 412,695 | 410,703-414,687 | short |  |" in markdown
    assert "|  | 2 | 938,907 | 934,403-944,206 | holds |  |" in markdown


def test_role_that_cannot_be_estimated_is_an_error_with_no_plan(tmp_path) -> None:
    config = dict(LLAMA_31_8B, architectures=["NoSuchModelForCausalLM"])
    report = run_plan(PlanOptions(_manifest(tmp_path, config=config)))
    assert (report.verdict, report.exit_code) == ("error", 3)
    assert [f.rule for f in report.findings] == ["KV305"]
    assert report.roles[0].plan is None
    assert render_plan_text(report) == ""


def test_unknown_role_is_an_input_error(tmp_path) -> None:
    with pytest.raises(InputError, match="no role 'sever' \\(did you mean 'server'\\?\\)"):
        run_plan(PlanOptions(_manifest(tmp_path), roles=("sever",)))


def test_cli_plan_on_the_incident_example(kvcheck) -> None:
    result = kvcheck("plan", str(EXAMPLES / "incident" / "manifest.yaml"), "--format", "json")
    assert result.exit_code == 1, result.stderr
    data = json.loads(result.stdout)
    prefill, decode = data["roles"]
    assert (prefill["name"], prefill["status"], decode["name"], decode["status"]) == (
        "prefill", "fail", "decode", "pass",
    )
    plan = prefill["details"]["plan"]
    assert plan["required_tokens"] == 1_048_576
    assert plan["largest_context_tokens"] == prefill["pool_tokens"] < 1_048_576
    assert plan["binding_limit"] == "pool"
    assert plan["mem_fraction_static"]["current"] == 0.85
    assert plan["mem_fraction_static"]["min_fitting"] is None  # no safe fraction holds 1M on 8 x H200
    sixteen = [o for o in plan["tp_options"] if o["tp_size"] == 16]
    assert sixteen[0]["nnodes"] == 2 and sixteen[0]["fits"] is True
    assert [o["kv_cache_dtype"] for o in plan["kv_dtype_options"]] == ["bf16", "fp8_e4m3"]  # H200: no FP4
    assert [o["kv_cache_dtype"] for o in decode["details"]["plan"]["kv_dtype_options"]] == [
        "bf16", "fp8_e4m3",  # B200, but GLM-5.2 is DSA: SGLang refuses FP4 KV there, so plan never lists it
    ]
    kv101 = [f for f in data["findings"] if f["rule"] == "KV101"]
    assert [f["role"] for f in kv101] == ["prefill"]
    assert "tp-size 16 (2 nodes) would hold" in kv101[0]["hint"]


def test_cli_plan_table_and_role_selection(kvcheck) -> None:
    result = kvcheck("plan", str(EXAMPLES / "incident" / "manifest.yaml"), "--role", "decode")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("kvcheck plan: PASS (exit 0)")
    assert "[prefill]" not in result.stdout
    result = kvcheck("plan", str(EXAMPLES / "incident" / "manifest.yaml"), "--role", "nope")
    assert result.exit_code == 2
    assert "no role 'nope'" in result.stderr


def test_cli_plan_missing_manifest_is_exit_2(kvcheck, tmp_path) -> None:
    result = kvcheck("plan", str(tmp_path / "absent.yaml"))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "absent.yaml: no such manifest file" in result.stderr
