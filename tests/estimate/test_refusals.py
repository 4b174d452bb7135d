"""Settings SGLang refuses at startup are refused in estimate and plan mode: exit 2, SGLang's reason."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from kvcheck.engines.sglang.sizing import estimate_role
from kvcheck.engines.sglang.sizing.refusals import EngineRefusal
from kvcheck.errors import EstimateError

from .helpers import role

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "single-server"


def _manifest(tmp_path: Path, args: str, config: Path | None = None) -> Path:
    source = config or EXAMPLE / "llama-3.1-8b-instruct.config.json"
    (tmp_path / "config.json").write_text(source.read_text())
    path = tmp_path / "manifest.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            name: refusal test
            context_length: 131072
            model:
              path: meta-llama/Llama-3.1-8B-Instruct
              config: config.json
            engine:
              version: "0.5.23"
            gpu: H100
            """
        )
        + f"args: {{{args}}}\nroles:\n  server: {{}}\n"
    )
    return path


CASES = [
    ("tp-size: 3", 9, 8, "the model's 32 attention heads are not divisible by the attention TP size 3: SGLang's "
     "model code asserts 'total_num_heads % tp_size == 0' while loading (e.g. models/llama.py:183)"),
    ("tp-size: 0", 9, 8, "--tp-size 0 is not a positive integer: SGLang cannot start (no rank would be launched)"),
    ("page-size: 0", 9, 8, "--page-size 0 is not a positive integer: SGLang cannot start (its pool and allocator "
     "divide by the page size)"),
    ("mem-fraction-static: 1.5", 9, 8, "--mem-fraction-static 1.5 is outside (0, 1]: the pool would be sized larger "
     "than the free memory and its allocation fails (CUDA out of memory)"),
    ("mem-fraction-static: 0", 9, 8, "--mem-fraction-static 0.0 is outside (0, 1]: SGLang stops with 'Loaded weights "
     "leave no GPU memory for the KV cache under --mem-fraction-static=0.0' (kv_cache_configurator._profile_available_bytes)"),
    ("tp-size: 4, attn-dp-size: 3", 9, 20, "--tp-size 4 is not divisible by attention DP x CP (3 x 1): SGLang asserts "
     "'tp_size must be divisible by attn_dp_size * attn_cp_size' (arg_groups/parallel_hook.py:163)"),
    ("max-running-requests: 0", 9, 8, "--max-running-requests 0 is below 1: no request could run (SGLang 0.5.23 and "
     "later start and run 1 per DP rank, not the limit given)"),
    ("max-running-requests: -4", 9, 8, "--max-running-requests -4 is below 1: no request could run (SGLang 0.5.23 and "
     "later start and run 1 per DP rank, not the limit given)"),
    ("max-queued-requests: 0", 9, 8, "--max-queued-requests 0 is below 1: SGLang aborts every request with 'The "
     "request queue is full.' (scheduler._abort_on_queued_limit admits a request only while the queue holds fewer)"),
    ("chunked-prefill-size: 100, page-size: 64", 9, 8, "--chunked-prefill-size 100 is not divisible by the page size "
     "64: SGLang asserts 'chunked_prefill_size must be divisible by page_size' (arg_groups/validation_hook.py:245)"),
]


@pytest.mark.parametrize(("args", "line", "column", "message"), CASES)
@pytest.mark.parametrize("command", [["verify", "--mode", "estimate"], ["plan"]])
def test_refused_settings_are_exit_2_with_sglangs_reason(tmp_path, kvcheck, command, args, line, column, message):
    manifest = _manifest(tmp_path, args)
    result = kvcheck(command[0], str(manifest), *command[1:])
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.splitlines()[0] == f"kvcheck: error: {manifest}:{line}:{column}: role server: {message}"


@pytest.mark.parametrize(("version", "exit_code"), [("0.5.22", 2), ("0.5.18", 2), ("0.5.23", 0)])
def test_one_running_request_over_two_dp_ranks_is_zero_per_rank_before_0_5_23(tmp_path, kvcheck, version, exit_code):
    # Up to 0.5.22 each rank gets 1 // 2 = 0 and tp_worker asserts "max_running_request is zero"; 0.5.23
    # raises it to max(1, 1 // 2) = 1 (kv_cache_configurator.resolve_max_num_reqs).
    manifest = _manifest(tmp_path, "tp-size: 2, dp-size: 2, enable-dp-attention: true, max-running-requests: 1")
    manifest.write_text(manifest.read_text().replace('"0.5.23"', f'"{version}"'))
    result = kvcheck("verify", str(manifest), "--mode", "estimate")
    assert result.exit_code == exit_code, (result.stdout, result.stderr)
    if exit_code == 2:
        assert result.stderr.splitlines()[0] == (
            f"kvcheck: error: {manifest}:9:59: role server: --max-running-requests 1 over 2 attention DP ranks is 0 "
            "per rank: SGLang asserts 'max_running_request is zero' at startup (tp_worker.py; from 0.5.23 each rank "
            "runs at least 1)")


def test_a_queue_limit_is_ignored_on_disaggregated_roles(tmp_path, kvcheck):
    # "This option is ignored when using disaggregation-mode" (SGLang's help): not a refusal there.
    manifest = _manifest(tmp_path, "max-queued-requests: 0, disaggregation-mode: prefill")
    result = kvcheck("verify", str(manifest), "--mode", "estimate")
    assert result.exit_code == 0, (result.stdout, result.stderr)


def test_tp_16_on_8_kv_heads_is_fine_replication():
    # 8 KV heads at TP16: each rank keeps one head (SGLang replicates); 32 query heads divide by 16
    est = estimate_role(role("meta-llama--Meta-Llama-3.1-8B", tp_size=16, nnodes=2), offline=True)
    assert est.details["kv_cell_parts"]["kv_heads_per_rank"] == 1


def test_kv_heads_that_do_not_divide_are_refused(tmp_path):
    config = tmp_path / "config.json"
    text = (EXAMPLE / "llama-3.1-8b-instruct.config.json").read_text().replace(
        '"num_key_value_heads": 8', '"num_key_value_heads": 6'
    ).replace('"num_attention_heads": 32', '"num_attention_heads": 48')
    config.write_text(text)
    with pytest.raises(EngineRefusal, match="the model's 6 KV heads are not divisible by the attention TP size 4"):
        estimate_role(role(config, tp_size=4), offline=True)
    with pytest.raises(EngineRefusal, match="the attention TP size 8 is not a multiple of the model's 6 KV heads"):
        estimate_role(role(config, tp_size=8), offline=True)


def test_expert_parallel_must_divide_tp_and_the_experts():
    with pytest.raises(EngineRefusal, match=r"--ep-size 3 does not divide --tp-size 8"):
        estimate_role(role("Qwen--Qwen3-30B-A3B", tp_size=8, ep_size=3), offline=True)
    with pytest.raises(EngineRefusal, match=r"the model's 128 routed experts are not divisible by --ep-size 6"):
        estimate_role(role("Qwen--Qwen3-30B-A3B", tp_size=12, ep_size=6, attn_dp_size=3, nnodes=2), offline=True)
    estimate_role(role("Qwen--Qwen3-30B-A3B", tp_size=4, ep_size=4), offline=True)


def test_a_planner_candidate_sglang_refuses_is_skipped_not_fatal():
    # overrides come from the planner's sweep: a refused candidate is "not estimable", not bad input
    with pytest.raises(EstimateError, match="attention heads are not divisible"):
        estimate_role(role("meta-llama--Meta-Llama-3.1-8B"), overrides={"tp_size": 3}, offline=True)


def test_weights_that_leave_no_room_are_a_zero_pool_never_a_pass(tmp_path, kvcheck):
    result = kvcheck("verify", str(_manifest(tmp_path, "mem-fraction-static: 0.15")), "--mode", "estimate",
                     "--format", "json")
    assert result.exit_code == 1
    assert '"pool_tokens": 0' in result.stdout
    assert "SGLang would refuse to start: the loaded weights leave no GPU memory for the KV cache" in result.stdout


# KV-cache dtypes, attention backends and DeepSeek-V4 hook settings SGLang 0.5.21-0.5.23 refuse (each was priced,
# exit 0, before): (model, GPU, args, the start of kvcheck's message)
HOOK_CASES = [
    # 1. DSA (MLA + indexer) takes bf16/bfloat16 or fp8_e4m3 only
    ("zai-org--GLM-5.2-FP8", "H200", {"tp_size": 8, "kv_cache_dtype": "fp8_e5m2"},
     "--kv-cache-dtype fp8_e5m2 cannot serve a DeepSeek sparse-attention (DSA) model: SGLang asserts 'DeepSeek DSA"),
    ("zai-org--GLM-5.2-FP8", "B200", {"tp_size": 8, "kv_cache_dtype": "nvfp4"},
     "--kv-cache-dtype nvfp4 cannot serve a DeepSeek sparse-attention (DSA) model"),
    ("zai-org--GLM-5.2-FP8", "B200", {"tp_size": 8, "kv_cache_dtype": "fp4_mx_block16"},
     "--kv-cache-dtype fp4_mx_block16 cannot serve a DeepSeek sparse-attention (DSA) model"),
    # 2. FP4 / MXFP8 on GPUs that refuse them
    ("Qwen--Qwen3.5-27B", "H100", {"kv_cache_dtype": "nvfp4"},
     "--kv-cache-dtype nvfp4 on H100 (SM90): SGLang raises '--kv-cache-dtype=nvfp4 requires Blackwell SM100 or SM120."),
    ("Qwen--Qwen3.5-27B", "H200", {"kv_cache_dtype": "mxfp8"},
     "--kv-cache-dtype mxfp8 on H200: SGLang raises '--kv-cache-dtype mxfp8 requires an SM100+ (Blackwell) GPU"),
    ("Qwen--Qwen3.5-27B", "MI300X", {"kv_cache_dtype": "fp4_mx_block16"},
     "--kv-cache-dtype fp4_mx_block16 on MI300X: SGLang raises 'KV4 is not tested on non-CUDA platforms.'"),
    # 3. NVFP4 on Blackwell with a backend or role SGLang refuses
    ("Qwen--Qwen3.5-27B", "B200", {"kv_cache_dtype": "nvfp4"},
     "--kv-cache-dtype nvfp4 with the triton attention backend: SGLang raises 'NVFP4 prefill supports an FP8 E4M3 "
     "workspace or native NVFP4, but backend 'triton' provides neither.'"),
    ("Qwen--Qwen3-8B", "B200", {"kv_cache_dtype": "nvfp4", "disaggregation_mode": "prefill"},
     "--kv-cache-dtype nvfp4 with trtllm_mha on SM100 in a prefill/decode role: SGLang raises 'SM100 native NVFP4"),
    ("moonshotai--Kimi-K2.5", "B200", {"tp_size": 8, "kv_cache_dtype": "nvfp4"},
     "--kv-cache-dtype nvfp4 with the trtllm_mla attention backend: SGLang raises 'TensorRT-LLM MLA backend only"),
    ("moonshotai--Kimi-K2.5", "B200", {"tp_size": 8, "kv_cache_dtype": "fp4_mx_block16"},
     "--kv-cache-dtype fp4_mx_block16 with the trtllm_mla attention backend"),
    # 4. trtllm_mla off Blackwell, and its KV dtypes (the default backend of Kimi-K3 on B300)
    ("moonshotai--Kimi-K2.5", "H200", {"tp_size": 8, "attention_backend": "trtllm_mla"},
     "the trtllm_mla attention backend on H200: SGLang raises 'TRTLLM MLA backend is only supported on Blackwell"),
    ("moonshotai--Kimi-K3", "B300", {"tp_size": 8, "kv_cache_dtype": "fp8_e5m2"},
     "--kv-cache-dtype fp8_e5m2 with the trtllm_mla attention backend"),
    # 5. the DeepSeek-V4 hook
    ("deepseek-ai--DeepSeek-V4-Flash", "H200", {"tp_size": 4, "dsv4_attn_backend": "trtllm"},
     "--dsv4-attn-backend trtllm on H200: SGLang asserts '--dsv4-attn-backend trtllm requires an SM100/SM103"),
    ("deepseek-ai--DeepSeek-V4-Flash", "B200", {"tp_size": 4, "dsv4_attn_backend": "trtllm", "disaggregation_mode": "decode"},
     "--dsv4-attn-backend trtllm in a prefill/decode role: SGLang asserts '--dsv4-attn-backend trtllm does not support"),
    ("deepseek-ai--DeepSeek-V4-Flash", "H200", {"tp_size": 4, "speculative_algorithm": "EAGLE", "speculative_eagle_topk": 2,
                                               "speculative_num_steps": 3, "speculative_num_draft_tokens": 4},
     "--speculative-eagle-topk 2: SGLang asserts 'Only EAGLE speculative algorithm with topk == 1 is supported"),
    # 6. the SWA ratio
    ("deepseek-ai--DeepSeek-V4-Flash", "H200", {"tp_size": 4, "swa_full_tokens_ratio": 1.5},
     "--swa-full-tokens-ratio 1.5 is outside (0, 1]: SGLang raises '--swa-full-tokens-ratio should be in range"),
    # 8. EAGLE3 on V4 (was KV305, exit 3)
    ("deepseek-ai--DeepSeek-V4-Flash", "H200", {"tp_size": 4, "speculative_algorithm": "EAGLE3"},
     "--speculative-algorithm EAGLE3: SGLang asserts 'Only EAGLE and DSPARK speculative algorithms are supported"),
]


@pytest.mark.parametrize(("model", "gpu", "args", "message"), HOOK_CASES)
def test_kv_dtypes_backends_and_v4_settings_sglang_refuses(model, gpu, args, message):
    with pytest.raises(EngineRefusal) as caught:
        estimate_role(role(model, gpu=gpu, **args), offline=True)
    assert f"role serve: {message}" in caught.value.message


def _at(target, version: str):
    return dataclasses.replace(target, engine_version=version)


# Each refusal from the oldest release whose source has it with the same condition (refusals.py's keys; the evidence
# is in each key's comment): (model, GPU, args, that release, kvcheck's message there, the release before it, which
# is still priced; None where the setting or model does not exist before).
KEYED_CASES = [
    ("zai-org--GLM-5.2-FP8", "H200", {"tp_size": 8, "kv_cache_dtype": "fp8_e5m2"}, "0.5.9",
     "--kv-cache-dtype fp8_e5m2 cannot serve a DeepSeek sparse-attention (DSA) model: SGLang asserts 'DeepSeek DSA "
     "only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype' (server_args.py _set_default_nsa_kv_cache_dtype)",
     "0.5.8"),
    # DeepseekV32ForCausalLM joins the DeepSeek family list that runs the DSA check in 0.5.12 (0.5.9/0.5.10 lack it)
    ("deepseek-ai--DeepSeek-V3.2", "H200", {"tp_size": 8, "kv_cache_dtype": "fp8_e5m2"}, "0.5.12",
     "--kv-cache-dtype fp8_e5m2 cannot serve a DeepSeek sparse-attention (DSA) model", "0.5.10"),
    ("moonshotai--Kimi-K2.5", "H200", {"tp_size": 8, "attention_backend": "trtllm_mla"}, "0.5.9",
     "the trtllm_mla attention backend on H200: SGLang raises 'TRTLLM MLA backend is only supported on Blackwell "
     "GPUs (SM100/SM12x). Please use a different backend.' (server_args.py _handle_attention_backend_compatibility)",
     "0.5.8"),
    # up to 0.5.20 the list also has fp4_e2m1; DeepSeek-V3/Kimi-K2.5 on SM100 get trtllm_mla from the model override
    ("moonshotai--Kimi-K2.5", "B200", {"tp_size": 8, "kv_cache_dtype": "fp8_e5m2"}, "0.5.9",
     "--kv-cache-dtype fp8_e5m2 with the trtllm_mla attention backend: SGLang raises 'TensorRT-LLM MLA backend only "
     "supports kv-cache-dtype of fp8_e4m3, fp4_e2m1, bf16, or auto.' (server_args.py "
     "_handle_attention_backend_compatibility)", "0.5.8"),
    ("moonshotai--Kimi-K2.5", "B200", {"tp_size": 8, "kv_cache_dtype": "nvfp4"}, "0.5.17",
     "--kv-cache-dtype nvfp4 with the trtllm_mla attention backend: SGLang raises 'TensorRT-LLM MLA backend only "
     "supports kv-cache-dtype of fp8_e4m3, fp4_e2m1, bf16, or auto.' (arg_groups/overrides.py "
     "_mla_kv_cache_dtype_checks)", None),
    ("Qwen--Qwen3-8B", "H100", {"swa_full_tokens_ratio": 1.5}, "0.5.9",
     "--swa-full-tokens-ratio 1.5 is outside (0, 1]: SGLang raises '--swa-full-tokens-ratio should be in range "
     "(0, 1.0].' (server_args.py _handle_cache_compatibility)", "0.5.8"),
    # nvfp4, fp4_mx_block16 and mxfp8 are --kv-cache-dtype choices from 0.5.16, which already has these checks
    ("Qwen--Qwen3.5-27B", "H100", {"kv_cache_dtype": "nvfp4"}, "0.5.16",
     "--kv-cache-dtype nvfp4 on H100 (SM90): SGLang raises '--kv-cache-dtype=nvfp4 requires Blackwell SM100 or "
     "SM120.' (server_args.py _handle_kv4_compatibility)", None),
    ("Qwen--Qwen3.5-27B", "H200", {"kv_cache_dtype": "mxfp8"}, "0.5.16",
     "--kv-cache-dtype mxfp8 on H200: SGLang raises '--kv-cache-dtype mxfp8 requires an SM100+ (Blackwell) GPU", None),
    ("Qwen--Qwen3.5-27B", "MI300X", {"kv_cache_dtype": "fp4_mx_block16"}, "0.5.16",
     "--kv-cache-dtype fp4_mx_block16 on MI300X: SGLang raises 'KV4 is not tested on non-CUDA platforms.' "
     "(server_args.py _handle_kv4_compatibility)", None),
    ("Qwen--Qwen3.5-27B", "B200", {"kv_cache_dtype": "nvfp4"}, "0.5.21",
     "--kv-cache-dtype nvfp4 with the triton attention backend: SGLang raises 'NVFP4 prefill supports", "0.5.20"),
    ("Qwen--Qwen3-8B", "B200", {"kv_cache_dtype": "nvfp4", "disaggregation_mode": "prefill"}, "0.5.21",
     "--kv-cache-dtype nvfp4 with trtllm_mha on SM100 in a prefill/decode role", "0.5.20"),
    ("deepseek-ai--DeepSeek-V4-Flash", "H200", {"tp_size": 4, "speculative_algorithm": "EAGLE", "speculative_eagle_topk": 2,
                                               "speculative_num_steps": 3, "speculative_num_draft_tokens": 4}, "0.5.13",
     "--speculative-eagle-topk 2: SGLang asserts 'Only EAGLE speculative algorithm with topk == 1 is supported for "
     "DeepseekV4ForCausalLM' (arg_groups/deepseek_v4_hook.py)", "0.5.12"),
    ("deepseek-ai--DeepSeek-V4-Flash", "H200", {"tp_size": 4, "speculative_algorithm": "EAGLE3"}, "0.5.13",
     "--speculative-algorithm EAGLE3: SGLang asserts 'Only EAGLE speculative algorithm is supported for "
     "DeepseekV4ForCausalLM' (arg_groups/deepseek_v4_hook.py)", None),  # 0.5.12: KV305, EAGLE3 on V4 not priced
    ("deepseek-ai--DeepSeek-V4-Flash", "H200", {"tp_size": 4, "speculative_algorithm": "EAGLE3"}, "0.5.16",
     "--speculative-algorithm EAGLE3: SGLang asserts 'Only EAGLE and DSPARK speculative algorithms are supported for "
     "DeepseekV4ForCausalLM' (arg_groups/deepseek_v4_hook.py)", None),
    ("deepseek-ai--DeepSeek-V4-Flash", "H200", {"tp_size": 4, "dsv4_attn_backend": "trtllm"}, "0.5.20",
     "--dsv4-attn-backend trtllm on H200: SGLang asserts '--dsv4-attn-backend trtllm requires an SM100/SM103", "0.5.19"),
    ("deepseek-ai--DeepSeek-V4-Flash", "B200", {"tp_size": 4, "dsv4_attn_backend": "trtllm", "disaggregation_mode": "decode"},
     "0.5.20", "--dsv4-attn-backend trtllm in a prefill/decode role", "0.5.19"),
    ("zai-org--GLM-5.2-FP8", "B200", {"tp_size": 8, "quantization": "w8a8_fp8"}, "0.5.20",
     "--quantization w8a8_fp8 contradicts the checkpoint's quant_method fp8", None),
]


@pytest.mark.parametrize(("model", "gpu", "args", "oldest", "message", "before"), KEYED_CASES)
def test_each_refusal_holds_from_the_oldest_release_that_has_it(model, gpu, args, oldest, message, before):
    target = role(model, gpu=gpu, **args)
    with pytest.raises(EngineRefusal) as caught:
        estimate_role(_at(target, oldest), offline=True)
    assert f"role serve: {message}" in caught.value.message
    if before is not None:  # never refused on a guess in a release that does not have the check
        assert estimate_role(_at(target, before), offline=True).pool_tokens > 0


V4_SPEC = {"tp_size": 4, "speculative_num_steps": 3, "speculative_num_draft_tokens": 4}


@pytest.mark.parametrize(("args", "version", "message"), [
    # 0.5.13-0.5.18 run the V4 hook on the arguments as given, before handle_speculative_decoding turns NEXTN into
    # EAGLE: NEXTN is not "EAGLE"
    ({"speculative_algorithm": "NEXTN", "speculative_eagle_topk": 1}, "0.5.18",
     "--speculative-algorithm NEXTN: SGLang asserts 'Only EAGLE and DSPARK speculative algorithms are supported"),
    ({"speculative_algorithm": "NEXTN", "speculative_eagle_topk": 1}, "0.5.15",
     "--speculative-algorithm NEXTN: SGLang asserts 'Only EAGLE speculative algorithm is supported"),
    ({"speculative_algorithm": "DSPARK"}, "0.5.15",
     "--speculative-algorithm DSPARK: SGLang asserts 'Only EAGLE speculative algorithm is supported"),
])
def test_v4_speculative_settings_read_as_given_up_to_0_5_18(args, version, message):
    target = role("deepseek-ai--DeepSeek-V4-Flash", gpu="H200", **V4_SPEC, **args)
    with pytest.raises(EngineRefusal) as caught:
        estimate_role(_at(target, version), offline=True)
    assert f"role serve: {message}" in caught.value.message


@pytest.mark.parametrize("args", [
    {"speculative_algorithm": "NEXTN", "speculative_eagle_topk": 1},
    {"speculative_algorithm": "EAGLE"},
])
@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_v4_nextn_and_an_unset_topk_are_priced_from_0_5_19(args, version):
    # 0.5.19 on read the speculative settings through the resolution pipeline's view, as 0.5.21 and 0.5.23 do:
    # priced there, as before (never refused on a reading not confirmed)
    target = role("deepseek-ai--DeepSeek-V4-Flash", gpu="H200", **V4_SPEC, **args)
    assert estimate_role(_at(target, version), offline=True).pool_tokens > 0


@pytest.mark.parametrize("version", ["0.5.13", "0.5.17"])
def test_v4_eagle_with_its_topk_unset_stays_priced(version):
    # the hook's `topk == 1` fails on an unset top-k as read, but a logged V4 MTP run that states no top-k started
    # (sglang PR #28620, tests/bench/bench_dsv4_logs.py): never refused on a reading a run contradicts
    target = role("deepseek-ai--DeepSeek-V4-Flash", gpu="H200", **V4_SPEC, speculative_algorithm="EAGLE")
    assert estimate_role(_at(target, version), offline=True).pool_tokens > 0


@pytest.mark.parametrize("version", ["0.5.19", "0.5.9"])
def test_a_quantization_before_its_oldest_release_is_not_priced(version):
    # 0.5.19's override_quantization_method set differs from 0.5.20's: not refused, but never priced as FP8 (KV305)
    target = role("zai-org--GLM-5.2-FP8", gpu="B200", tp_size=8, quantization="w8a8_fp8")
    with pytest.raises(EstimateError, match="not understood by the estimate model for SGLang"):
        estimate_role(_at(target, version), offline=True)


@pytest.mark.parametrize(("model", "gpu", "args"), [
    ("zai-org--GLM-5.2-FP8", "B200", {"tp_size": 8, "kv_cache_dtype": "fp8_e4m3"}),
    ("zai-org--GLM-5.2-FP8", "H200", {"tp_size": 8, "kv_cache_dtype": "bf16"}),
    ("Qwen--Qwen3.5-27B", "B200", {"kv_cache_dtype": "mxfp8"}),
    ("Qwen--Qwen3-8B", "B200", {"kv_cache_dtype": "nvfp4"}),
    ("moonshotai--Kimi-K2.5", "B200", {"tp_size": 8, "kv_cache_dtype": "fp8_e4m3"}),
    ("deepseek-ai--DeepSeek-V4-Flash", "H200", {"tp_size": 4, "speculative_algorithm": "EAGLE",
                                               "speculative_eagle_topk": 1, "speculative_num_steps": 3,
                                               "speculative_num_draft_tokens": 4}),
    ("deepseek-ai--DeepSeek-V4-Flash", "H200", {"tp_size": 4, "swa_full_tokens_ratio": 1.0}),
])
def test_what_sglang_starts_is_still_priced(model, gpu, args):
    assert estimate_role(role(model, gpu=gpu, **args), offline=True).pool_tokens > 0


def _model_manifest(tmp_path: Path, model: str, gpu: str, args: str, roles: str = "server: {}") -> Path:
    from .helpers import model_config

    (tmp_path / "config.json").write_text(model_config(model).read_text())
    path = tmp_path / "manifest.yaml"
    path.write_text(
        f"name: refusal test\ncontext_length: 65536\nmodel:\n  path: {model.replace('--', '/')}\n"
        f"  config: config.json\nengine:\n  version: \"0.5.23\"\ngpu: {gpu}\nargs: {{{args}}}\nroles:\n  {roles}\n"
    )
    return path


@pytest.mark.parametrize(("model", "gpu", "args", "flag", "message"), [
    ("zai-org--GLM-5.2-FP8", "H200", "tp-size: 8, kv-cache-dtype: fp8_e5m2", "kv-cache-dtype",
     "--kv-cache-dtype fp8_e5m2 cannot serve a DeepSeek sparse-attention (DSA) model: SGLang asserts 'DeepSeek DSA "
     "only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype' (arg_groups/overrides.py _dsa_kv_cache_dtype_default)"),
    ("Qwen--Qwen3.5-27B", "H100", "kv-cache-dtype: nvfp4", "kv-cache-dtype",
     "--kv-cache-dtype nvfp4 on H100 (SM90): SGLang raises '--kv-cache-dtype=nvfp4 requires Blackwell SM100 or "
     "SM120.' (arg_groups/kv_cache_hook.py handle_kv4_compatibility)"),
    ("Qwen--Qwen3.5-27B", "B200", "kv-cache-dtype: nvfp4", "kv-cache-dtype",
     "--kv-cache-dtype nvfp4 with the triton attention backend: SGLang raises 'NVFP4 prefill supports an FP8 E4M3 "
     "workspace or native NVFP4, but backend 'triton' provides neither.' (arg_groups/kv_cache_hook.py "
     "handle_nvfp4_prefill_kv_dequant_dtype)"),
    ("moonshotai--Kimi-K2.5", "H200", "tp-size: 8, attention-backend: trtllm_mla", "attention-backend",
     "the trtllm_mla attention backend on H200: SGLang raises 'TRTLLM MLA backend is only supported on Blackwell "
     "GPUs (SM100/SM12x). Please use a different backend.' (arg_groups/overrides.py _mla_kv_cache_dtype_checks)"),
    ("deepseek-ai--DeepSeek-V4-Flash", "H200",
     "tp-size: 4, speculative-algorithm: EAGLE, speculative-eagle-topk: 2, speculative-num-steps: 3, "
     "speculative-num-draft-tokens: 4", "speculative-eagle-topk",
     "--speculative-eagle-topk 2: SGLang asserts 'Only EAGLE speculative algorithm with topk == 1 is supported for "
     "DeepseekV4ForCausalLM' (arg_groups/deepseek_v4_hook.py)"),
    ("deepseek-ai--DeepSeek-V4-Flash", "H200", "tp-size: 4, swa-full-tokens-ratio: 1.5", "swa-full-tokens-ratio",
     "--swa-full-tokens-ratio 1.5 is outside (0, 1]: SGLang raises '--swa-full-tokens-ratio should be in range "
     "(0, 1.0].' (arg_groups/kv_cache_hook.py)"),
    ("deepseek-ai--DeepSeek-V4-Flash", "H200", "tp-size: 4, speculative-algorithm: EAGLE3", "speculative-algorithm",
     "--speculative-algorithm EAGLE3: SGLang asserts 'Only EAGLE and DSPARK speculative algorithms are supported "
     "for DeepseekV4ForCausalLM' (arg_groups/deepseek_v4_hook.py)"),
])
def test_hook_refusals_end_to_end_are_exit_2_at_the_setting(tmp_path, kvcheck, model, gpu, args, flag, message):
    column = len("args: {") + args.index(flag) + 1
    manifest = _model_manifest(tmp_path, model, gpu, args)
    result = kvcheck("verify", str(manifest), "--mode", "estimate")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.splitlines()[0] == f"kvcheck: error: {manifest}:9:{column}: role server: {message}"


@pytest.mark.parametrize(("version", "model", "gpu", "args", "flag", "message"), [
    ("0.5.17", "Qwen--Qwen3.5-27B", "H100", "kv-cache-dtype: nvfp4", "kv-cache-dtype",
     "--kv-cache-dtype nvfp4 on H100 (SM90): SGLang raises '--kv-cache-dtype=nvfp4 requires Blackwell SM100 or "
     "SM120.' (server_args.py _handle_kv4_compatibility)"),
    ("0.5.17", "deepseek-ai--DeepSeek-V4-Flash", "H200",
     "tp-size: 4, speculative-algorithm: EAGLE, speculative-eagle-topk: 2, speculative-num-steps: 3, "
     "speculative-num-draft-tokens: 4", "speculative-eagle-topk",
     "--speculative-eagle-topk 2: SGLang asserts 'Only EAGLE speculative algorithm with topk == 1 is supported for "
     "DeepseekV4ForCausalLM' (arg_groups/deepseek_v4_hook.py)"),
    ("0.5.9", "zai-org--GLM-5.2-FP8", "H200", "tp-size: 8, kv-cache-dtype: fp8_e5m2", "kv-cache-dtype",
     "--kv-cache-dtype fp8_e5m2 cannot serve a DeepSeek sparse-attention (DSA) model: SGLang asserts 'DeepSeek DSA "
     "only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype' (server_args.py _set_default_nsa_kv_cache_dtype)"),
    ("0.5.13", "Qwen--Qwen3-8B", "H100", "swa-full-tokens-ratio: 1.5", "swa-full-tokens-ratio",
     "--swa-full-tokens-ratio 1.5 is outside (0, 1]: SGLang raises '--swa-full-tokens-ratio should be in range "
     "(0, 1.0].' (server_args.py _handle_cache_compatibility)"),
])
def test_a_declared_older_release_refuses_what_it_would_not_start(tmp_path, kvcheck, version, model, gpu, args, flag,
                                                                  message):
    column = len("args: {") + args.index(flag) + 1
    manifest = _model_manifest(tmp_path, model, gpu, args)
    manifest.write_text(manifest.read_text().replace('version: "0.5.23"', f'version: "{version}"'))
    result = kvcheck("verify", str(manifest), "--mode", "estimate")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.splitlines()[0] == f"kvcheck: error: {manifest}:9:{column}: role server: {message}"


@pytest.mark.parametrize(("version", "exit_code"), [("0.5.8", 0), ("0.5.9", 2)])
def test_a_release_before_the_check_is_priced_end_to_end(tmp_path, kvcheck, version, exit_code):
    manifest = _model_manifest(tmp_path, "Qwen--Qwen3-8B", "H100", "swa-full-tokens-ratio: 1.5")
    manifest.write_text(manifest.read_text().replace('version: "0.5.23"', f'version: "{version}"')
                        .replace("context_length: 65536", "context_length: 32768"))
    result = kvcheck("verify", str(manifest), "--mode", "estimate")
    assert result.exit_code == exit_code, (result.stdout, result.stderr)


@pytest.mark.parametrize(("model", "gpu", "args"), [
    ("zai-org--GLM-5.2-FP8", "B200", "tp-size: 8"),  # DSA: bf16 or fp8_e4m3 only (planned nvfp4 before)
    ("moonshotai--Kimi-K2.5", "B200", "tp-size: 8"),  # trtllm_mla: no FP4 (listed nvfp4 as holding before)
])
def test_plan_never_proposes_a_kv_dtype_sglang_refuses(tmp_path, kvcheck, model, gpu, args):
    result = kvcheck("plan", str(_model_manifest(tmp_path, model, gpu, args)), "--format", "json")
    assert result.exit_code in (0, 1), (result.stdout, result.stderr)
    assert '"nvfp4"' not in result.stdout
    assert "fp4_mx_block16" not in result.stdout


@pytest.mark.parametrize(("env", "exit_code"), [("", 2), ("  env: {SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: '1'}\n", 0)])
def test_a_context_length_above_the_derived_one_is_sglangs_refusal_unless_allowed(tmp_path, kvcheck, env, exit_code):
    # 8. was KV305 (exit 3); with the variable SGLang starts with the longer length, priced as given
    manifest = _model_manifest(tmp_path, "Qwen--Qwen3.5-27B", "B200", "tp-size: 2, context-length: 1048576")
    manifest.write_text(manifest.read_text().replace('version: "0.5.23"\n', f'version: "0.5.23"\n{env}')
                        .replace("context_length: 65536", "context_length: 1048576"))
    result = kvcheck("verify", str(manifest), "--mode", "estimate")
    assert result.exit_code == exit_code, (result.stdout, result.stderr)
    if exit_code == 2:
        assert result.stderr.splitlines()[0] == (
            f"kvcheck: error: {manifest}:9:20: role server: --context-length 1048576 is greater than the model's "
            "derived context_len 262144: SGLang raises 'Warning: User-specified context_length (1048576) is greater "
            "than the derived context_length (262144). ... To allow overriding this maximum, set the env var "
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1' (configs/model_config.py _derive_context_length)")


@pytest.mark.parametrize(("version", "env", "exit_code"), [
    ("0.4.0", "", 2), ("0.5.9", "", 2),  # the same _derive_context_length condition in every release read
    ("0.5.9", "  env: {SGLANG_IS_IN_CI: '1'}\n", 3),  # starts (is_in_ci, 0.5.9 on): not refused, not priced (KV305)
    ("0.4.0", "  env: {SGLANG_IS_IN_CI: '1'}\n", 2),  # 0.4.0 has no CI exemption
])
def test_a_context_length_above_the_derived_one_by_release(tmp_path, kvcheck, version, env, exit_code):
    manifest = _model_manifest(tmp_path, "Qwen--Qwen3-8B", "H100", "context-length: 1048576")
    manifest.write_text(manifest.read_text().replace('version: "0.5.23"\n', f'version: "{version}"\n{env}')
                        .replace("context_length: 65536", "context_length: 1048576"))
    result = kvcheck("verify", str(manifest), "--mode", "estimate")
    assert result.exit_code == exit_code, (result.stdout, result.stderr)
    if exit_code == 2:
        assert "--context-length 1048576 is greater than the model's derived context_len 40960" in result.stderr


@pytest.mark.parametrize(("quantization", "exit_code"), [("w8a8_fp8", 2), ("awq", 2), ("modelopt_fp4", 3), ("fp8", 0)])
def test_a_quantization_that_contradicts_an_fp8_checkpoint(tmp_path, kvcheck, quantization, exit_code):
    # 7. was ignored (priced as the checkpoint's FP8, exit 0); w8a8_fp8 pairs only with compressed-tensors
    manifest = _model_manifest(tmp_path, "zai-org--GLM-5.2-FP8", "B200", f"tp-size: 8, quantization: {quantization}")
    result = kvcheck("verify", str(manifest), "--mode", "estimate")
    assert result.exit_code == exit_code, (result.stdout, result.stderr)
    if exit_code == 2:
        assert result.stderr.splitlines()[0] == (
            f"kvcheck: error: {manifest}:9:20: role server: --quantization {quantization} contradicts the checkpoint's "
            "quant_method fp8: SGLang raises 'Quantization method specified in the model config (fp8) does not match "
            f"the quantization method specified in the `quantization` argument ({quantization}).' "
            "(configs/model_config.py _verify_quantization)")
    if exit_code == 3:
        text = " ".join(result.stdout.split())
        assert "KV305" in text and "--quantization modelopt_fp4 re-quantizes the FP8 checkpoint online" in text
