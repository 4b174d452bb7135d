"""vLLM deployments read with vLLM's own parser, end to end: `kvcheck import` and `verify` on the real public
files of every format kvcheck reads vLLM from (tests/data/vllm-deploy, README.md gives each one's source), and
on fixtures of the parser rules (tests/inputs/deploy/fixtures/vllm)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

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
        "roles": {"vllm": {"gpus": EIGHT, "nodes": 2,  # the group's pods form the Ray cluster: LWS size
                           "args": {"tensor-parallel-size": 8, "pipeline-parallel-size": 2}}},
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
        # the llm-d.ai/role label makes it the decode side of a pair, which its kv_both transfer does not say
        "roles": {"optimized-baseline-nvidia-gpu-vllm-decode": {"gpus": [0, 1], "side": "decode", "args": {
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
            # each side from subComponentType: the kv_both transfer states none
            "decode": {"gpus": [0], "side": "decode", "args": {"nnodes": 2, "tensor-parallel-size": 2,
                "kv-transfer-config": {"kv_connector": "NixlConnector", "kv_role": "kv_both",
                                       "engine_id": "vllm-disagg-decode-engine-0abc123"}}},
            "prefill": {"gpus": [0], "side": "prefill", "args": {"nnodes": 2, "tensor-parallel-size": 2, "kv-transfer-config": {
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
        "0.33.0, the newest it knows: if the deployment runs an older release, pass --engine-version"]),
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


@pytest.mark.parametrize(("name", "config", "gpus", "pool"), [
    # one instance over the LWS group's 2 pods (Ray): 8 GPUs x 2 nodes for tp 8 x pp 2, 1 x 2 for tp 2
    ("lws-vllm-gpu.yaml", "meta-llama--Meta-Llama-3.1-405B.json", EIGHT, 616_544),
    ("rbg-v1alpha1-multi-nodes-vllm.yaml", "Qwen--Qwen3-32B.json", [0], 283_200),
])
def test_an_imported_multi_node_ray_group_verifies_as_its_file_does(
        tmp_path: Any, name: str, config: str, gpus: list[int], pool: int) -> None:
    manifest = tmp_path / "kvcheck.yaml"
    options = ("--gpu", "H100", "--context-length", "32768", "--model-config", f"tests/data/models/{config}")
    result = run_kvcheck("import", f"{REAL}/{name}", *options, "-o", str(manifest))
    assert result.exit_code == 0, result.stderr
    (role,) = yaml.safe_load(manifest.read_text())["roles"].values()
    assert (role["gpus"], role["nodes"], "nnodes" in role["args"]) == (gpus, 2, False)  # 0.8.5/0.10.0: no --nnodes
    assert f"    nodes: 2  # {REAL}/{name}:8:11 (LeaderWorkerSet size)" in manifest.read_text().splitlines()
    from_manifest = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    from_file = run_kvcheck("verify", f"{REAL}/{name}", *options, "--mode", "estimate", "--format", "json")
    for result in (from_manifest, from_file):
        report = json.loads(result.stdout)
        assert (result.exit_code, report["verdict"]) == (0, "pass"), result.stderr
        assert [r["pool_tokens"] for r in report["roles"]] == [pool]


def test_the_import_md_multi_node_line_runs_as_written(tmp_path: Any) -> None:
    """docs/import.md's `kvcheck import ... -o kvcheck.yaml && kvcheck verify kvcheck.yaml ...`, word for word
    (the manifest written under tmp_path instead of the checkout)."""
    from tests.conftest import REPO_ROOT

    text = " ".join((REPO_ROOT / "docs" / "import.md").read_text().split())
    start = text.index("`kvcheck import tests/data/vllm-deploy/lws-vllm-gpu.yaml")
    line = text[start + 1 : text.index("`", start + 1)]
    steps = [step.split() for step in line.split(" && ")]
    assert [step[:2] for step in steps] == [["kvcheck", "import"], ["kvcheck", "verify"]]
    manifest = str(tmp_path / "kvcheck.yaml")
    imported_ = run_kvcheck(*[manifest if word == "kvcheck.yaml" else word for word in steps[0][1:]])
    assert imported_.exit_code == 0, imported_.stderr
    verified = run_kvcheck(*[manifest if word == "kvcheck.yaml" else word for word in steps[1][1:]], "--format", "json")
    report = json.loads(verified.stdout)
    assert (verified.exit_code, report["verdict"]) == (0, "pass"), verified.stderr
    assert [r["pool_tokens"] for r in report["roles"]] == [616_544]
    assert "gives the file's own pool, 616,544 tokens" in text


MANIFEST_TEXT = """\
context_length: 32768
model: {{path: org/m}}
engine: {{name: {engine}, version: "{version}"}}
roles:
  server:
    gpus: [0, 1]
    nodes: {nodes}
    args: {args}
"""


@pytest.mark.parametrize(("engine", "version", "nodes", "args", "error"), [
    ("vllm", "0.10.0", 2, "{tensor-parallel-size: 2}",
     "roles.server.gpus: 2 GPU(s) x 2 node(s) = 4, but the role's parallel settings need 2 (the product of its "
     "parallel sizes: tensor-parallel-size 2)"),
    ("vllm", "0.32.0", 2, "{tensor-parallel-size: 4, nnodes: 2}",
     "roles.server.nodes: both nodes and args.nnodes state the role's node count: keep args.nnodes for vLLM's "
     "multiprocessing launch, or nodes for a Ray cluster its pods form, not both"),
    ("sglang", "0.5.23", 2, "{tp-size: 4}",
     "roles.server.nodes: SGLang spans nodes with its own flag: state args.nnodes instead of nodes"),
    ("vllm", "0.10.0", 0, "{tensor-parallel-size: 2}", "roles.server.nodes: Input should be greater than or equal to 1 (got 0)"),
])
def test_a_manifests_nodes_is_for_an_engine_spanning_its_group_once(
        tmp_path: Any, engine: str, version: str, nodes: int, args: str, error: str) -> None:
    manifest = tmp_path / "kvcheck.yaml"
    manifest.write_text(MANIFEST_TEXT.format(engine=engine, version=version, nodes=nodes, args=args))
    result = run_kvcheck("verify", str(manifest), "--mode", "estimate")
    assert result.exit_code == 2, result.stdout + result.stderr
    assert [line.split(": ", 1)[1] for line in result.stderr.splitlines() if line.startswith(str(manifest))] == [error]


def test_a_vllm_deployment_without_a_window_names_vllms_window_flag() -> None:
    result = run_kvcheck("verify", f"{REAL}/rbg-v1alpha1-multi-nodes-vllm.yaml", "--mode", "estimate")
    assert result.exit_code == 2
    assert result.stderr == (
        f"kvcheck: error: {REAL}/rbg-v1alpha1-multi-nodes-vllm.yaml: the files do not state the context window to "
        "check (vllm-multi-nodes: the roles set no common --max-model-len)\n"
        "kvcheck: hint: pass --context-length N (the window you advertise), or an overlay manifest's context_length\n")


def test_a_vllm_release_no_file_names_is_stated_with_the_engine_neutral_option() -> None:
    result = run_kvcheck("verify", f"{REAL}/production-stack-values-02-basic-config.yaml", "--mode", "estimate",
                         "--gpu", "H100", "--model-config", "tests/data/models/meta-llama--Meta-Llama-3.1-8B.json",
                         "--format", "json")
    report = json.loads(result.stdout)
    assert (result.exit_code, report["verdict"]) == (0, "pass")
    assert [(f["rule"], f["message"], f["hint"]) for f in report["findings"]] == [(
        "KV204", "the files do not name the vLLM release (image vllm/vllm-openai:latest has the floating tag 'latest', "
        "which pins no vLLM release; pass --engine-version); role 'llama3' was read with the flags of 0.33.0, the "
        "newest release kvcheck knows",
        "state the release: --engine-version or the overlay's engine.version")]


UNPINNED = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: qwen
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: registry.example.com/vllm:prod
          command: ["vllm", "serve", "Qwen/Qwen3-8B", "--max-modle-len", "32768"]
"""


def test_a_vllm_flag_refused_by_the_assumed_release_says_so_in_vllms_words(tmp_path: Any) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(UNPINNED)
    result = run_kvcheck("import", str(path))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[1] == (
        f"{path}:11:55: unknown vLLM flag 'max-modle-len' (vLLM 0.33.0) (did you mean 'max-model-len'?). The files "
        "do not name the vLLM release, so kvcheck read them with the flags of 0.33.0, the newest it knows: if the "
        "deployment runs an older release, pass --engine-version")
    assert "SGLang" not in result.stderr and "--context-length" not in result.stderr


def test_a_file_with_no_server_names_every_engine_kvcheck_reads(tmp_path: Any) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: vllm}\n")
    result = run_kvcheck("import", str(path))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"kvcheck: error: {path}: no engine server (SGLang, vLLM) in a supported kind; "
                                    f"the input holds: Service (v1) at {path}:1\n")


LLMD = f"{REAL}/llm-d-modelservice"
LLMD_ENV = {"CUDA_VISIBLE_DEVICES": "0", "UCX_TLS": "cuda_ipc,cuda_copy,tcp", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600",
            "VLLM_LOGGING_LEVEL": "DEBUG", "DP_SIZE": "1", "TP_SIZE": "1", "DP_SIZE_LOCAL": "1",
            "HF_HOME": "/model-cache"}
LLMD_ARGS = {"served-model-name": ["facebook/opt-125m"], "enforce-eager": True,
             "kv-transfer-config": {"kv_connector": "NixlConnector", "kv_role": "kv_both"}}


def test_llm_d_modelservice_values_are_read_as_the_chart_renders_them() -> None:
    """The chart's own example values and the output it renders from them (examples/output-pd.yaml, read as the
    Deployments it holds) give the same servers: the chart's command line (vllm serve MODEL --port P
    --served-model-name NAME ARGS), its parallelism env and HF_HOME, one GPU from parallelism."""
    values = imported(f"{LLMD}-values-pd.yaml")
    rendered = imported(f"{LLMD}-output-pd.yaml")
    # each side from the chart's llm-d.ai/role label: vLLM's kv_both transfer states none
    expected = {role: {"gpus": [0], "side": role, "args": LLMD_ARGS, "env": LLMD_ENV} for role in ("decode", "prefill")}
    assert values == {"name": "llm-d-modelservice-values-pd", "model": {"path": "facebook/opt-125m"},
                      "engine": NEWEST, "roles": expected}
    # the rendered names carry the Helm release (pd) and the chart's name, which the values do not
    assert {name.rsplit("-", 1)[-1]: role for name, role in rendered["roles"].items()} == expected
    assert (rendered["model"], rendered["engine"]) == (values["model"], values["engine"])


def test_llm_d_modelservice_parallelism_sets_the_flags_and_the_gpus_with_their_places() -> None:
    name = f"{LLMD}-values-heterogeneous-pd.yaml"
    got = imported(name)
    assert (got["roles"]["decode"]["gpus"], got["roles"]["decode"]["args"]["tensor-parallel-size"]) == ([0, 1], 2)
    assert got["roles"]["decode"]["env"]["TP_SIZE"] == "2"
    assert (got["roles"]["prefill"]["gpus"], "tensor-parallel-size" in got["roles"]["prefill"]["args"]) == ([0], False)
    lines = run_kvcheck("import", name).stdout.splitlines()
    # decode asks for its GPUs through DRA: the chart's ResourceClaimTemplate counts dataLocal x tensor
    assert f"    gpus: [0, 1]  # {name}:43:5 (ResourceClaimTemplate count (DRA) = parallelism dataLocal x tensor)" in lines
    assert f"      tensor-parallel-size: 2  # {name}:43:13" in lines
    # decode's CUDA_VISIBLE_DEVICES "0" shows vLLM one of its two GPUs: tests/inputs/deploy/test_pod_gpus.py
    result = run_kvcheck("verify", name, "--mode", "estimate", "--gpu", "H100", "--context-length", "32768",
                         "--model-config", "tests/data/models/Qwen--Qwen3-8B.json")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[1].startswith(f"{name}:58:16: role 'decode': CUDA_VISIBLE_DEVICES='0' ")


def test_llm_d_modelservice_values_running_the_simulator_are_refused_plainly() -> None:
    assert refused(f"{LLMD}-values-cpu.yaml") == [
        f"{LLMD}-values-cpu.yaml:32:19: the decode container runs llm-d's inference simulator "
        "(ghcr.io/llm-d/llm-d-inference-sim:latest), not an engine: it has no KV cache to check"]


@pytest.mark.parametrize(("values", "error"), [
    ("modelArtifacts: {uri: 'oci://registry/m'}\ndecode:\n  containers:\n  - {name: vllm, image: x, modelCommand: vllmServe}\n",
     "1:23: modelArtifacts.uri oci://: the chart fails on it (\"arguments for oci:// not implemented\")"),
    ("modelArtifacts: {uri: 'hf://{{ .Values.nope }}'}\ndecode:\n  containers:\n  - {name: vllm, image: x, modelCommand: vllmServe}\n",
     "1:23: {{ .Values.nope }}: .Values.nope is not a value the file sets"),
    ("modelArtifacts: {uri: 'hf://org/m'}\ndecode:\n  containers:\n  - {name: vllm, image: x, modelCommand: vllmserve}\n",
     "4:42: modelCommand 'vllmserve': the chart accepts vllmServe, imageDefault, custom"),
])
def test_llm_d_modelservice_values_the_chart_would_refuse_are_exit_2(tmp_path: Any, values: str, error: str) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(values)
    result = run_kvcheck("import", str(path))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[1] == f"{path}:{error}"


def test_an_inference_pool_is_tied_to_the_servers_its_selector_picks() -> None:
    name = f"{FIX}/inferencepool.yaml"
    lines = run_kvcheck("import", name).stdout.splitlines()
    assert lines[1:3] == [
        f"# InferencePool 'qwen-pool' ({name}:9:5) routes to role 'vllm-qwen': its pods carry app=vllm-qwen",
        f"# InferencePool 'elsewhere' ({name}:23:5) selects pods labelled app=other-servers; no server among the "
        "inputs carries those labels, so kvcheck cannot tell which servers it routes to (pass their files in the "
        "same command)"]


def test_an_inference_pool_beside_llm_d_values_routes_to_the_pods_the_chart_labels() -> None:
    pool = f"{FIX}/inferencepool-llm-d.yaml"
    result = run_kvcheck("import", f"{LLMD}-values-pd.yaml", pool)
    assert result.exit_code == 0, result.stderr
    told = [line for line in result.stdout.splitlines() if line.startswith("# InferencePool")]
    assert told == [
        f"# InferencePool 'opt-pool' ({pool}:11:5) routes to role 'decode': its pods carry "
        "llm-d.ai/inference-serving=true",
        f"# InferencePool 'opt-pool' ({pool}:11:5) routes to role 'prefill': its pods carry "
        "llm-d.ai/inference-serving=true",
        f"# InferencePool 'by-expression' ({pool}:26:5): its selector has matchExpressions, which kvcheck does not "
        "evaluate, so kvcheck cannot tell which servers it routes to"]


def test_inference_pools_whose_pods_run_no_engine_say_so() -> None:
    name = f"{REAL}/gaie-conformance-resources-base.yaml"
    result = run_kvcheck("import", name)
    assert result.exit_code == 2
    assert (f". InferencePool 'primary-inference-pool' ({name}:205:5) selects pods labelled "
            f"app=primary-inference-model-server: those of Deployment 'primary-inference-model-server-deployment' "
            f"({name}:61:1), which starts no engine server. ") in result.stderr
    assert result.stderr.count("InferencePool '") == 4 and "1 more InferencePool(s) not shown" in result.stderr


def test_inference_pools_whose_pods_run_no_engine_say_so_beside_another_server() -> None:
    """The echo servers' Deployment is among the inputs: that is said whatever other files come with it."""
    name = f"{REAL}/gaie-conformance-resources-base.yaml"
    result = run_kvcheck("import", name, f"{REAL}/production-stack-prefill-deploy.yaml")
    assert result.exit_code == 0, result.stderr
    told = [line for line in result.stdout.splitlines() if line.startswith("# InferencePool")]
    assert len(told) == 5
    assert told[0] == (
        f"# InferencePool 'primary-inference-pool' ({name}:205:5) selects pods labelled "
        "app=primary-inference-model-server: those of Deployment 'primary-inference-model-server-deployment' "
        f"({name}:61:1), which starts no engine server, so no role among the inputs serves it")
    assert not any("pass their files" in line for line in told)


def test_a_production_stack_raycluster_spec_is_one_vllm_instance_over_the_ray_pods(tmp_path: Any) -> None:
    """raySpec: the chart's RayCluster head runs `vllm serve ... --distributed-executor-backend ray` (its
    vllm-entrypoint.sh) over the head and replicaCount workers: pp 2 on 1 GPU x 2 pods."""
    name = f"{REAL}/production-stack-values-15-a-raycluster.yaml"
    got = imported(name)
    assert got["roles"] == {"distilgpt2-raycluster": {"gpus": [0], "nodes": 2, "args": {
        "tensor-parallel-size": 1, "pipeline-parallel-size": 2, "distributed-executor-backend": "ray"}}}
    lines = run_kvcheck("import", name).stdout.splitlines()
    assert f"    gpus: [0]  # {name}:26:21 (raySpec.headNode requestGPU)" in lines
    assert f"    nodes: 2  # {name}:9:19 (Ray head + replicaCount workers (EXPECTED_NODES))" in lines
    pools = _pools_imported_and_direct(tmp_path, name, "--gpu", "L4", "--context-length", "1024", "--model-config", "tests/data/models/Qwen--Qwen3-0.6B.json")
    assert pools[0] == pools[1] and pools[0][0] > 1024


def _pools_imported_and_direct(tmp_path: Any, name: str, *options: str) -> list[list[int]]:
    """The pools `verify --mode estimate` gives for the file's imported manifest and for the file itself
    (each a pass): a file verifies as its import does."""
    manifest = tmp_path / "kvcheck.yaml"
    assert run_kvcheck("import", name, *options, "-o", str(manifest)).exit_code == 0
    pools = []
    for args in ((str(manifest),), (name, *options)):
        result = run_kvcheck("verify", *args, "--mode", "estimate", "--format", "json")
        report = json.loads(result.stdout)
        assert (result.exit_code, report["verdict"]) == (0, "pass"), result.stdout + result.stderr
        pools.append([r["pool_tokens"] for r in report["roles"]])
    return pools


def test_a_raycluster_head_and_workers_with_different_gpu_counts_are_refused(tmp_path: Any) -> None:
    path = tmp_path / "values.yaml"
    path.write_text("servingEngineSpec:\n  modelSpec:\n  - name: m\n    repository: vllm/vllm-openai\n"
                    "    tag: v0.11.0\n    modelURL: org/m\n    replicaCount: 1\n    requestGPU: 2\n"
                    "    vllmConfig: {tensorParallelSize: 1, pipelineParallelSize: 2}\n"
                    "    raySpec:\n      enabled: true\n      headNode: {requestGPU: 1}\n")
    result = run_kvcheck("import", str(path))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[1] == (
        f"{path}:12:30: modelSpec 'm': the Ray head asks for 1 GPU(s) and each worker for 2: kvcheck counts one GPU "
        "count per node of the instance; give both the same")


def test_a_kuberay_raycluster_head_running_vllm_is_one_instance_over_its_gpu_pods(tmp_path: Any) -> None:
    name = f"{FIX}/raycluster.yaml"
    got = imported(name)
    assert got["roles"] == {"llama-405b": {"gpus": EIGHT, "nodes": 2, "args": {
        "tensor-parallel-size": 8, "pipeline-parallel-size": 2, "distributed-executor-backend": "ray",
        "max-model-len": 32768}}}
    assert got["engine"] == {"name": "vllm", "version": "0.9.2"}
    lines = run_kvcheck("import", name).stdout.splitlines()
    assert f"    gpus: [0, 1, 2, 3, 4, 5, 6, 7]  # {name}:37:35 (limits[nvidia.com/gpu])" in lines  # the workers'
    assert f"    nodes: 2  # {name}:27:5 (Ray cluster: the worker replicas, and the head when it holds GPUs)" in lines
    pools = _pools_imported_and_direct(tmp_path, name, "--gpu", "H100", "--model-config", "tests/data/models/meta-llama--Meta-Llama-3.1-405B.json")
    assert pools[0] == pools[1]


def test_a_rayservice_serving_through_ray_serve_llm_is_refused_plainly() -> None:
    assert refused(f"{REAL}/kuberay-ray-service-llm-serve.yaml") == [
        f"{REAL}/kuberay-ray-service-llm-serve.yaml:6:18: RayService 'ray-serve-llm' serves through Ray Serve "
        "applications (serveConfigV2), whose engine arguments kvcheck does not read; state the equivalent `vllm "
        "serve` line with --cmd, or a manifest"]


OME_ARGS = {"middleware": "vllm.entrypoints.openai.middleware.log_opc_header", "max-log-len": 0,
            "served-model-name": ["vllm-model"], "max-model-len": 131072, "gpu-memory-utilization": 0.9,
            "enable-chunked-prefill": True, "enable-auto-tool-choice": True, "tool-call-parser": "llama3_json"}


@pytest.mark.parametrize(("name", "gpus", "own"), [
    ("ome-vllm-llama-3-1-8b-instruct-rt.yaml", [0], {
        "tensor-parallel-size": 1, "chat-template": "./examples/tool_chat_template_llama3.1_json.jinja"}),
    ("ome-vllm-llama-3-1-405b-instruct-fp8-rt.yaml", EIGHT, {
        "tensor-parallel-size": 8, "chat-template": "examples/tool_chat_template_llama3.1_json.jinja",
        "cuda-graph-sizes": [256]}),
])
def test_each_ome_vllm_runtime_is_read_whole(name: str, gpus: list[int], own: dict[str, Any]) -> None:
    """Every flag of the runtime's command and the GPUs of its runner (the 8B one's $(SERVED_MODEL_NAME) from its
    env); the model is $(MODEL_PATH), which the InferenceService that picks the runtime sets (so none here)."""
    got = imported(f"{REAL}/{name}")
    (role,) = got["roles"].values()
    assert (got["model"], got["context_length"], role["gpus"]) == ({}, 131072, gpus)
    assert role["args"] == {**OME_ARGS, **own}
    assert role.get("env") == ({"SERVED_MODEL_NAME": "vllm-model"} if "8b" in name else None)


def test_llm_d_values_mixing_engines_check_each_role_with_its_own() -> None:
    """decode runs the chart's `vllm serve`, prefill a custom SGLang command: vLLM's sizing and admission for one,
    SGLang's for the other (import refuses, since a manifest holds one engine)."""
    name = f"{FIX}/llm-d-mixed-engines.yaml"
    (error,) = refused(name)
    assert error == (f"{name}:19:5: role 'prefill' runs SGLang, role 'decode' vLLM at {name}:12:5; a manifest holds "
                     "one engine (kvcheck verify checks the files directly, each role with its own engine)")
    result = run_kvcheck("verify", name, "--mode", "estimate", "--gpu", "H100", "--model-config",
                         "tests/data/models/Qwen--Qwen3-8B.json", "--format", "json")
    report = json.loads(result.stdout)
    assert (result.exit_code, report["verdict"]) == (0, "pass"), result.stderr
    roles = {role["name"]: role for role in report["roles"]}
    assert (roles["decode"]["details"]["engine"], roles["prefill"]["details"]["engine"]) == (
        "vllm 0.32.0 sizing model", "sglang 0.5.23 sizing model")
    assert roles["decode"]["argv"] == ["--served-model-name", "Qwen/Qwen3-8B", "--max-model-len", "32768"]
    assert roles["prefill"]["argv"] == ["--context-length", "32768"]
    assert "gpu_memory_utilization" in roles["decode"]["details"]  # vLLM's own sizing
    assert "gpu_memory_utilization" not in roles["prefill"]["details"]
    assert (roles["decode"]["max_input_tokens"], roles["prefill"]["max_input_tokens"]) == (32768, 32762)


def test_an_llm_d_model_service_object_is_refused_rather_than_left_unchecked() -> None:
    name = f"{REAL}/llm-d-model-service-facebook-nixl.yaml"
    assert refused(name) == [
        f"{name}:9:5: ModelService 'facebook-opt-125m-nixl' (llm-d's model-service operator) has its pods rendered "
        "from the Go templates of ConfigMap 'universal-base-config-hf' (baseConfigMapRef), which kvcheck does not "
        "render: pass the Deployments the operator created (kubectl get deployment -o yaml), or move to the "
        "llm-d-modelservice Helm values, which kvcheck reads"]


def test_llm_d_values_whose_args_override_the_charts_parallelism_are_caught_by_the_gpu_count(tmp_path: Any) -> None:
    """The chart writes --tensor-parallel-size 2 from parallelism (and asks for 2 GPUs), the container's args say 4
    after it: vLLM takes the last, 4 ranks on 2 GPUs, which never starts."""
    path = tmp_path / "values.yaml"
    path.write_text("modelArtifacts:\n  name: org/m\n  uri: hf://org/m\ndecode:\n  parallelism:\n    tensor: 2\n"
                    "  containers:\n  - name: vllm\n    image: vllm/vllm-openai:v0.32.0\n    modelCommand: vllmServe\n"
                    "    args: [\"--tensor-parallel-size\", \"4\"]\n")
    got = imported(str(path))
    assert (got["roles"]["decode"]["gpus"], got["roles"]["decode"]["args"]["tensor-parallel-size"]) == ([0, 1], 4)
    result = run_kvcheck("verify", str(path), "--mode", "estimate", "--context-length", "4096")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[1] == (
        f"{path}:6:5: role 'decode': 2 GPU(s) per node x 1 node(s) = 2, but its parallel settings need 4 (tensor x "
        "pipeline parallel size x data-parallel replicas)")


def test_llm_d_guides_modelservice_values_are_read_and_estimated() -> None:
    """llm-d's inference-scheduling guide: decode only (prefill create: false), no routing proxy (the port is
    routing.servicePort's default), 2 replicas of Qwen3-0.6B on 1 GPU each."""
    name = f"{REAL}/llm-d-guide-inference-scheduling-values.yaml"
    assert imported(name) == {
        "name": "llm-d-guide-inference-scheduling-values", "model": {"path": "Qwen/Qwen3-0.6B"}, "engine": NEWEST,
        "roles": {"decode": {"gpus": [0], "args": {"served-model-name": ["Qwen/Qwen3-0.6B"],
                                                   "disable-uvicorn-access-log": True},
                             "env": {"DP_SIZE": "1", "TP_SIZE": "1", "DP_SIZE_LOCAL": "1", "HF_HOME": "/model-cache"}}}}
    result = run_kvcheck("verify", name, "--mode", "estimate", "--gpu", "H100", "--context-length", "40960",
                         "--model-config", "tests/data/models/Qwen--Qwen3-0.6B.json", "--format", "json")
    report = json.loads(result.stdout)
    assert (result.exit_code, report["verdict"], [r["name"] for r in report["roles"]]) == (0, "pass", ["decode"])


def test_an_imported_ray_group_is_not_booted_as_one_host_in_measure_mode(tmp_path: Any) -> None:
    # the group's pods form one vLLM instance over Ray; booting it on one host would start another deployment
    manifest = tmp_path / "kvcheck.yaml"
    options = ("--gpu", "H100", "--context-length", "32768", "--model-config",
               "tests/data/models/meta-llama--Meta-Llama-3.1-405B.json")
    assert run_kvcheck("import", f"{REAL}/lws-vllm-gpu.yaml", *options, "-o", str(manifest)).exit_code == 0
    result = run_kvcheck("verify", str(manifest), "--no-gpu-check", "--format", "json")
    report = json.loads(result.stdout)
    assert (result.exit_code, report["verdict"]) == (3, "error"), result.stderr
    (role,) = report["roles"]
    assert [f["rule"] for f in report["findings"]] == ["KV301"]
    assert report["findings"][0]["message"] == (
        f"role {role['name']} spans 2 nodes as one Ray cluster (roles.{role['name']}.nodes), and the local "
        "launcher does not build Ray clusters")
    assert role["pool_tokens"] is None


VLLM_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: llama}}
spec:
  template:
    spec:
      containers:
      - name: vllm
        image: {image}
        command: ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "32768"]
        resources: {{limits: {{nvidia.com/gpu: "1"}}}}
"""


@pytest.mark.parametrize(("image", "why"), [
    ("vllm/vllm-openai:latest", "has the floating tag 'latest', which pins no vLLM release"),
    ("vllm/vllm-openai", "has the floating tag 'latest', which pins no vLLM release"),
    ("docker.io/vllm/vllm-openai:nightly", "has the floating tag 'nightly', which pins no vLLM release"),
    ("vllm/vllm-openai@sha256:" + "a" * 64, "is pinned by digest, which names no vLLM release kvcheck can read"),
    ("vllm/vllm-openai:my-build", ": the tag 'my-build' names no vLLM release"),
])
def test_an_unpinned_vllm_image_is_named_in_the_import_note(tmp_path: Any, image: str, why: str) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(VLLM_DEPLOYMENT.format(image=image), encoding="utf-8")
    result = run_kvcheck("import", str(path))
    assert (result.exit_code, result.stderr) == (0, "")
    sep = "" if why.startswith(":") else " "
    assert (f"# note: the files do not name the vLLM release (image {image}{sep}{why}; pass --engine-version); "
            f"role 'llama' was read with the flags of {NEWEST['version']}, the newest release kvcheck knows\n"
            ) in result.stdout


def test_a_pinned_vllm_image_with_a_digest_names_its_release(tmp_path: Any) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(VLLM_DEPLOYMENT.format(image="vllm/vllm-openai:v0.11.0@sha256:" + "b" * 64), encoding="utf-8")
    result = run_kvcheck("import", str(path), "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["engine"] == {"name": "vllm", "version": "0.11.0"}


@pytest.mark.parametrize("first", [
    '        args: ["--model", "m", "--max-model-len", "65536"]\n',
    '        command: [vllm, serve]\n        args: ["m", "--max-model-len", "65536"]\n',
])
def test_a_second_vllm_server_on_the_images_own_entrypoint_is_exit_2(first: str) -> None:
    # vllm/vllm-openai runs `vllm serve` itself: a second container passing only args started a second server
    # with a 4,096-token window, and import dropped it, so verify judged the 65,536-token one alone
    text = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: llama}\nspec:\n  template:\n    spec:\n"
            "      containers:\n      - name: vllm\n        image: vllm/vllm-openai:v0.32.0\n" + first
            + "        resources: {limits: {nvidia.com/gpu: 1}}\n"
            "      - name: vllm2\n        image: vllm/vllm-openai:v0.32.0\n"
            '        args: ["--model", "m", "--max-model-len", "4096", "--port", "8001"]\n'
            "        resources: {limits: {nvidia.com/gpu: 1}}\n")
    line = 13 if "command" in first else 12
    for command in ("import", "verify"):
        result = run_kvcheck(command, "-", *(("--mode", "estimate", "--gpu", "H100") if command == "verify" else ()),
                             stdin=text)
        assert (result.exit_code, result.stdout) == (2, ""), result.stderr
        assert (f"<stdin>:{line}:9: the pod starts a server in two containers (vllm and vllm2): kvcheck checks one "
                "server a pod") in result.stderr


QWEN06 = "tests/data/models/Qwen--Qwen3-0.6B.json"


def _dynamo_pair(tmp_path, prefill_len: int, decode_len: int, *, sub_component: bool = True) -> Path:
    """Dynamo's vLLM disaggregated example with each worker's --max-model-len; its side either in
    subComponentType (the operator's) or only in Dynamo's own --is-prefill-worker / --is-decode-worker."""
    text = (Path(REAL) / "dynamo-vllm-disagg.yaml").read_text()
    text = text.replace("- --disaggregation-mode\n            - decode",
                        f"- --is-decode-worker\n            - --max-model-len\n            - \"{decode_len}\"")
    text = text.replace("- --disaggregation-mode\n            - prefill",
                        f"- --is-prefill-worker\n            - --max-model-len\n            - \"{prefill_len}\"")
    if not sub_component:
        text = text.replace("      subComponentType: decode\n", "").replace("      subComponentType: prefill\n", "")
    path = tmp_path / "dgd.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("sub_component", [True, False], ids=["subComponentType", "dynamo-flags-only"])
def test_dynamo_vllm_prefill_and_decode_workers_are_judged_as_a_pair(tmp_path, sub_component) -> None:
    """Dynamo's vLLM workers carry their side in Dynamo (subComponentType, --is-prefill-worker), not in vLLM's
    arguments (Dynamo builds a kv_both transfer): the pair rules never ran on them, so a decode worker whose
    --max-model-len is twice the prefill's passed. The side now reaches the pair rules: KV110, exit 1."""
    path = _dynamo_pair(tmp_path, 16384, 32768, sub_component=sub_component)
    args = ("verify", str(path), "--mode", "estimate", "--gpu", "H100", "--model-config", QWEN06,
            "--context-length", "16000", "--format", "json")
    result = run_kvcheck(*args)
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    assert [f["rule"] for f in report["findings"] if f["severity"] == "error"] == ["KV110"]
    kv110 = next(f for f in report["findings"] if f["rule"] == "KV110")
    assert "VllmPrefillWorker" in kv110["message"] and "VllmDecodeWorker" in kv110["message"]
    equal = _dynamo_pair(tmp_path, 32768, 32768, sub_component=sub_component)
    assert run_kvcheck("verify", str(equal), *args[2:]).exit_code == 0
    # the side travels into the manifest kvcheck import writes, and verify of that manifest judges the pair too
    imported_side = imported(str(path))["roles"]
    assert {name: role["side"] for name, role in imported_side.items()} == {
        "VllmDecodeWorker": "decode", "VllmPrefillWorker": "prefill"}


def test_a_dynamo_side_flag_that_contradicts_the_operators_is_exit_2(tmp_path) -> None:
    path = _dynamo_pair(tmp_path, 16384, 16384)
    path.write_text(path.read_text().replace("--is-decode-worker", "--is-prefill-worker"))
    result = run_kvcheck("import", str(path))
    assert result.exit_code == 2
    assert "Dynamo's --is-prefill-worker makes this a prefill worker, but subComponentType says 'decode'" \
        in result.stderr
