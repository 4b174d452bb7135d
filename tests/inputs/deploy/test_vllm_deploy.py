"""vLLM deployments read with vLLM's own parser, end to end: `kvcheck import` and `verify` on the real public
files of every format kvcheck reads vLLM from (tests/data/vllm-deploy, README.md gives each one's source), and
on fixtures of the parser rules (tests/inputs/deploy/fixtures/vllm)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import run_kvcheck

REAL = "tests/data/vllm-deploy"
FIX = "tests/inputs/deploy/fixtures/vllm"
EIGHT = [0, 1, 2, 3, 4, 5, 6, 7]
NEWEST = {"name": "vllm", "version": "0.33.0"}  # no image tag names the release: the newest catalogue reads it


def imported(*paths: str) -> Any:
    result = run_kvcheck("import", *paths, "--format", "json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def refused(*paths: str) -> list[str]:
    result = run_kvcheck("import", *paths)
    assert result.exit_code == 2, result.stdout + result.stderr
    return [line for line in result.stderr.splitlines() if line.startswith((REAL, FIX))]


# The manifest each real file deploys, exactly (compared by hand with the file; see README.md).
REAL_FILES: dict[tuple[str, ...], Any] = {
    ("lws-vllm-gpu.yaml",): {  # Ray over the LWS group: tp 8 x pp 2 on 2 pods of 8 GPUs
        "name": "vllm", "model": {"path": "meta-llama/Llama-3.1-405B-Instruct"},
        "engine": {"name": "vllm", "version": "0.8.5"},
        "roles": {"vllm": {"gpus": EIGHT, "args": {"tensor-parallel-size": 8, "pipeline-parallel-size": 2}}},
    },
    ("rbg-v1alpha1-single-node-vllm.yaml",): {
        "name": "vllm-inference", "context_length": 2048, "model": {"path": "/models/Qwen3-32B"},
        "engine": {"name": "vllm", "version": "0.10.0"},
        "roles": {"vllm-inference": {"gpus": [0, 1], "args": {
            "trust-remote-code": True, "max-model-len": 2048, "gpu-memory-utilization": 0.85,
            "tensor-parallel-size": 2}}},
    },
    ("llm-d-optimized-baseline-vllm-deployment.yaml",): {
        "name": "optimized-baseline-nvidia-gpu-vllm-decode", "context_length": 131072,
        "model": {"path": "Qwen/Qwen3-32B"}, "engine": {"name": "vllm", "version": "0.19.1"},
        "roles": {"optimized-baseline-nvidia-gpu-vllm-decode": {"gpus": [0, 1], "args": {
            "disable-access-log-for-endpoints": "/health,/metrics,/v1/models", "tensor-parallel-size": 2,
            "max-model-len": 131072,
            "hf-overrides": '{"rope_scaling":{"rope_type":"yarn","factor":3.2,"original_max_position_embeddings":40960}}',
        }}},
    },
    ("slurm-codellama13b-vllm-server.sh",): {
        "name": "slurm-codellama13b-vllm-server", "model": {"path": "codellama/CodeLlama-13b-hf"},
        "engine": NEWEST, "gpu": "A6000",
        "roles": {"server": {"gpus": [0, 1, 2, 3], "args": {"tensor-parallel-size": 4, "max-num-seqs": 2000}}},
    },
    ("production-stack-values-02-basic-config.yaml",): {
        "name": "llama3", "context_length": 4096, "model": {"path": "meta-llama/Llama-3.1-8B-Instruct"},
        "engine": NEWEST,
        "roles": {"llama3": {"gpus": [0], "args": {
            "enable-chunked-prefill": False, "enable-prefix-caching": False, "max-model-len": 4096,
            "dtype": "bfloat16", "gpu-memory-utilization": 0.8}}},
    },
    ("production-stack-values-16-disagg-prefill.yaml",): {
        "name": "production-stack-values-16-disagg-prefill", "context_length": 32000,
        "model": {"path": "meta-llama/Llama-3.1-8B-Instruct"}, "engine": NEWEST,
        "roles": {
            "llama-prefill": {"args": {"enable-prefix-caching": True, "max-model-len": 32000, "kv-transfer-config": {
                "kv_connector": "LMCacheConnectorV1", "kv_role": "kv_producer",
                "kv_connector_extra_config": {"discard_partial_chunks": False, "lmcache_rpc_port": "sender"}}}},
            "llama-decode": {"args": {"enable-prefix-caching": True, "max-model-len": 32000, "kv-transfer-config": {
                "kv_connector": "LMCacheConnectorV1", "kv_role": "kv_consumer",
                "kv_connector_extra_config": {"discard_partial_chunks": False, "lmcache_rpc_port": "receiver"}}}},
        },
    },
    ("production-stack-prefill-deploy.yaml",): {  # a bash script in a Deployment, flags through $VARs
        "name": "prefill", "context_length": 512, "model": {"path": "/var/mdl/YOUR-MODEL-PATH"}, "engine": NEWEST,
        "roles": {"prefill": {"args": {"served-model-name": ["YOUR-MODEL-NAME"], "max-model-len": 512}}},
    },
    ("kserve-llmisvc-qwen2-7b-nvidia.yaml",): {
        "name": "qwen2-7b-instruct-nvidia", "model": {"path": "Qwen/Qwen2.5-7B-Instruct"}, "engine": NEWEST,
        "roles": {"qwen2-7b-instruct-nvidia": {"gpus": [0], "args": {}}},
    },
    ("kserve-llmisvc-pd-disaggregation.yaml", "kserve-llmisvc-config-pd-disagg.yaml"): {  # baseRefs layered
        "name": "gpt-oss-20b", "model": {"path": "pvc://gpt-oss-20b-pvc"}, "engine": NEWEST,
        "roles": {
            "decode": {"gpus": [0], "args": {"kv-transfer-config": {"kv_connector": "NixlConnector",
                                                                     "kv_role": "kv_consumer"}}},
            "prefill": {"gpus": [0], "args": {"kv-transfer-config": {"kv_connector": "NixlConnector",
                                                                      "kv_role": "kv_producer"}}},
        },
    },
    ("kserve-llmisvc-dp-ep-deepseek-r1.yaml",): {
        "name": "deepseek-r1-0528", "context_length": 8192, "model": {"path": "pvc://llm-test-pvc-deepseek"},
        "engine": NEWEST,
        "roles": {"deepseek-r1-0528": {"gpus": EIGHT, "args": {
            "data-parallel-size": 32, "data-parallel-size-local": 8, "enable-expert-parallel": True,
            "tensor-parallel-size": 1, "gpu-memory-utilization": 0.95, "max-model-len": 8192, "enforce-eager": True}}},
    },
    ("dynamo-vllm-disagg-multinode.yaml",): {
        "name": "vllm-disagg", "model": {"path": "Qwen/Qwen3-0.6B"}, "engine": NEWEST,
        "roles": {
            "decode": {"gpus": [0], "args": {"nnodes": 2, "tensor-parallel-size": 2, "kv-transfer-config": {
                "kv_connector": "NixlConnector", "kv_role": "kv_both", "engine_id": "vllm-disagg-decode-engine-0abc123"}}},
            "prefill": {"gpus": [0], "args": {"nnodes": 2, "tensor-parallel-size": 2, "kv-transfer-config": {
                "kv_connector": "NixlConnector", "kv_role": "kv_both",
                "engine_id": "vllm-disagg-prefill-engine-0abc123"}}},
        },
    },
    ("aibrix-stormservice-vllm-1p1d.yaml",): {
        "name": "vllm-1p1d", "model": {"path": "/models/Qwen3-8B"}, "engine": NEWEST,
        "roles": {role: {"gpus": [0], "args": {
            "uvicorn-log-level": "warning", "served-model-name": ["qwen3-8B"],
            "kv-transfer-config": {"kv_connector": "NixlConnector", "kv_role": "kv_both"}},
            "env": {"PYTHONHASHSEED": "1047", "VLLM_SERVER_DEV_MODE": "1", "VLLM_NIXL_SIDE_CHANNEL_HOST": "0.0.0.0",
                    "VLLM_NIXL_SIDE_CHANNEL_PORT": "5558", "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
                    "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0",
                    "NCCL_IB_DISABLE": "0", "NCCL_IB_GID_INDEX": "7", "NCCL_DEBUG": "INFO", "UCX_TLS": "^gga"}}
            for role in ("prefill", "decode")},
    },
}


@pytest.mark.parametrize("files", list(REAL_FILES), ids=lambda files: files[0])
def test_import_reads_what_each_public_file_deploys(files: tuple[str, ...]) -> None:
    got = imported(*(f"{REAL}/{name}" for name in files))
    expected = REAL_FILES[files]
    for name, role in got["roles"].items():
        if "env" not in expected["roles"][name]:
            role.pop("env", None)  # the container's environment is compared where the test states it
    assert got == expected


def test_an_ome_vllm_runtime_is_read_without_its_model_and_with_its_image_release() -> None:
    got = imported(f"{REAL}/ome-vllm-llama-3-1-8b-instruct-rt.yaml")
    assert (got["engine"], got["context_length"], got["model"]) == ({"name": "vllm", "version": "0.9.0.1"}, 131072, {})
    args = got["roles"]["vllm-llama-3-1-8b-instruct"]["args"]
    assert (args["tensor-parallel-size"], args["max-model-len"], args["gpu-memory-utilization"]) == (1, 131072, 0.9)


@pytest.mark.parametrize(("files", "errors"), [
    # refused by the release the file pins (or, with no pin, the newest catalogue)
    (("production-stack-gie-gpu-deployment.yaml",), [
        f"{REAL}/production-stack-gie-gpu-deployment.yaml:30:13: 'compilation-config' takes a JSON object in vLLM "
        "0.33.0 (its parser refuses --compilation-config 3, exit 2); the optimization level -O3 is written "
        "`optimization-level: 3`. The files do not name the vLLM release, so kvcheck read them with the flags of "
        "0.33.0, the newest it knows: if the deployment runs an older release, pass --sglang-version"]),
    (("production-stack-values-15-a-raycluster.yaml",), [
        f"{REAL}/production-stack-values-15-a-raycluster.yaml:22:7: a modelSpec with raySpec runs vLLM on a KubeRay "
        "cluster (helm/templates/ray-cluster.yaml), which kvcheck does not read; check the rendered RayCluster's head "
        "command with --cmd, or a manifest"]),
])
def test_what_vllm_would_refuse_is_exit_2_at_its_place(files: tuple[str, ...], errors: list[str]) -> None:
    assert refused(*(f"{REAL}/{name}" for name in files)) == errors


@pytest.mark.parametrize(("name", "release", "arg"), [
    ("ome-vllm-llama-3-1-405b-instruct-fp8-rt.yaml", "0.9.0.1", ("cuda-graph-sizes", [256])),
    ("aibrix-standalone-compose.yml", "0.6.6", ("disable-log-requests", True)),
])
def test_a_file_is_checked_against_the_release_its_image_pins(name: str, release: str, arg: tuple[str, object]) -> None:
    """Flags 0.32.0 removed (`--cuda-graph-sizes`, `--disable-log-requests`) are accepted where the image pins a
    release that had them: 0.9.0.1's own catalogue, and 0.8.0's (the oldest, with a note) for 0.6.6."""
    got = imported(f"{REAL}/{name}")
    assert got["engine"] == {"name": "vllm", "version": release}
    assert [role["args"][arg[0]] for role in got["roles"].values()] == [arg[1]] * len(got["roles"])


def test_vllms_parser_rules_in_a_deployment() -> None:
    got = imported(f"{FIX}/deployment-parser-rules.yaml")
    assert got == {
        "name": "llama-decode", "context_length": 32768, "model": {"path": "meta-llama/Llama-3.1-8B-Instruct"},
        "engine": {"name": "vllm", "version": "0.32.0"},
        "roles": {"llama-decode": {"gpus": [0, 1], "args": {
            "tensor-parallel-size": 2, "max-model-len": 32768, "enable-prefix-caching": False,
            "kv-transfer-config": {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}, "max-num-seqs": 64}}},
    }


def test_import_comments_each_vllm_value_with_its_place() -> None:
    result = run_kvcheck("import", f"{FIX}/deployment-parser-rules.yaml")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "  name: vllm  # the roles run vLLM" in lines
    assert f"  path: meta-llama/Llama-3.1-8B-Instruct  # {FIX}/deployment-parser-rules.yaml:15:11" in lines
    assert f"      max-model-len: 32768  # {FIX}/deployment-parser-rules.yaml:18:27" in lines
    assert f"      tensor-parallel-size: 2  # {FIX}/deployment-parser-rules.yaml:17:11" in lines


def test_unknown_vllm_flags_in_a_script_are_exit_2_with_did_you_mean() -> None:
    assert refused(f"{FIX}/deployment-unknown-flag.yaml") == [
        f"{FIX}/deployment-unknown-flag.yaml:16:13: unknown vLLM flag 'max-modle-len' (vLLM 0.32.0) "
        "(did you mean 'max-model-len'?)",
        f"{FIX}/deployment-unknown-flag.yaml:17:13: unknown vLLM flag 'kv-transfer-confg' in "
        "'--kv-transfer-confg.kv_role' (vLLM 0.32.0) (did you mean 'kv-transfer-config'?)",
    ]


def test_a_config_file_beside_the_compose_file_is_read_and_the_command_line_wins() -> None:
    got = imported(f"{FIX}/compose-config/compose.yaml")
    assert got["roles"]["qwen"] == {"gpus": [0, 1], "args": {
        "max-model-len": 16384, "tensor-parallel-size": 2, "gpu-memory-utilization": 0.85,
        "enable-chunked-prefill": True,
        "kv-transfer-config": {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}}}
    yaml_out = run_kvcheck("import", f"{FIX}/compose-config/compose.yaml").stdout
    assert f"      tensor-parallel-size: 2  # {FIX}/compose-config/vllm-config.yaml:2:1 (--config vllm-config.yaml)" \
        in yaml_out.splitlines()


def test_a_config_files_unknown_key_and_dropped_false_are_exit_2_at_their_own_lines() -> None:
    # `KEY: false` for a --KEY/--no-KEY flag: real vLLM 0.32.0's loader drops it (measured: enable_prefix_caching
    # stays None, while --no-enable-prefix-caching on the command line gives False)
    assert refused(f"{FIX}/compose-bad-config/compose.yaml") == [
        f"{FIX}/compose-bad-config/vllm-config.yaml:2:1: gpu-memory-utilisation: unknown vLLM flag "
        "'gpu-memory-utilisation' (vLLM 0.32.0) (did you mean 'gpu-memory-utilization'?)",
        f"{FIX}/compose-bad-config/vllm-config.yaml:3:1: enable-prefix-caching: 'enable-prefix-caching: false' in a "
        "--config file is dropped by vLLM 0.32.0 (its config loader finds no --no-enable-prefix-caching option), so "
        "vLLM's default applies; pass --no-enable-prefix-caching on the command line instead"]


def test_a_vllm_config_key_the_chart_ignores_is_refused() -> None:
    (error,) = refused(f"{FIX}/production-stack-unknown-key.yaml")
    assert error.startswith(f"{FIX}/production-stack-unknown-key.yaml:9:7: maxModelLength: vllmConfig.maxModelLength "
                            "is not a key the production-stack chart reads, so it would be ignored (did you mean "
                            "'maxModelLen'?)")


def test_a_file_mixing_engines_gives_each_role_its_engine() -> None:
    (error,) = refused(f"{FIX}/mixed-engines.yaml")
    assert error == (f"{FIX}/mixed-engines.yaml:23:15: role 'vllm-role' runs vLLM, role 'sglang-role' SGLang at "
                     f"{FIX}/mixed-engines.yaml:14:15; a manifest holds one engine (kvcheck verify checks the files "
                     "directly, each role with its own engine)")
    result = run_kvcheck("verify", f"{FIX}/mixed-engines.yaml", "--mode", "estimate", "--gpu", "H100",
                         "--context-length", "32768", "--model-config", "tests/data/models/Qwen--Qwen3-8B.json",
                         "--format", "json")
    report = json.loads(result.stdout)
    roles = {role["name"]: role for role in report["roles"]}
    assert roles["sglang-role"]["status"] == "pass"  # SGLang's estimate: one H100 holds the 8B model's window
    assert roles["sglang-role"]["pool_tokens"] > 0
    assert roles["vllm-role"]["status"] == "pass"  # vLLM's own sizing (engines/vllm/sizing) of the same model
    assert roles["vllm-role"]["pool_tokens"] > 0
    assert roles["vllm-role"]["max_input_tokens"] == 32768  # vLLM refuses max_model_len tokens and more
    assert roles["sglang-role"]["max_input_tokens"] == 32762
    assert result.exit_code == 0


def test_estimate_on_a_vllm_deployment_without_the_models_config_says_it_cannot_estimate() -> None:
    result = run_kvcheck("verify", f"{REAL}/lws-vllm-gpu.yaml", "--mode", "estimate", "--gpu", "H100",
                         "--context-length", "131072", "--format", "json")
    report = json.loads(result.stdout)
    assert (result.exit_code, report["verdict"]) == (3, "error")
    assert [f["rule"] for f in report["findings"]] == ["KV305"]  # 0.8.5, pinned by its image, has its catalogue


def test_dry_run_prints_the_vllm_serve_line_the_deployment_runs() -> None:
    result = run_kvcheck("verify", f"{REAL}/rbg-v1alpha1-single-node-vllm.yaml", "--dry-run",
                         "--launcher", "kubernetes")
    assert result.exit_code == 0, result.stderr
    words = [line.strip().removeprefix("- ").strip("'") for line in result.stdout.splitlines()]
    start = words.index("vllm")
    assert words[start:start + 10] == ["vllm", "serve", "/models/Qwen3-32B", "--trust-remote-code",
                                       "--max-model-len", "2048", "--gpu-memory-utilization", "0.85",
                                       "--tensor-parallel-size", "2"]
    assert "image: vllm/vllm-openai:v0.10.0" in [line.strip() for line in result.stdout.splitlines()]


def test_a_kserve_base_config_not_among_the_inputs_is_named() -> None:
    assert refused(f"{REAL}/kserve-llmisvc-pd-disaggregation.yaml") == [
        f"{REAL}/kserve-llmisvc-pd-disaggregation.yaml:13:7: baseRefs names LLMInferenceServiceConfig "
        "'llmisvc-config-pd-disagg', which is not among the inputs; it may set the container's command, image or "
        "arguments: pass its file in the same command"]


def test_the_imported_vllm_manifest_loads_back(tmp_path: Any) -> None:
    manifest = tmp_path / "kvcheck.yaml"
    result = run_kvcheck("import", f"{FIX}/deployment-parser-rules.yaml", "-o", str(manifest))
    assert result.exit_code == 0, result.stderr
    # 2 GPUs for -tp 2: vLLM's own count (tensor x pipeline x data parallel), not SGLang's tp-size
    result = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    report = json.loads(result.stdout)
    assert (result.exit_code, [r["name"] for r in report["roles"]]) == (3, ["llama-decode"])
    assert "KV305" in [f["rule"] for f in report["findings"]]


def test_two_leaderworkersets_with_kv_roles_are_one_prefill_decode_deployment() -> None:
    got = imported(f"{FIX}/lws-pd.yaml")
    # one deployment (kv_role, as --disaggregation-mode for SGLang); no common window, since the roles differ;
    # the worker's --headless and the placement flags are not compared with the leader (no KV501)
    assert "context_length" not in got
    assert (got["name"], list(got["roles"])) == ("qwen", ["qwen-prefill", "qwen-decode"])
    for role, window, kv_role in (("qwen-prefill", 131072, "kv_producer"), ("qwen-decode", 65536, "kv_consumer")):
        assert got["roles"][role] == {"gpus": EIGHT, "args": {
            "tensor-parallel-size": 16, "nnodes": 2, "max-model-len": window,
            "kv-transfer-config": {"kv_connector": "NixlConnector", "kv_role": kv_role}}}
    result = run_kvcheck("import", f"{FIX}/lws-pd.yaml")
    assert "KV501" not in result.stdout + result.stderr
