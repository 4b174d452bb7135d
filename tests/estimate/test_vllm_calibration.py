"""The claims docs/estimate.md makes from the public vLLM logs (tests/bench/calibrate_vllm_estimator.py).

The held-out figures are pinned as they are, misses included: a change to the estimate model that moves
them has to be scored against these cases and the doc's table rewritten, not slip through."""

from __future__ import annotations

import re
import statistics

from kvcheck.engines.vllm.sizing.model import estimate_role
from tests.bench.calibrate_vllm_estimator import DATA, load_cases, table, target_for

V19 = "h100-v0.19.0-"
# logs that print one worker's memory while the pool is the minimum over the workers (TP 4 with LMCache,
# TP 8, and the pipeline-parallel boots, whose line is the first stage's)
MULTI_WORKER = {"4xh100-qwen3-235b-a22b-fp8-lmcache", "8xl40s-qwen3-235b-a22b-2507-fp8-v0.10.2",
                V19 + "meta-llama-llama-3-1-8b---h100-80gb--tp1pp2dp1--8192",
                V19 + "meta-llama-llama-3-1-8b---h100-80gb--tp1pp4dp1--8192"}


def _rows() -> list[str]:
    lines, _ = table()
    return lines[1:]


def _errors(check: str, set_name: str | None = None) -> dict[str, float]:
    """case -> signed % error of one check, for the cases of one set (None: every set)."""
    out = {}
    for line in _rows():
        fields = line.split()
        if f" {check} " not in line or (set_name is not None and fields[1] != set_name):
            continue
        match = re.search(r"([+-]\d+\.\d+)%", line)
        if match:
            out[fields[0]] = float(match.group(1))
    return out


def test_every_fit_case_lies_inside_its_range_and_within_the_fit_figures() -> None:
    memory = [line for line in _rows() if " memory (GiB) " in line and line.split()[1] == "fit"]
    assert len(memory) == 7
    assert all(" holds;" in line for line in memory), memory
    errors = [abs(e) for e in _errors("memory (GiB)", "fit").values()]
    assert (round(statistics.median(errors), 2), round(max(errors), 2)) == (0.12, 0.85)


def test_the_tp_non_torch_terms_are_fitted_on_one_source_and_one_release_only() -> None:
    """The split is stated in cases.json: the two boots the NVSwitch TP terms were fitted on, and nothing else."""
    fitted = {case["id"] for case in load_cases() if case.get("fit_for")}
    assert fitted == {V19 + "meta-llama-llama-3-1-8b---h100-80gb--tp2pp1dp1--8192",
                      V19 + "meta-llama-llama-3-1-8b---h100-80gb--tp4pp1dp1--8192"}
    assert {case["version"] for case in load_cases() if case["id"] in fitted} == {"0.19.0"}
    assert all(case["set"] == "fit" for case in load_cases() if case["id"] in fitted)
    # every other TP >= 2 boot on an NVSwitch GPU is held out
    others = [case for case in load_cases() if int(case["args"].get("tensor_parallel_size", 1)) > 1
              and case.get("gpu") == "H100" and case["id"] not in fitted]
    assert len(others) == 14 and all(case["set"] == "held-out" for case in others)


def test_the_held_out_memory_figures_are_the_ones_the_doc_states() -> None:
    errors = _errors("memory (GiB)", "held-out")
    assert errors == {
        "h100-gpt-oss-20b-llm-d": 0.14,
        "h100-gpt-oss-120b-llm-d": -116.82,
        "h100-llama-3.1-8b-llm-d": 0.14,
        "h100-qwen3-0.6b-llm-d": 0.09,
        "h100-qwen3-32b-llm-d": 1.96,
        "2xh100-qwen3-32b-llm-d": 0.02,
        "h100-llama-3.3-70b-fp8-tp2-llm-d": 0.06,
        "h100-mistral-small-3.2-24b-llm-d": -9.50,
        "l40s-gpt-oss-20b-eager-dev-2025-12": -0.31,
        V19 + "meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192": 0.30,
        V19 + "meta-llama-llama-3-1-8b---h100-80gb--tp1pp2dp1--8192": -1.32,
        V19 + "meta-llama-llama-3-1-8b---h100-80gb--tp1pp4dp1--8192": -1.27,
        V19 + "meta-llama---h100-80gb--tp1pp1dp1--8192-dtbf16-kvfp8": 0.30,
        V19 + "meta-llama-llama-3---h100-80gb--tp1pp1dp1--8192-qfp8": 0.27,
        V19 + "meta-llama-llama-3--h100-80gb--tp1pp1dp1--8192-dtf32": 1.15,
        V19 + "qwen-qwen3-8b--h100-80gb--tp1pp1dp1--8192": 0.30,
        V19 + "qwen-qwen3-30b-a3b--h100-80gb--tp1pp1dp1--8192": 1.21,
        V19 + "mistralai-mixtral-8x7b-i--h100-80gb--tp2pp1dp1--8192": 0.07,
        V19 + "openai-gpt-oss-20b--h100-80gb--tp2pp1dp1--8192": 0.02,
        V19 + "fp8dyn-llama-3-3-70b--h100-80gb--tp2pp1dp1--8192": 0.19,
        V19 + "fp8dyn-llama-3-3-70b--h100-80gb--tp4pp1dp1--8192": 0.33,
        V19 + "qwen-qwen2-5-7b-instruct--h100-80gb--tp1pp1dp1--8192": 0.29,
        V19 + "qwen-qwen2-5-7b-instruct--h100-80gb--tp2pp1dp1--8192": 0.02,
        V19 + "qwen-qwen2-5-7b-instruct--h100-80gb--tp4pp1dp1--8192": 0.12,
        V19 + "qwen-qwen2---h100-80gb--tp1pp1dp1--8192-dtbf16-kvfp8": 0.29,
        V19 + "mistralai-mistral-small---h100-80gb--tp1pp1dp1--8192": 0.95,
        "h100-qwen3-14b-v0.15.0-sweep": 0.16,
        "h100-qwen3-14b-v0.16.0-sweep": 0.16,
        "h100-qwen3-14b-v0.17.0-sweep": 0.15,
        "h100-qwen3-14b-v0.18.0-sweep": 0.40,
        V19 + "codellama-codellama-7b-h--h100-80gb--tp1pp1dp1--8192": 0.22,
        V19 + "qwen-qwen2-5-72b-instruc--h100-80gb--tp2pp1dp1--8192": 1.97,
        V19 + "moonshotai-kimi-dev-72b--h100-80gb--tp2pp1dp1--8192": 1.99,
        V19 + "moonshotai-kimi-dev-72b--h100-80gb--tp4pp1dp1--8192": 0.46,
        V19 + "microsoft-phi-4--h100-80gb--tp1pp1dp1--8192": 0.38,
        V19 + "google-gemma-7b--h100-80gb--tp1pp1dp1--8192": 0.31,
        V19 + "granite-3-1-2b--h100-80gb--tp1pp1dp1--8192": 0.55,
        V19 + "granite-3-1-8b--h100-80gb--tp1pp1dp1--8192": 0.62,
        V19 + "qwen-qwen1-5-moe-a2-7b--h100-80gb--tp1pp1dp1--8192": 0.39,
        V19 + "deepseek-ai-deepseek-v2---h100-80gb--tp1pp1dp1--8192": 0.40,
        V19 + "w8a8-mistral-small-24b--h100-80gb--tp1pp1dp1--8192": 0.86,
        V19 + "w8a8-mistral-small-24b--h100-80gb--tp2pp1dp1--8192": 0.18,
        V19 + "w8a8-redhatai-llam--h100-80gb--tp1pp1dp1--8192-dtf16": 0.28,
        V19 + "w4a16-redhatai-lla--h100-80gb--tp1pp1dp1--8192-dtf16": 0.27,
        V19 + "w8a8-redhatai-qwen2-5-7b--h100-80gb--tp1pp1dp1--8192": 0.26,
        V19 + "fp8dyn-redhatai-qwen2-5---h100-80gb--tp1pp1dp1--8192": 0.26,
        # dennislee22/vLLM-benchmarking (A100 80GB, 0.10.1.1), tim-roethig/ai-platform (2 x L40S, 0.10.2), an OpenShift AI guide (L40S)
        "a100-80gb-qwen2-7b-util025-v0.10.1.1": -19.62,
        "a100-80gb-qwen2-7b-util05-v0.10.1.1": -4.09,
        "2xa100-80gb-qwen2-7b-util025-v0.10.1.1": -11.20,
        "2xa100-80gb-qwen2-7b-util05-v0.10.1.1": -4.30,
        "4xa100-80gb-gpt-oss-120b-2nodes-v0.10.1.1": -3.65,
        "2xl40s-qwen3-30b-a3b-2507-fp8-v0.10.2": 0.66,
        "l40s-qwen3-0.6b-v0.11.1-rhoai": -0.14,
        # kubesimplify/website@08b151e (4 x RTX PRO 6000, PCIe only, 0.27.1): +4.93 / +4.52 scored before the 0.27
        # accounting was modelled (outside the range then); the runner's buffers (0.07 GiB) are counted now, the
        # allocator's fragmentation only in the range (central_unknowable)
        "4xrtx-pro-6000-qwen3-235b-a22b-2507-fp8-tp4-v0.27.1": 4.71,
        "4xrtx-pro-6000-qwen3-235b-a22b-2507-fp8-tp4-ep-v0.27.1": 4.30,
    }
    inconsistent = {case["id"] for case in load_cases() if case.get("source_inconsistent")}
    assert inconsistent == {"h100-gpt-oss-120b-llm-d"}
    consistent = [abs(e) for case, e in errors.items() if case not in inconsistent]
    assert (len(consistent), round(statistics.median(consistent), 2)) == (54, 0.31)


def test_every_held_out_boot_meets_the_bar_or_its_range_holds_where_the_inputs_cannot_settle_it() -> None:
    """The issue's bar, per case: median within 0.5%, every held-out boot within 3% of its logged memory. A boot
    whose figure depends on what the deployment's inputs do not state (`central_unknowable` in cases.json, with
    the reason) is held to its range instead, and the estimate says it cannot know."""
    errors = _errors("memory (GiB)", "held-out")
    cases = {case["id"]: case for case in load_cases()}
    memory = {line.split()[0]: line for line in _rows() if " memory (GiB) " in line}
    consistent = {case: e for case, e in errors.items() if not cases[case].get("source_inconsistent")}
    assert statistics.median(abs(e) for e in consistent.values()) <= 0.5
    beyond = sorted(case for case, e in consistent.items() if abs(e) > 3.0)
    assert beyond == sorted(case for case in consistent if cases[case].get("central_unknowable")), beyond
    # the FlashInfer-or-sort sampler of 0.8-0.11.0: Mistral-Small on 0.11.0, and the 0.10.1.1 A100 boots whose logs
    # print FlashInfer's sampler (cases.json gives each the figure VLLM_USE_FLASHINFER_SAMPLER=1 yields)
    assert beyond == sorted(["h100-mistral-small-3.2-24b-llm-d", "a100-80gb-qwen2-7b-util025-v0.10.1.1",
                             "a100-80gb-qwen2-7b-util05-v0.10.1.1", "2xa100-80gb-qwen2-7b-util025-v0.10.1.1",
                             "2xa100-80gb-qwen2-7b-util05-v0.10.1.1", "4xa100-80gb-gpt-oss-120b-2nodes-v0.10.1.1",
                             # 0.27+'s total_consumed: the allocator's fragmentation (RTX PRO 6000, 0.27.1)
                             "4xrtx-pro-6000-qwen3-235b-a22b-2507-fp8-tp4-v0.27.1",
                             "4xrtx-pro-6000-qwen3-235b-a22b-2507-fp8-tp4-ep-v0.27.1"])
    for case in beyond:
        assert " holds;" in memory[case], memory[case]
        target = target_for(cases[case], weights=True)
        assert any("does not say which" in a for a in estimate_role(target, offline=True).details["assumptions"])


def test_the_ranges_miss_only_the_cases_the_doc_names() -> None:
    """The misses left are the pipeline-parallel lines (the first stage's, the pool is the last stage's)."""
    memory = [line for line in _rows() if " memory (GiB) " in line]
    misses = sorted(line.split()[0] for line in memory if " MISSES;" in line)
    assert misses == sorted([
        V19 + "meta-llama-llama-3-1-8b---h100-80gb--tp1pp2dp1--8192",
        V19 + "meta-llama-llama-3-1-8b---h100-80gb--tp1pp4dp1--8192",
    ])
    assert len(memory) == 65


def test_a_hybrid_layout_is_scored_as_vllm_prints_its_pool() -> None:
    """gpt-oss's full and sliding-window groups share the blocks: vLLM 0.19's line is num_blocks // 2 x 16."""
    [layout] = [line for line in _rows() if line.startswith(V19 + "openai-gpt-oss-20b") and " layout " in line]
    assert "2,591,728   2,591,776   -0.00%" in layout, layout


def test_every_boot_vllm_refused_is_predicted_as_a_refusal() -> None:
    refusals = [line for line in _rows() if " refusal " in line or "refusal predicted" in line]
    refused = [case for case in load_cases() if case.get("refused_boot") or case["refused"]]
    assert len(refusals) == len(refused) == 5
    assert all(line.rstrip().endswith(("predicted", "predicted: yes")) and "NOT" not in line for line in refusals), refusals


def test_the_block_arithmetic_matches_every_log() -> None:
    errors = _errors("layout")
    assert len(errors) == 57
    assert all(abs(err) <= 0.07 for case, err in errors.items() if case not in MULTI_WORKER), errors
    assert all(abs(err) <= 1.4 for err in errors.values()), errors


def test_the_real_cpu_boots_are_predicted_exactly() -> None:
    rows = [line for line in _rows() if line.startswith("real-cpu-")]
    assert any(" pool " in line and "16,256      16,256   +0.00%" in line for line in rows), rows
    assert any(" max model len " in line and "1,920       1,920   +0.00%" in line for line in rows), rows


def test_every_case_names_its_log_and_its_source() -> None:
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    for case in load_cases():
        assert (DATA / case["log"]).is_file(), case["id"]
        folder, _, name = case["log"].rpartition("/")
        pattern = f"`{folder}/*{name[name.rindex('.'):]}`" if folder and not folder.startswith("..") else None
        assert f"`{case['log']}`" in readme or (pattern and pattern in readme), case["id"]  # its README row


def test_the_0_27_accounting_counts_the_runners_buffers_and_allows_for_fragmentation_from_0_27_0_only() -> None:
    """utils/mem_utils.py's total_consumed (0.27.0 on): the runner's buffers in the central figure, the
    allocator's fragmentation at the pool's low end; nothing of it up to 0.26."""
    from packaging.version import Version

    from kvcheck.engines.vllm.sizing import memory as mem

    runner = mem.runner_buffer_bytes(batched_tokens=8192, hidden=4096, dtype_bytes=2, max_num_seqs=32,
                                     max_model_len=32768)
    assert runner == 8192 * (4096 * 2 + 29) + 32 * 2048 * 4
    weights = 55.19 * (1 << 30)
    assert mem.total_consumed_extra_bytes(Version("0.26.0"), weights, runner) == (0.0, 0.0, 0.0)
    central, low, high = mem.total_consumed_extra_bytes(Version("0.27.0"), weights, runner)
    assert (central, low) == (runner, runner)
    assert round((high - runner) / (1 << 30), 3) == round(0.20 + 0.03 * 55.19, 3)
    assert mem.total_consumed_extra_bytes(None, weights, runner)[:2] == (runner, 0.0)  # either accounting


def test_the_v2_runner_of_0_22_to_0_28_subtracts_no_graph_estimate_for_a_dense_model() -> None:
    from packaging.version import Version

    from kvcheck.engines.vllm.sizing import memory as mem

    dense = {"hidden_size": 896, "num_hidden_layers": 24}
    moe = {"hidden_size": 4096, "num_experts": 128}
    skips = mem.v2_runner_skips_graph_estimate
    assert [skips(Version(v), dense, {}) for v in ("0.21.0", "0.22.0", "0.27.1", "0.28.0", "0.29.0")] == [
        False, True, True, True, False]
    assert not skips(Version("0.27.1"), moe, {})  # MoE: V1 by default, the estimate is subtracted
    assert skips(Version("0.27.1"), moe, {"VLLM_USE_V2_MODEL_RUNNER": "1"})
    assert not skips(Version("0.27.1"), dense, {"VLLM_USE_V2_MODEL_RUNNER": "0"})
    assert not skips(None, dense, {})
    # the pool's low end keeps the estimate (a V1 fallback), the central figure and the high end do not
    assert mem.graph_bytes_at(0, 100.0, on=True, other=True, v2_zero=True) == 0.0
    assert mem.graph_bytes_at(1, 100.0, on=True, other=True, v2_zero=True) == 0.0
    assert mem.graph_bytes_at(-1, 100.0, on=True, other=True, v2_zero=True) == 300.0


def test_the_rtx_4090_boot_of_0_27_1_is_within_3_percent_with_its_device_total() -> None:
    """The WSL2 boot (tests/data/vllm_logs/rtx4090-wsl2-qwen2.5-0.5b-v0.27.1.log, not a case: no input states
    WSL2's 23.99 GiB total): with that total given, the V2 runner's 0 GiB graph estimate puts it at -0.53%."""
    import dataclasses

    from kvcheck.model import EstimateInputs

    case = {"id": "rtx4090-wsl2", "model": "vllm_logs/configs/Qwen2.5-0.5B.json", "gpu": "RTX-4090",
            "version": "0.27.1", "args": {"gpu_memory_utilization": 0.92, "max_num_batched_tokens": 8192,
                                          "dtype": "float16"}, "weights_gib": 0.93}
    target = target_for(case, weights=True)
    target = dataclasses.replace(target, estimate=EstimateInputs(weights_gib_per_gpu=0.93,
                                                                 gpu_memory_mib=round(23.99 * 1024) + 600))
    details = estimate_role(target, offline=True).details
    assert details["cudagraph_estimate_gib"] == 0.0
    assert round((details["available_kv_gib"] - 20.52) / 20.52 * 100, 2) == -0.53


def test_blackwell_ultra_totals_are_the_ones_cuda_reports() -> None:
    """B300 and GB300 differ (nvidia-smi 275,040 and 284,208 MiB): each is priced at the cudaMemGetInfo total public
    boots print, not at nvidia-smi less the generic 600 MiB (which misses the GB300's 1,072 MiB gap)."""
    from kvcheck.engines.vllm.sizing.memory import device_total

    assert device_total("B300", 275040, None).gib == 267.69
    assert device_total("GB300", 284208, None).gib == 276.5
    assert round(device_total("GB300", 284208, 284208).gib, 2) == 276.96  # a manifest's own figure is nvidia-smi's
