"""`kvcheck import` on every format: the manifest values each file deploys, exactly, end to end."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck

FIX = "tests/inputs/deploy/fixtures"
EIGHT = [0, 1, 2, 3, 4, 5, 6, 7]

EXPECTED = {
    "deployment": {
        "name": "llama-sglang", "context_length": 131072,
        "model": {"path": "meta-llama/Llama-3.1-8B-Instruct"}, "engine": {"version": "0.5.23"},
        "gpu": "NVIDIA-H100-80GB-HBM3",
        "roles": {"llama-sglang": {"gpus": [0], "args": {
            "tp-size": 1, "mem-fraction-static": 0.85, "context-length": 131072}}},
    },
    "deployment-bash-array": {  # KServe's SGLang launch script: a bash array, the container's args in "$@"
        "name": "qwen-sglang", "context_length": 32768, "model": {"path": "Qwen/Qwen3-32B"},
        "engine": {"version": "0.5.23"},
        "roles": {"qwen-sglang": {"gpus": [0, 1], "args": {
            "served-model-name": "qwen", "tp-size": 2, "mem-fraction-static": 0.82, "context-length": 32768,
            "chunked-prefill-size": 4096}, "env": {"MEM_FRACTION": "0.82"}}},
    },
    "statefulset-shell": {
        "name": "deepseek", "context_length": 163840,
        "model": {"path": "deepseek-ai/DeepSeek-V3"}, "engine": {"version": "0.5.22"}, "gpu": "NVIDIA-H200",
        "roles": {"deepseek": {"gpus": EIGHT, "args": {
            "tp-size": 16, "nnodes": 2, "mem-fraction-static": 0.88, "trust-remote-code": True,
            "context-length": 163840}, "env": {"MODEL": "deepseek-ai/DeepSeek-V3", "TP": "16", "NCCL_IB_DISABLE": "0"}}},
    },
    "lws-pd": {
        "name": "glm", "model": {"path": "zai-org/GLM-5.2-FP8"}, "engine": {"version": "0.5.23"},
        "roles": {
            "glm-prefill": {"gpus": EIGHT, "args": {
                "tp-size": 16, "nnodes": 2, "disaggregation-mode": "prefill", "mem-fraction-static": 0.8}},
            "glm-decode": {"gpus": EIGHT, "args": {
                "tp-size": 16, "nnodes": 2, "disaggregation-mode": "decode", "mem-fraction-static": 0.85,
                "dp-size": 16, "enable-dp-attention": True}},
        },
    },
    "disaggregatedset": {
        "name": "qwen-pd", "context_length": 32768, "model": {"path": "Qwen/Qwen3-32B"},
        "engine": {"version": "0.5.23"},
        "roles": {
            "prefill": {"gpus": [0, 1, 2, 3], "args": {
                "tp-size": 4, "disaggregation-mode": "prefill", "context-length": 32768}},
            "decode": {"gpus": [0, 1, 2, 3], "args": {
                "tp-size": 4, "disaggregation-mode": "decode", "context-length": 32768}},
        },
    },
    # the current API (kubernetes-sigs/lws api/disaggregatedset/v1): the LWS template spec under roles[].spec;
    # decode's only template is its worker template, which LWS runs as the leader too
    "disaggregatedset-v1-role-spec": {
        "name": "qwen-ds", "context_length": 32768, "model": {"path": "Qwen/Qwen3-32B"},
        "engine": {"version": "0.5.23"},
        "roles": {
            "prefill": {"gpus": [0, 1, 2, 3], "args": {
                "tp-size": 4, "disaggregation-mode": "prefill", "context-length": 32768}},
            "decode": {"gpus": [0, 1, 2, 3], "args": {
                "tp-size": 4, "disaggregation-mode": "decode", "context-length": 32768, "mem-fraction-static": 0.85}},
        },
    },
    "rbg-v1alpha1": {
        "name": "deepseek-rbg", "model": {"path": "/models/DeepSeek-V3"}, "engine": {"version": "0.5.23"},
        "roles": {"decode": {"gpus": EIGHT, "args": {
            "tp-size": 16, "nnodes": 2, "disaggregation-mode": "decode", "mem-fraction-static": 0.82}}},
    },
    "rbg-v1alpha2": {
        "name": "kimi-rbg", "model": {"path": "moonshotai/Kimi-K2"}, "engine": {"version": "0.5.23"},
        "gpu": "NVIDIA-H200",
        "roles": {
            "prefill": {"gpus": EIGHT, "args": {
                "tp-size": 8, "disaggregation-mode": "prefill", "trust-remote-code": True}},
            "decode": {"gpus": EIGHT, "args": {
                "tp-size": 16, "nnodes": 2, "disaggregation-mode": "decode", "trust-remote-code": True,
                "mem-fraction-static": 0.85}},
        },
    },
    "rbg-v1alpha2-roletemplates": {
        "name": "glm-rbg", "model": {"path": "zai-org/GLM-4.6"}, "engine": {"version": "0.5.22"},
        "gpu": "NVIDIA-H100-80GB-HBM3",
        "roles": {
            "prefill": {"gpus": [0, 1, 2, 3], "args": {
                "tp-size": 8, "disaggregation-mode": "prefill", "mem-fraction-static": 0.83, "nnodes": 2},
                "env": {"MEM_FRACTION": "0.83"}},
            "decode": {"gpus": [0, 1, 2, 3], "args": {
                "tp-size": 4, "disaggregation-mode": "decode", "context-length": 131072}, "env": {"MEM_FRACTION": "0.83"}},
        },
    },
    "lws-quoted": {
        "name": "qwen-mn", "model": {"path": "/models/Qwen3-32B"}, "engine": {"version": "0.5.22"},
        "roles": {"qwen-mn": {"gpus": [0, 1], "args": {
            "tp-size": 4, "nnodes": 2, "mem-fraction-static": 0.86, "disaggregation-ib-device": "mlx5_0,mlx5_1",
            "enable-metrics": True}}},
    },
    # sglang-runtime:0.6.1 runs the SGLang that Dynamo 0.6.1 pins (0.5.3.post2), whose flags' names are these
    "dynamo-v1alpha1": {
        "name": "sglang-disagg", "model": {"path": "deepseek-ai/DeepSeek-R1"}, "engine": {"version": "0.5.3.post2"},
        "roles": {
            "decode": {"gpus": EIGHT, "args": {
                "nnodes": 2, "served-model-name": "deepseek-ai/DeepSeek-R1", "tensor-parallel-size": 16,
                "data-parallel-size": 16, "enable-dp-attention": True, "disaggregation-mode": "decode",
                "disaggregation-transfer-backend": "nixl", "mem-fraction-static": 0.82}},
            "prefill": {"gpus": EIGHT, "args": {
                "disaggregation-mode": "prefill", "tensor-parallel-size": 8, "disaggregation-transfer-backend": "nixl",
                "mem-fraction-static": 0.85}},
        },
    },
    "dynamo-v1beta1": {  # sglang-runtime:0.7.0: SGLang 0.5.4.post3
        "name": "llama-agg", "context_length": 131072, "model": {"path": "meta-llama/Llama-3.3-70B-Instruct"},
        "engine": {"version": "0.5.4.post3"},
        "roles": {"worker": {"gpus": [0, 1, 2, 3], "args": {
            "tensor-parallel-size": 4, "context-length": 131072, "kv-cache-dtype": "fp8_e4m3", "mem-fraction-static": 0.85}}},
    },
    "ome": {
        "name": "deepseek-r1-pd", "model": {"path": "/raid/models/deepseek-ai/deepseek-r1"},
        "engine": {"version": "0.5.23"}, "gpu": "NVIDIA-H200",
        "roles": {
            "prefill": {"gpus": EIGHT, "args": {
                "tp-size": 16, "nnodes": 2, "disaggregation-mode": "prefill", "mem-fraction-static": 0.8,
                "trust-remote-code": True}},
            "decode": {"gpus": EIGHT, "args": {
                "tp-size": 16, "nnodes": 2, "disaggregation-mode": "decode", "mem-fraction-static": 0.85,
                "trust-remote-code": True}},
        },
    },
    "compose": {
        "name": "compose", "context_length": 65536, "model": {"path": "meta-llama/Llama-3.1-8B-Instruct"},
        "engine": {"version": "0.5.21"},
        "roles": {"sglang": {"gpus": [0], "args": {"mem-fraction-static": 0.9, "context-length": 65536}}},
    },
    "kubectl-list": {
        "name": "qwen", "model": {"path": "Qwen/Qwen3-8B"}, "engine": {"version": "0.5.23"},
        "roles": {
            "qwen-prefill": {"gpus": [0, 1], "args": {"disaggregation-mode": "prefill", "tp-size": 2}},
            "qwen-decode": {"gpus": [0, 1], "args": {"tp-size": 2, "disaggregation-mode": "decode"}},
        },
    },
    "srt-slurm": {
        "name": "gb200-fp8-1p-2d", "context_length": 131072, "model": {"path": "/lustre/models/DeepSeek-R1-0528"},
        "engine": {"version": "0.5.22"}, "gpu": "gb200",
        "roles": {
            "prefill": {"gpus": [0, 1, 2, 3], "args": {
                "tp-size": 8, "disaggregation-mode": "prefill", "mem-fraction-static": 0.84,
                "kv-cache-dtype": "fp8_e4m3", "nnodes": 2, "context-length": 131072}},
            "decode": {"gpus": [0, 1, 2, 3], "args": {
                "tp-size": 8, "disaggregation-mode": "decode", "mem-fraction-static": 0.82,
                "kv-cache-dtype": "fp8_e4m3", "nnodes": 2, "context-length": 131072}},
        },
    },
}


# fixtures whose files hold an error finding the manifest cannot carry: a leader and worker that disagree
# (KV501, exit 1 as verify gives), a value the files do not set (KV317, exit 3)
IMPORT_EXIT = {"lws-pd": 1, "rbg-v1alpha2": 1, "rbg-v1alpha2-roletemplates": 1, "ome": 3}


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_import_reads_what_each_format_deploys(fixture: str) -> None:
    result = run_kvcheck("import", f"{FIX}/{fixture}.yaml", "--format", "json")
    assert result.exit_code == IMPORT_EXIT.get(fixture, 0), result.stderr
    assert json.loads(result.stdout) == EXPECTED[fixture]


def test_yaml_output_names_the_file_line_and_column_of_every_value() -> None:
    result = run_kvcheck("import", f"{FIX}/deployment.yaml")
    assert (result.exit_code, result.stderr) == (0, "")
    f = f"{FIX}/deployment.yaml"
    assert result.stdout == (
        f"# kvcheck manifest imported from {f} (kvcheck import)\n"
        f"name: llama-sglang  # {f}\n"
        f"context_length: 131072  # {f}:35:15 (--context-length of every role)\n"
        "model:\n"
        f"  path: meta-llama/Llama-3.1-8B-Instruct  # {f}:30:15\n"
        "engine:\n"
        f'  version: "0.5.23"  # {f}:26:18 (image lmsysorg/sglang:v0.5.23-cu129)\n'
        f"gpu: NVIDIA-H100-80GB-HBM3  # {f}:23:33 (nodeSelector nvidia.com/gpu.product)\n"
        "roles:\n"
        f"  llama-sglang:  # {f}:25:11 (Deployment)\n"
        f"    gpus: [0]  # {f}:42:31 (limits[nvidia.com/gpu])\n"
        "    args:\n"
        f"      tp-size: 1  # {f}:32:15\n"
        f"      mem-fraction-static: 0.85  # {f}:33:26\n"
        f"      context-length: 131072  # {f}:35:15\n"
    )


def test_values_inside_shell_scripts_point_at_their_own_column() -> None:
    """Block scalars (| and >) are mapped back to the line and column each word is written at."""
    result = run_kvcheck("import", f"{FIX}/statefulset-shell.yaml")
    f = f"{FIX}/statefulset-shell.yaml"
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    # ${TP} in the literal block, and where TP itself is set
    assert f"      tp-size: 16  # {f}:41:49 ($TP = {f}:34:22)" in lines
    assert f"      mem-fraction-static: 0.88  # {f}:44:39" in lines
    assert f"      trust-remote-code: true  # {f}:44:44" in lines  # --trust-remote, an abbreviation
    result = run_kvcheck("import", f"{FIX}/lws-pd.yaml")
    f = f"{FIX}/lws-pd.yaml"
    assert f"      dp-size: 16  # {f}:82:83" in result.stdout.splitlines()  # a folded (>-) block


def test_array_elements_and_the_containers_own_args_point_at_their_own_place() -> None:
    # before arrays were read, this file gave an SGLang server with no flags at all (tp 1, no fraction)
    f = f"{FIX}/deployment-bash-array.yaml"
    lines = run_kvcheck("import", f).stdout.splitlines()
    assert f"      tp-size: 2  # {f}:24:37" in lines  # inside args=( ... )
    assert f"      mem-fraction-static: 0.82  # {f}:26:44 ($MEM_FRACTION = {f}:32:22)" in lines  # args+=( ... )
    assert f"      chunked-prefill-size: 4096  # {f}:29:73" in lines  # the container's args, through "$@"


def test_values_that_come_through_variables_name_where_the_variable_is_set() -> None:
    f = f"{FIX}/helm/rendered-good.yaml"
    lines = run_kvcheck("import", f).stdout.splitlines()
    assert f"      mem-fraction-static: 0.85  # {f}:70:39 ($MEM_FRACTION = ConfigMap llama-sglang-env at {f}:16:17)" \
        in lines
    f = f"{FIX}/ome.yaml"
    lines = run_kvcheck("import", f).stdout.splitlines()
    assert f"      tp-size: 16  # {f}:38:23 ($PARALLELISM_SIZE = OME: GPUs per pod x pods at {f}:43:29)" in lines
    assert f"      nnodes: 2  # {f}:38:52 ($LWS_GROUP_SIZE = 1 leader + worker.size at {f}:45:13)" in lines


def test_leader_and_worker_disagreeing_is_reported_at_both_lines() -> None:
    result = run_kvcheck("import", f"{FIX}/lws-pd.yaml")
    f = f"{FIX}/lws-pd.yaml"
    # the manifest keeps the leader's values, so verify on it alone would not see the drift: exit 1, as verify
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"kvcheck: error: {f}:82:83: KV501 --dp-size: the leader runs 16, the worker runs 8 at {f}:96:82",
        f"kvcheck: error: {f}:82:68: KV501 --mem-fraction-static: the leader runs 0.85, the worker runs 0.9 "
        f"at {f}:96:68",
        "kvcheck: import: exit 1: the files have 2 error finding(s) the printed manifest does not carry; verify "
        "the files themselves, or fix them first",
    ]  # one disagreement, one finding (it was printed twice, once at each line)
    # the RBG v1alpha2 worker patch drifted the same way
    result = run_kvcheck("import", f"{FIX}/rbg-v1alpha2.yaml")
    f = f"{FIX}/rbg-v1alpha2.yaml"
    assert result.stderr.splitlines()[:-1] == [
        f"kvcheck: error: {f}:45:49: KV501 --mem-fraction-static: the leader runs 0.85, the worker runs 0.9 "
        f"at {f}:50:49",
    ]


def test_unresolved_variables_are_named_never_guessed() -> None:
    result = run_kvcheck("import", f"{FIX}/ome.yaml")
    f = f"{FIX}/ome.yaml"
    # the flag is left out of the manifest, which verify alone would then check without it: exit 3
    assert result.exit_code == 3
    assert result.stderr.splitlines() == [
        f"kvcheck: error: {f}:70:83: KV317 the value given to max-running-requests uses $(MAX_REQS), "
        "which the files do not set",
        "kvcheck: import: exit 3: the files have 1 error finding(s) the printed manifest does not carry; verify "
        "the files themselves, or fix them first",
    ]
    assert "max-running-requests" not in json.loads(run_kvcheck("import", f"{FIX}/ome.yaml", "--format", "json").stdout)[
        "roles"]["decode"]["args"]


def test_dynamo_flags_that_are_not_sglang_flags_are_a_warning() -> None:
    result = run_kvcheck("import", f"{FIX}/dynamo-v1alpha1.yaml")
    f = f"{FIX}/dynamo-v1alpha1.yaml"
    assert result.stderr.splitlines() == [
        f"kvcheck: warning: {f}:60:151: KV502 '--dyn-unknown-knob' is not a flag of SGLang 0.5.3.post2; "
        "kvcheck leaves it to the Dynamo wrapper",
    ]
    assert f'  version: "0.5.3.post2"  # {f}:27:18 (image nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.6.1)' \
        in result.stdout


def test_command_line_and_sglang_serve() -> None:
    result = run_kvcheck(
        "import", "--format", "json", "--cmd",
        "NCCL_DEBUG=INFO python -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp 2 --mem-frac 0.8 "
        "--context-length 32k --context-length=64k",
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {
        "name": "command-line", "context_length": 64000, "model": {"path": "Qwen/Qwen3-8B"},
        "engine": {"version": "0.5.23"},
        "roles": {"server": {"args": {"tp-size": 2, "mem-fraction-static": 0.8, "context-length": 64000},
                             "env": {"NCCL_DEBUG": "INFO"}}},  # the prefix reaches the engine
    }
    result = run_kvcheck("import", "--format", "json", "--sglang-version", "0.5.21", "--cmd",
                         "sglang serve --model-path Qwen/Qwen3-8B --tensor-parallel-size 4")
    assert json.loads(result.stdout)["roles"] == {"server": {"args": {"tp-size": 4}}}
    assert json.loads(result.stdout)["engine"] == {"version": "0.5.21"}


def test_an_srun_prefix_states_gpus_per_node_and_their_gres_type() -> None:
    result = run_kvcheck("import", "--format", "json", "--cmd",
                         "srun --nodes=1 --gres=gpu:h100:8 python3 -m sglang.launch_server --model-path m --tp 8")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads(result.stdout)
    assert (manifest["gpu"], manifest["roles"]["server"]["gpus"]) == ("h100", EIGHT)


def test_several_independent_deployments_are_a_json_list() -> None:
    result = run_kvcheck("import", f"{FIX}/deployment.yaml", f"{FIX}/compose.yaml", "--format", "json")
    assert result.exit_code == 0
    assert [d["name"] for d in json.loads(result.stdout)] == ["llama-sglang", "compose"]


def test_stdin_multi_document_stream() -> None:
    text = open(f"{FIX}/helm/rendered-good.yaml", encoding="utf-8").read()
    result = run_kvcheck("import", "-", "--format", "json", stdin=text)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {
        "name": "llama-sglang", "context_length": 131072, "model": {"path": "meta-llama/Llama-3.1-8B-Instruct"},
        "engine": {"version": "0.5.23"},
        "roles": {"llama-sglang": {"gpus": [0], "args": {
            "tp-size": 1, "mem-fraction-static": 0.85, "context-length": 131072},
            # the container's environment is the role's too (issue 20)
            "env": {"MEM_FRACTION": "0.85", "CONTEXT_LENGTH": "131072", "MODEL_ID": "meta-llama/Llama-3.1-8B-Instruct"}}},
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n<<<<<<< HEAD\nspec: {}\n=======\n"
         "spec: {replicas: 2}\n>>>>>>> main\n",
         "kvcheck: error: <stdin>:5:1: merge-conflict marker '<<<<<<<': resolve the conflict first\n"),
        ("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: [x\n",
         "kvcheck: error: <stdin>:5:1: YAML syntax error: while parsing a flow sequence: expected ',' or ']', "
         "but got '<stream end>'\n"),
        ("apiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\napiVersion: batch/v1\nkind: Job\n"
         "metadata: {name: b}\n",
         "kvcheck: error: <stdin>: no engine server (SGLang, vLLM) in a supported kind; the input holds: Service (v1) at "
         "<stdin>:1; Job (batch/v1) at <stdin>:5\n"),
        ("a: &a [1, 2]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
         "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
         "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
         "h: [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n",
         None),
    ],
    ids=["merge-conflict", "malformed", "unsupported", "alias-bomb"],
)
def test_bad_input_is_exit_2_with_file_and_line(text: str, message: str | None) -> None:
    result = run_kvcheck("import", "-", stdin=text)
    assert (result.exit_code, result.stdout) == (2, "")
    assert "Traceback" not in result.stderr
    if message is not None:
        assert result.stderr.startswith(message)
        assert "kvcheck reads: Deployment, StatefulSet" in result.stderr or "YAML" in message or "merge" in message
    else:
        assert result.stderr.startswith("kvcheck: error: <stdin>:")


def test_flags_sglang_would_refuse_are_input_errors_at_their_place() -> None:
    text = (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n"
        "      containers:\n        - name: s\n          image: lmsysorg/sglang:v0.5.23\n"
        '          command: ["python3", "-m", "sglang.launch_server", "--mem-fraction-statc", "0.8",\n'
        '                    "--kv-cache-dtype", "fp9", "--tp", "two"]\n'
    )
    result = run_kvcheck("import", "-", stdin=text)
    assert (result.exit_code, result.stdout) == (2, "")
    lines = result.stderr.splitlines()
    assert lines[:2] == [
        "kvcheck: error: 3 errors in deployment files:",
        "<stdin>:10:62: unknown SGLang flag 'mem-fraction-statc' (SGLang 0.5.23) (did you mean 'mem-fraction-static'?)",
    ]
    assert lines[2].startswith("<stdin>:11:41: 'kv-cache-dtype' must be one of auto, ")
    assert lines[3] == "<stdin>:11:56: 'tp-size' must be an integer, not 'two'"


POD = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers:\n"


def _refused_then_read(text: str, message: str, fixed: str, args: dict) -> None:
    """`import -` refuses `text` (exit 2, `message` its first error) and reads `fixed` as role x's `args`."""
    result = run_kvcheck("import", "-", stdin=text)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines()[1] == message
    result = run_kvcheck("import", "-", "--format", "json", stdin=fixed)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["roles"]["x"]["args"] == args


def test_a_shell_variable_in_exec_form_is_named_as_the_bug_it_is() -> None:
    text = (
        POD + "        - name: s\n          image: lmsysorg/sglang:v0.5.23\n"
        '          env: [{name: TP, value: "8"}]\n'
        '          command: ["python3", "-m", "sglang.launch_server", "--tp", "$TP"]\n'
    )
    _refused_then_read(
        text,
        "<stdin>:11:70: 'tp-size' must be an integer, not '$TP' ($TP is passed literally: no shell runs this "
        "command; write $(TP) for Kubernetes to expand it)",
        text.replace('"$TP"', '"$(TP)"'),
        {"tp-size": 8},
    )


def test_nnodes_that_contradict_the_group_size_are_an_input_error() -> None:
    text = (REPO_ROOT / FIX / "lws-pd.yaml").read_text(encoding="utf-8").replace("- $(LWS_GROUP_SIZE)", '- "4"', 1)
    result = run_kvcheck("import", "-", stdin=text)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines()[1] == (
        "<stdin>:25:17: --nnodes 4, but LeaderWorkerSet size gives 2 node(s) per instance at <stdin>:10:11: "
        "the engine would wait for nodes that never join, or leave pods out"
    )


BRANCHES = (
    POD + '        - name: s\n          command: ["bash", "-c"]\n          args:\n'
    "            - |\n"
    '              if [ "$BIG" = 1 ]; then\n'
    "                python3 -m sglang.launch_server --model-path m --tp 8 --mem-fraction-static 0.9\n"
    "              else\n"
    "                python3 -m sglang.launch_server --model-path m --tp {tp} --mem-fraction-static 0.9\n"
    "              fi\n"
)


def test_a_script_that_starts_the_server_with_other_arguments_in_two_places_is_exit_2() -> None:
    # an if/else: reading the first branch would judge a command that may not run; the same line twice is read
    _refused_then_read(
        BRANCHES.replace("{tp}", "2"),
        "<stdin>:15:17: the script starts an SGLang server with other arguments here than at line 13; kvcheck "
        "cannot tell which one runs (a branch, a fallback, a second server): keep one launch line in the "
        "script, or give the role with --cmd or a manifest",
        BRANCHES.replace("{tp}", "8"),
        {"tp-size": 8, "mem-fraction-static": 0.9},
    )


def test_a_flag_the_shell_takes_as_the_scripts_name_is_exit_2_at_its_place() -> None:
    # `sh -c SCRIPT --tp 8 ...`: --tp is $0, so "$@" gives SGLang a stray 8 and no --tp
    text = (
        POD + "        - name: s\n"
        '          command: ["sh", "-c", "exec python3 -m sglang.launch_server --model-path m \\"$@\\""]\n'
        '          args: ["--tp", "8"]\n'
    )
    _refused_then_read(
        text,
        "<stdin>:10:18: sh -c takes the first word after the script as the script's name ($0), so '--tp' never "
        'reaches the server ("$@" starts after it); put a name such as -- before the arguments (KServe\'s '
        'template ends its command with "--")',
        text.replace('["--tp", "8"]', '["--", "--tp", "8"]'),
        {"tp-size": 8},
    )


def test_redirections_and_a_here_document_in_a_script_are_not_read_as_arguments_or_commands() -> None:
    # `2>&1 | tee` was read as arguments ('>' and '2>' unexpected), a here-document's body as a command
    text = (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n"
        '      containers:\n        - name: s\n          command: ["bash", "-c"]\n          args:\n'
        "            - |\n"
        "              cat > /tmp/old.sh <<'EOF'\n"
        "              python3 -m sglang.launch_server --model-path m --tp 2\n"
        "              EOF\n"
        "              python3 -m sglang.launch_server --model-path m --tp 8 > /var/log/s.log 2>&1 | tee -a /l\n"
    )
    result = run_kvcheck("import", "-", "--format", "json", stdin=text)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["roles"]["x"]["args"] == {"tp-size": 8}


def test_an_unterminated_quote_in_a_script_is_reported_where_it_opens() -> None:
    text = (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n"
        '      containers:\n        - name: s\n          command: ["sh", "-c"]\n          args:\n'
        "            - |\n              echo hi\n"
        '              python3 -m sglang.launch_server --model-path "m --tp 2\n'
    )
    result = run_kvcheck("import", "-", stdin=text)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines()[1] == "<stdin>:13:60: shell: unterminated double quote"


def test_a_config_file_whose_configmap_is_not_given_is_unknown_not_empty() -> None:
    text = (REPO_ROOT / FIX / "dynamo-v1beta1.yaml").read_text(encoding="utf-8")
    without_configmap = text[text.index("apiVersion: nvidia.com") :]
    result = run_kvcheck("import", "-", "--format", "json", stdin=without_configmap)
    assert result.exit_code == 3
    assert result.stderr.splitlines()[0] == (
        "kvcheck: error: <stdin>:24:87: KV317 --config /etc/sglang/sglang.yaml: the file is not among the "
        "inputs, so the flags it sets are unknown"
    )
    assert json.loads(result.stdout)["roles"]["worker"]["args"] == {"mem-fraction-static": 0.85}


def test_an_inference_service_whose_runtime_is_not_given_says_which_to_pass() -> None:
    text = (REPO_ROOT / FIX / "ome.yaml").read_text(encoding="utf-8")
    start = text.rindex("---", 0, text.index("kind: ClusterServingRuntime"))
    end = text.index("---", text.index("kind: ClusterServingRuntime"))
    result = run_kvcheck("import", "-", stdin=text[:start] + text[end:])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines()[1] == (
        "<stdin>:32:11: InferenceService deepseek-r1-pd names runtime 'srt-deepseek-r1-pd-rdma', which is not "
        "among the files read; pass its ClusterServingRuntime or ServingRuntime too"
    )


def test_flags_on_an_unstated_image_entrypoint_are_not_assumed() -> None:
    text = (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n"
        "      containers:\n        - name: s\n          image: lmsysorg/sglang:v0.5.23\n"
        '          args: ["--model-path", "m", "--tp", "2"]\n'
    )
    result = run_kvcheck("import", "-", stdin=text)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines()[1] == (
        "<stdin>:10:17: the container passes SGLang flags as args to its image's entrypoint, which the file does "
        "not state; add command: [python3, -m, sglang.launch_server] so kvcheck reads what runs"
    )


def test_a_slurm_batch_script_gives_one_role_per_srun_server() -> None:
    f = f"{FIX}/sbatch-pd.sh"
    result = run_kvcheck("import", f, "--sglang-version", "0.5.23", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {
        "name": "sbatch-pd", "context_length": 65536, "model": {"path": "/lustre/models/Qwen3-235B-A22B"},
        "engine": {"version": "0.5.23"}, "gpu": "h100",
        "roles": {
            "prefill": {"gpus": EIGHT, "args": {
                "tp-size": 8, "disaggregation-mode": "prefill", "mem-fraction-static": 0.85, "context-length": 65536},
                "env": {"TP": "8"}},  # `export TP=8`; Slurm's own SLURM_NNODES is not the script's
            "decode": {"gpus": EIGHT, "args": {
                "tp-size": 8, "disaggregation-mode": "decode", "mem-fraction-static": 0.88, "context-length": 65536},
                "env": {"TP": "8"}},
        },
    }
    lines = run_kvcheck("import", f, "--sglang-version", "0.5.23").stdout.splitlines()
    assert f"gpu: h100  # {f}:4:9 (Slurm GRES type)" in lines
    assert f"      mem-fraction-static: 0.88  # {f}:17:56" in lines


def test_locations_are_relative_to_the_working_directory_when_the_file_is_below_it() -> None:
    result = run_kvcheck("import", str(REPO_ROOT / FIX / "compose.yaml"))
    assert result.stdout.splitlines()[1] == f"name: compose  # {FIX}/compose.yaml"


def test_rbg_role_templates_patches_and_the_controllers_own_variables() -> None:
    """RBG v1alpha2 as its examples write it: templateRef + patch over spec.roleTemplates,
    leaderTemplatePatch / workerTemplatePatch, and RBG_LWP_GROUP_SIZE for --nnodes (checked against
    the public examples: sgl-project/rbg examples/inference/*.yaml)."""
    f = f"{FIX}/rbg-v1alpha2-roletemplates.yaml"
    result = run_kvcheck("import", f)
    assert result.exit_code == 1, result.stderr  # the KV501 below
    # the worker patch replaced the env the shared template set; a value that came through a variable
    # is reported once at its place, not twice at the same line and column
    assert result.stderr.splitlines()[:-1] == [
        f"kvcheck: error: {f}:60:23: KV501 --mem-fraction-static: the leader runs 0.83, the worker runs 0.8",
    ]
    assert f"nnodes: 2  # {f}:64:23 ($RBG_LWP_GROUP_SIZE = leaderWorkerPattern size at {f}:42:15)" in result.stdout
    assert f"gpus: [0, 1, 2, 3]  # {f}:24:35 (limits[nvidia.com/gpu])" in result.stdout


def test_a_templateref_to_an_undefined_role_template_is_an_input_error() -> None:
    text = (
        "apiVersion: workloads.x-k8s.io/v1alpha2\nkind: RoleBasedGroup\nmetadata: {name: g}\nspec:\n"
        "  roleTemplates:\n    - name: base\n      template: {spec: {containers: []}}\n"
        "  roles:\n    - name: decode\n      standalonePattern:\n        templateRef:\n          name: bsae\n"
    )
    result = run_kvcheck("import", "-", stdin=text)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(
        "kvcheck: error: 1 error in deployment files:\n<stdin>:12:17: templateRef names roleTemplate 'bsae', "
        "which spec.roleTemplates does not define (it defines: base)\n"
    )


def test_leader_only_and_per_node_flags_that_differ_are_warnings_at_their_own_column() -> None:
    """A double-quoted `sh -c` script continued with `\\` over two lines (the shape of RBG's multi-node
    LeaderWorkerSet example): each value points at its own line and column; --enable-metrics on the
    leader only and per-node --disaggregation-ib-device lists are KV501 warnings, and verify passes."""
    f = f"{FIX}/lws-quoted.yaml"
    result = run_kvcheck("import", f)
    assert result.exit_code == 0, result.stderr
    note = "(a flag that does not size the pool: a warning)"
    ib = "--disaggregation-ib-device: the leader runs mlx5_0,mlx5_1, the worker runs mlx5_2,mlx5_3"
    assert result.stderr.splitlines() == [
        f"kvcheck: warning: {f}:22:128: KV501 {ib} at {f}:35:128 {note}",
        f"kvcheck: warning: {f}:22:142: KV501 --enable-metrics: the leader runs True, the worker runs without it "
        f"at {f}:34:18 {note}",
    ]
    assert f"tp-size: 4  # {f}:21:86" in result.stdout
    assert f"nnodes: 2  # {f}:22:24 ($LWS_GROUP_SIZE = LeaderWorkerSet size at {f}:12:11)" in result.stdout
    assert f"mem-fraction-static: 0.86  # {f}:22:96" in result.stdout
    verify = run_kvcheck(
        "verify", f, "--mode", "estimate", "--gpu", "H200", "--context-length", "32768",
        "--model-config", "tests/data/models/Qwen--Qwen3-32B.json",
    )
    assert verify.exit_code == 0, verify.stdout + verify.stderr


def test_an_srt_slurm_sweep_file_says_how_to_get_its_recipes() -> None:
    """NVIDIA/srt-slurm recipes/b200-fp8/*.yaml are sweeps (`base` + `zip_override_*`), not recipes."""
    f = f"{FIX}/srt-slurm-sweep.yaml"
    # verify and plan say the same as import (they read it as a manifest with unknown keys before)
    for args in (("import", f), ("verify", f, "--mode", "estimate"), ("plan", f)):
        result = run_kvcheck(*args)
        assert (result.exit_code, result.stdout) == (2, ""), args
        assert result.stderr.splitlines()[0] == (
            f"kvcheck: error: {f}:4: an srt-slurm sweep file (`base` + `zip_override_lowlat`, "
            "`zip_override_maxtpt`): each variant is a recipe only once srtctl has merged it over `base`; write "
            f"them with `srtctl resolve-override -f {f}` and check the files it writes (<file>_<variant>.yaml)"
        ), args


def test_a_flag_refused_by_an_assumed_release_says_the_release_was_assumed() -> None:
    """Dynamo's runtime image names no SGLang release: a flag the newest catalogue removed is still an
    input error, and the message says which release was assumed and how to state the real one."""
    f = f"{FIX}/dynamo-unstated-release.yaml"
    result = run_kvcheck("import", f)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines()[:2] == [
        "kvcheck: error: 1 error in deployment files:",
        f"{f}:35:15: '--prefill-round-robin-balance' was removed in SGLang 0.5.23 (last in 0.5.19). The files "
        "do not name the SGLang release, so kvcheck read them with the flags of 0.5.23, the newest it knows: "
        "if the deployment runs an older release, pass --engine-version",
    ]
    result = run_kvcheck("import", f, "--sglang-version", "0.5.6", "--format", "json")
    assert result.exit_code == 0, result.stderr
    roles = json.loads(result.stdout)["roles"]
    assert roles["decode"] == {"gpus": [0, 1, 2, 3], "args": {
        "tensor-parallel-size": 4, "disaggregation-mode": "decode", "mem-fraction-static": 0.8,
        "prefill-round-robin-balance": True}}
    assert roles["prefill"]["args"]["load-balance-method"] == "round_robin"


def test_the_model_path_in_a_config_file_is_the_roles_model() -> None:
    """Dynamo's recipes keep every SGLang flag, --model-path too, in the ConfigMap passed with --config;
    Dynamo's own flags in public recipes (--dyn-enable-structural-tag) are left to the wrapper without KV502."""
    f = f"{FIX}/dynamo-config-model.yaml"
    result = run_kvcheck("import", f)  # sglang-runtime:1.1.0 runs SGLang 0.5.10.post1
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    assert f"  path: Qwen/Qwen3-235B-A22B-FP8  # {f}:10:17 (--config /etc/sglang/worker.yaml)" in result.stdout
    result = run_kvcheck("import", f, "--format", "json")
    assert json.loads(result.stdout) == {
        "name": "qwen-agg", "context_length": 131072, "model": {"path": "Qwen/Qwen3-235B-A22B-FP8"},
        "engine": {"version": "0.5.10.post1"},
        "roles": {"Worker": {"gpus": [0, 1, 2, 3], "args": {
            "tensor-parallel-size": 4, "context-length": 131072, "mem-fraction-static": 0.88, "cuda-graph-bs": [1, 8, 32]}}},
    }


def test_a_pod_with_a_server_in_two_containers_is_exit_2_at_the_second() -> None:
    # checking the first container alone passed a pod whose second server holds a 1,000-token pool
    container = ("      - name: {name}\n        image: lmsysorg/sglang:v0.5.23-cu129\n"
                 "        command: [python3, -m, sglang.launch_server]\n"
                 "        args: [--model-path, m, --context-length, \"131072\"{extra}]\n"
                 "        resources: {{limits: {{nvidia.com/gpu: 1}}}}\n")
    text = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: llama}\nspec:\n  template:\n    spec:\n"
            "      containers:\n" + container.format(name="sglang", extra="")
            + container.format(name="sglang2", extra=", --max-total-tokens, \"1000\"")
            + "      - name: logs\n        image: busybox\n        command: [sh, -c, 'tail -f /dev/null']\n")
    for command in ("import", "verify"):
        result = run_kvcheck(command, "-", "--model-config", "docs/examples/single-server/llama-3.1-8b-instruct.config.json",
                             *(("--mode", "estimate", "--gpu", "H100") if command == "verify" else ()), stdin=text)
        assert (result.exit_code, result.stdout) == (2, ""), result.stderr
        assert ("<stdin>:13:9: the pod starts a server in two containers (sglang and sglang2): kvcheck checks one "
                "server a pod") in result.stderr


@pytest.mark.parametrize(("command", "column"), [
    ('[python3, -m, sglang_router.launch_server, --model-path, m, --context-length, "4096", --dp-size, "2"]', 32),
    ('[sh, -c, "python3 -m sglang_router.launch_server --model-path m --context-length 4096 --dp-size 2"]', 39),
])
def test_a_router_that_launches_its_own_sglang_servers_is_exit_2_not_skipped(command: str, column: int) -> None:
    # sglang_router.launch_server starts --dp-size SGLang servers beside its router: it was taken for a router
    # alone, so the pod was not a role and verify passed the file on its other, larger server
    doc = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  template:\n    spec:\n"
           "      containers:\n      - name: c\n        image: lmsysorg/sglang:v0.5.23\n        command: {command}\n"
           "        resources: {{limits: {{nvidia.com/gpu: 2}}}}\n")
    text = (doc.format(name="big", command='[python3, -m, sglang.launch_server, --model-path, m, --context-length, '
                       '"65536"]') + "---\n" + doc.format(name="routed", command=command))
    for cmd in ("import", "verify"):
        result = run_kvcheck(cmd, "-", *(("--mode", "estimate", "--gpu", "H100", "--model-config",
                                          "docs/examples/single-server/llama-3.1-8b-instruct.config.json")
                                         if cmd == "verify" else ()), stdin=text)
        assert (result.exit_code, result.stdout) == (2, ""), result.stderr
        assert (f"<stdin>:22:{column}: python -m sglang_router.launch_server starts SGLang servers beside its "
                "router") in result.stderr
