"""verify and plan on deployment files directly: the CI gate on `helm template` output, overlays, findings
at the deployment file's own line and column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck

FIX = "tests/inputs/deploy/fixtures"
LLAMA = "docs/examples/single-server/llama-3.1-8b-instruct.config.json"
GLM = "docs/examples/incident/glm-5.2-fp8.config.json"


def _json(result):
    return json.loads(result.stdout)


def test_helm_template_output_piped_into_verify_gates_the_chart() -> None:
    """The done-when: `helm template . | kvcheck verify - --mode estimate --gpu H200 --model-config ...`."""
    for variant, code in (("good", 0), ("short", 1)):
        text = (REPO_ROOT / FIX / "helm" / f"rendered-{variant}.yaml").read_text(encoding="utf-8")
        result = run_kvcheck("verify", "-", "--mode", "estimate", "--gpu", "H200", "--model-config", LLAMA,
                             "--format", "json", stdin=text)
        assert result.exit_code == code, result.stderr
        report = _json(result)
        assert (report["source"], report["context_length"]) == ("<stdin>", 131072)
        assert [r["name"] for r in report["roles"]] == ["llama-sglang"]
        role = report["roles"][0]
        assert (role["status"], role["required_tokens"]) == ("pass" if code == 0 else "fail", 131072)
        if code == 1:
            assert role["pool_tokens"] < 131072
            assert [(f["rule"], f["location"]) for f in report["findings"]] == [
                ("KV101", {"file": "<stdin>", "line": 49, "column": 11}),
            ]


def test_a_deployment_file_and_the_manifest_imported_from_it_give_the_same_pool(tmp_path: Path) -> None:
    args = ("--mode", "estimate", "--format", "json")
    direct = run_kvcheck("verify", f"{FIX}/deployment.yaml", "--model-config", LLAMA, *args)
    manifest = tmp_path / "kvcheck.yaml"  # written elsewhere: -o makes model.config relative to it
    imported = run_kvcheck("import", f"{FIX}/deployment.yaml", "--model-config", LLAMA, "-o", str(manifest))
    assert imported.exit_code == 0, imported.stderr
    via_manifest = run_kvcheck("verify", str(manifest), *args)
    assert (direct.exit_code, via_manifest.exit_code) == (0, 0)
    assert _json(direct)["roles"][0]["pool_tokens"] == _json(via_manifest)["roles"][0]["pool_tokens"]
    assert _json(direct)["roles"][0]["argv"] == _json(via_manifest)["roles"][0]["argv"]


def test_overlay_manifest_adds_only_what_the_files_lack() -> None:
    result = run_kvcheck("verify", f"{FIX}/overlay.yaml", "--mode", "estimate", "--format", "json")
    assert result.exit_code == 1, result.stderr
    report = _json(result)
    assert report["source"] == f"{FIX}/overlay.yaml"
    assert [(f["rule"], f["location"]) for f in report["findings"]] == [
        ("KV101", {"file": f"{FIX}/helm/rendered-short.yaml", "line": 49, "column": 11}),
    ]


def test_values_stated_in_the_overlay_and_the_files_must_agree() -> None:
    result = run_kvcheck("verify", f"{FIX}/overlay-conflict.yaml", "--mode", "estimate")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        "kvcheck: error: 1 error in deployment files:\n"
        f"{FIX}/deployment.yaml:23:33: the GPU type is 'NVIDIA-H100-80GB-HBM3' here (nodeSelector "
        f"nvidia.com/gpu.product) but 'H200' in {FIX}/overlay-conflict.yaml:3:6 (overlay); they must agree\n"
        "kvcheck: hint: state each value once, or make the files, the options and the overlay say the same\n"
    )
    result = run_kvcheck("verify", f"{FIX}/deployment.yaml", "--mode", "estimate", "--gpu", "B200")
    assert result.exit_code == 2
    assert "the GPU type is 'NVIDIA-H100-80GB-HBM3' here (nodeSelector nvidia.com/gpu.product) but 'B200' " \
        "in --gpu; they must agree" in result.stderr
    # the same card under another spelling agrees
    result = run_kvcheck("verify", f"{FIX}/deployment.yaml", "--mode", "estimate", "--gpu", "H100",
                         "--model-config", LLAMA)
    assert result.exit_code == 0, result.stderr


def test_findings_point_at_the_deployment_file_in_every_format() -> None:
    args = (f"{FIX}/lws-pd.yaml", "--mode", "estimate", "--context-length", "131072", "--model-config", GLM,
            "--gpu", "H200")
    result = run_kvcheck("verify", *args, "--format", "github")
    assert result.exit_code == 1
    f = f"{FIX}/lws-pd.yaml"
    lines = result.stdout.splitlines()
    assert lines[:2] == [  # one annotation per disagreement, at the leader's line, naming the worker's
        f"::error file={f},line=82,col=83,title=KV501 glm-decode::--dp-size: the leader runs 16, the worker runs 8 "
        f"at {f}:96:82%0Afix: every node of one instance must start with the same server arguments",
        f"::error file={f},line=82,col=68,title=KV501 glm-decode::--mem-fraction-static: the leader runs 0.85, "
        f"the worker runs 0.9 at {f}:96:68%0Afix: every node of one instance must start with the same server "
        "arguments",
    ]
    report = _json(run_kvcheck("verify", *args, "--format", "json"))
    assert [(x["rule"], x["location"]["line"], x["location"]["column"]) for x in report["findings"]
            if x["rule"] == "KV501"] == [("KV501", 82, 83), ("KV501", 82, 68)]
    assert [(r["name"], r["status"]) for r in report["roles"]] == [("glm-prefill", "pass"), ("glm-decode", "fail")]
    table = run_kvcheck("verify", *args)
    assert f"at {f}:82:83" in table.stdout


def test_an_unresolved_value_means_the_deployment_could_not_be_checked() -> None:
    result = run_kvcheck("verify", f"{FIX}/ome.yaml", "--mode", "estimate", "--context-length", "131072",
                         "--model-config", GLM, "--format", "json")
    assert result.exit_code == 3, result.stderr
    report = _json(result)
    assert report["verdict"] == "error"
    assert [(r["name"], r["status"]) for r in report["roles"]] == [("prefill", "pass"), ("decode", "error")]
    assert report["findings"][0] == {
        "rule": "KV317", "severity": "error", "role": "decode",
        "message": "the value given to max-running-requests uses $(MAX_REQS), which the files do not set",
        "hint": "pass the file that defines it, or set it in the container's env or the script (an overlay "
                "manifest states only the model path, GPU, release and window)",
        "location": {"file": f"{FIX}/ome.yaml", "line": 70, "column": 83},
    }


def test_the_window_must_come_from_somewhere() -> None:
    result = run_kvcheck("verify", f"{FIX}/lws-pd.yaml", "--mode", "estimate")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(
        f"kvcheck: error: {FIX}/lws-pd.yaml: the files do not state the context window to check "
        "(glm: the roles set no common --context-length)\n"
    )


def test_deployment_options_do_not_apply_to_a_kvcheck_manifest() -> None:
    result = run_kvcheck("verify", "docs/examples/single-server/manifest.yaml", "--mode", "estimate", "--gpu", "H200")
    assert result.exit_code == 2
    assert "is a kvcheck manifest: --gpu, --context-length, --model-config and --engine-version apply to " \
        "deployment files" in result.stderr


def test_plan_reads_deployment_files_too() -> None:
    text = (REPO_ROOT / FIX / "helm" / "rendered-short.yaml").read_text(encoding="utf-8")
    result = run_kvcheck("plan", "-", "--gpu", "H200", "--model-config", LLAMA, "--format", "json", stdin=text)
    assert result.exit_code == 1, result.stderr
    report = _json(result)
    assert [r["name"] for r in report["roles"]] == ["llama-sglang"]
    assert report["findings"][0]["location"] == {"file": "<stdin>", "line": 49, "column": 11}


def test_a_secret_in_a_flag_that_does_not_size_memory_is_a_warning_and_configmap_refs_resolve() -> None:
    text = (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n"
        "      containers:\n        - name: s\n          image: lmsysorg/sglang:v0.5.23\n          env:\n"
        "            - name: MEM\n              valueFrom: {configMapKeyRef: {name: tuning, key: mem}}\n"
        "            - name: KEY\n              valueFrom: {secretKeyRef: {name: s, key: k}}\n"
        '          command: ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--context-length", '
        '"131072", "--mem-fraction-static", "$(MEM)", "--api-key", "$(KEY)"]\n'
        "          resources: {limits: {nvidia.com/gpu: 1}}\n"
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: tuning}\ndata:\n  mem: \"0.77\"\n"
    )
    result = run_kvcheck("verify", "-", "--mode", "estimate", "--gpu", "H200", "--model-config", LLAMA,
                         "--format", "json", stdin=text)
    assert result.exit_code == 0, result.stderr
    report = _json(result)
    assert report["roles"][0]["argv"][-2:] == ["--mem-fraction-static", "0.77"]
    assert report["findings"] == [{
        "rule": "KV317", "severity": "warning", "role": "x",
        "message": "the value given to api-key uses $KEY, which the files do not set; KEY: it comes from a "
                   "secretKeyRef reference (a flag that does not size memory: the check goes on without it)",
        "hint": "pass the file that defines it, or set it in the container's env or the script (an overlay "
                "manifest states only the model path, GPU, release and window)",
        "location": {"file": "<stdin>", "line": 15, "column": 161},
    }]


def test_roles_on_different_releases_are_checked_each_against_its_own() -> None:
    text = (REPO_ROOT / FIX / "lws-pd.yaml").read_text(encoding="utf-8")
    cut = text.index("name: glm-decode")
    mixed = text[:cut] + text[cut:].replace("sglang:v0.5.23", "sglang:v0.5.22")
    result = run_kvcheck("verify", "-", "--mode", "estimate", "--context-length", "131072", "--model-config", GLM,
                         "--gpu", "H200", "--format", "json", stdin=mixed)
    assert result.exit_code == 1
    assert [(r["name"], r["details"]["engine_version"]) for r in _json(result)["roles"]] == [
        ("glm-prefill", "0.5.23"), ("glm-decode", "0.5.22")]
    # a manifest holds one engine.version: import says so
    result = run_kvcheck("import", "-", stdin=mixed)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[1] == (
        "<stdin>:76:20: role 'glm-decode' states SGLang release '0.5.22', role 'glm-prefill' '0.5.23' at "
        "<stdin>:15:20; a manifest holds one SGLang release"
    )


def test_verify_reads_a_slurm_batch_script() -> None:
    result = run_kvcheck("verify", f"{FIX}/sbatch-pd.sh", "--mode", "estimate", "--sglang-version", "0.5.23",
                         "--model-config", GLM, "--format", "json")
    assert result.exit_code in (0, 1), result.stderr  # judged (the figures are the estimator's), not refused
    assert [r["name"] for r in _json(result)["roles"]] == ["prefill", "decode"]
    assert _json(result)["source"] == f"{FIX}/sbatch-pd.sh"


@pytest.mark.parametrize("setter", [
    '[ -n "$BIG" ] && MTT=500000', "for v in 500000; do MTT=$v; done", 'case "$MODE" in big) MTT=500000;; esac',
    "source ./env.sh",
])
def test_a_slurm_script_whose_value_depends_on_a_path_is_not_checked(tmp_path: Path, setter: str) -> None:
    # bash may launch with 1,000 or 500,000 tokens: the last assignment read is not the value (it passed)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --gres=gpu:h100:1\nMTT=1000\n" + setter + "\n"
                      "srun python3 -m sglang.launch_server --model-path m --context-length 131072 "
                      "--max-total-tokens $MTT\n")
    result = run_kvcheck("verify", str(script), "--mode", "estimate", "--sglang-version", "0.5.23",
                         "--model-config", LLAMA, "--format", "json")
    assert result.exit_code == 3, result.stdout
    [unset] = [f for f in _json(result)["findings"] if f["rule"] == "KV317"]
    assert unset["message"].startswith("the value given to max-total-tokens uses $MTT")
    assert unset["location"]["line"] == 6


def test_an_unknown_node_count_is_not_checked_rather_than_a_wrong_gpu_count() -> None:
    """--nnodes from a Secret: exit 3 with KV317 naming it, not exit 2 claiming 8 GPUs x 1 node != 16."""
    f = f"{FIX}/statefulset-secret-nnodes.yaml"
    result = run_kvcheck("verify", f, "--mode", "estimate", "--gpu", "H200", "--context-length", "32768",
                         "--model-config", "tests/data/models/Qwen--Qwen3-8B.json", "--format", "json")
    assert result.exit_code == 3, result.stderr
    report = _json(result)
    assert [(r["name"], r["status"]) for r in report["roles"]] == [("qwen-dist", "error")]
    assert [(x["rule"], x["severity"], x["location"]) for x in report["findings"] if x["rule"] == "KV317"] == [
        ("KV317", "error", {"file": f, "line": 17, "column": 33}),
    ]
    assert "GPU(s) per node" not in result.stderr


def test_an_overlay_says_where_measure_mode_runs_the_files_roles(tmp_path: Path) -> None:
    # Deployment files name no launcher; the overlay's `launcher:` block is the manifest's, validated alike.
    overlay = tmp_path / "kvcheck.yaml"
    overlay.write_text(
        f"deployment: {REPO_ROOT / FIX / 'deployment.yaml'}\n"
        f"model: {{config: {REPO_ROOT / LLAMA}}}\n"
        "launcher:\n"
        "  kind: kubernetes\n"
        "  kubernetes: {namespace: kvcheck-ci}\n"
    )
    result = run_kvcheck("verify", str(overlay), "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "# namespace kvcheck-ci, run id " in result.stdout
    assert "\n  namespace: kvcheck-ci\n" in result.stdout

    overlay.write_text(overlay.read_text().replace("namespace: kvcheck-ci", "namespaces: kvcheck-ci"))
    result = run_kvcheck("verify", str(overlay), "--dry-run")
    assert (result.exit_code, result.stdout) == (2, "")
    assert f"{overlay}:5:16: launcher.kubernetes.namespaces: unknown key 'namespaces'" in result.stderr


def test_an_overlay_names_its_own_keys_when_a_key_is_wrong(tmp_path: Path) -> None:
    # `args:` is a manifest key an overlay does not take; the message said "unknown key 'args' (did you mean
    # 'args'?)" and listed the full manifest's keys
    overlay = tmp_path / "kvcheck.yaml"
    overlay.write_text(f"deployment: {REPO_ROOT / FIX / 'deployment.yaml'}\nargs: {{max-total-tokens: 1000}}\n"
                       "bogus: 1\ncontext_lenght: 5\n")
    result = run_kvcheck("verify", str(overlay), "--mode", "estimate")
    assert (result.exit_code, result.stdout) == (2, "")
    keys = "deployment, name, context_length, model, engine, gpu, policy, launcher"
    assert result.stderr.splitlines()[1:4] == [
        f"{overlay}:2:1: args: 'args' is a manifest key an overlay does not take: the deployment files state it "
        f"(an overlay takes here: {keys})",
        f"{overlay}:3:1: bogus: unknown key 'bogus' (allowed here: {keys})",
        f"{overlay}:4:1: context_lenght: unknown key 'context_lenght' (did you mean 'context_length'?)",
    ]


QWEN3 = "tests/data/models/Qwen--Qwen3-8B.json"
QWEN3_POD = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: qwen3}
spec:
  template:
    spec:
      containers:
        - name: sglang
          image: lmsysorg/sglang:v0.5.23
%s
          resources: {limits: {nvidia.com/gpu: 1}}
"""
ENV_FORMS = {
    "container env": """\
          env:
            - {name: SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN, value: "1"}
          command: [python3, -m, sglang.launch_server]
          args: [--model-path, Qwen/Qwen3-8B, --context-length, "131072"]""",
    "export in the script": """\
          command: [bash, -c]
          args:
            - |
              export SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1
              exec python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --context-length 131072""",
    "prefix of exec": """\
          command: [sh, -c, "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 exec python3 -m sglang.launch_server \
--model-path Qwen/Qwen3-8B --context-length 131072"]""",
}


@pytest.mark.parametrize("form", ENV_FORMS.values(), ids=ENV_FORMS.keys())
def test_the_pods_environment_reaches_the_role(tmp_path: Path, form: str) -> None:
    # the estimate refused this Qwen3 pod (131,072 > its 40,960 context) although the pod sets the switch
    deployment = tmp_path / "qwen3.yaml"
    deployment.write_text(QWEN3_POD % form, encoding="utf-8")
    result = run_kvcheck("verify", str(deployment), "--mode", "estimate", "--gpu", "H200", "--model-config", QWEN3,
                         "--format", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    from kvcheck.commands.import_ import overrides_from_options
    from kvcheck.inputs.load import load_inputs

    overrides = overrides_from_options(gpu="H200", context_length=None, model_config=Path(QWEN3), sglang_version=None)
    (target,) = load_inputs([str(deployment)], overrides).targets
    assert target.env == {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    imported = run_kvcheck("import", str(deployment), "--gpu", "H200")
    assert "    env:\n      SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: '1'  # " in imported.stdout


def test_without_the_switch_the_estimate_still_refuses(tmp_path: Path) -> None:
    deployment = tmp_path / "qwen3.yaml"
    deployment.write_text(QWEN3_POD % ENV_FORMS["container env"].replace(
        '            - {name: SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN, value: "1"}', "            - {name: X, value: y}"),
        encoding="utf-8")
    result = run_kvcheck("verify", str(deployment), "--mode", "estimate", "--gpu", "H200", "--model-config", QWEN3)
    # SGLang's own refusal of a context above the model's: exit 2 at the flag, the switch named in the hint
    assert result.exit_code == 2
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in result.stderr


def test_a_manifest_among_several_inputs_or_on_stdin_is_named_as_a_manifest() -> None:
    # both said "... not a deployment file kvcheck reads", naming the manifest as a broken deployment file
    one, two = "docs/examples/single-server/manifest.yaml", "docs/examples/incident/manifest.yaml"
    result = run_kvcheck("verify", one, two, "--mode", "estimate")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(f"kvcheck: error: {one}: a kvcheck manifest among several inputs: verify and "
                                    "plan read one manifest at a time")
    result = run_kvcheck("verify", "-", "--mode", "estimate", stdin=(REPO_ROOT / one).read_text())
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith("kvcheck: error: <stdin>: a kvcheck manifest on stdin: a manifest is read "
                                    "from a file")


def test_a_shell_script_without_sbatch_is_neither_a_manifest_nor_a_deployment_file(tmp_path: Path) -> None:
    # verify said "serve.sh is a kvcheck manifest: --gpu ... apply to deployment files" with options and
    # "serve.sh:1:1: the manifest must be a YAML mapping, not str" without; import said only "not a deployment file"
    script = tmp_path / "serve.sh"
    script.write_text("#!/bin/bash\nVLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve meta-llama/Llama-3.1-8B-Instruct "
                      "--max-model-len 200000 -tp 2\n")
    options = ("--mode", "estimate", "--gpu", "H100", "--model-config", QWEN3, "--engine-version", "0.32.0")
    for args in (("verify", str(script), *options), ("verify", str(script)), ("import", str(script))):
        result = run_kvcheck(*args)
        assert (result.exit_code, result.stdout) == (2, ""), args
        assert result.stderr.splitlines() == [
            f"kvcheck: error: {script}: neither a kvcheck manifest nor a deployment file kvcheck reads: a shell "
            "script without #SBATCH directives",
            'kvcheck: hint: for a bare engine command line, pass the line itself: kvcheck import --cmd "vllm serve '
            '..." (or kvcheck verify --cmd "python -m sglang.launch_server ..."); a Slurm batch script is read with '
            "its #SBATCH directives",
        ], args


WRAPPED_SERVER = """\
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: llama-wrapped
spec:
  template:
    spec:
      containers:
        - name: server
          image: registry.example.com/llm-wrapper:1.4
          command: ["python3", "serve.py"]
          args: ["--config", "/etc/llm/llama.yaml"]
          resources:
            limits:
              nvidia.com/gpu: 4
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: metrics-exporter
spec:
  template:
    spec:
      containers:
        - name: exporter
          image: registry.example.com/exporter:2
          command: ["/exporter"]
"""


def test_a_gpu_workload_that_starts_no_server_kvcheck_reads_is_named_not_skipped(tmp_path: Path) -> None:
    """A file with an SGLang Deployment and a GPU Deployment behind a wrapper script: the wrapper's pool is
    unknown. It used to be skipped without a word (the SGLang role passed alone); it is KV319 now, a warning
    (exit 0, 1 under --strict), at its container. A workload that asks for no GPU is not named."""
    path = tmp_path / "all.yaml"
    path.write_text((REPO_ROOT / FIX / "deployment.yaml").read_text(encoding="utf-8") + WRAPPED_SERVER)
    args = ("verify", str(path), "--mode", "estimate", "--model-config", LLAMA, "--format", "json")
    result = run_kvcheck(*args)
    assert result.exit_code == 0, result.stderr
    report = _json(result)
    assert [r["name"] for r in report["roles"]] == ["llama-sglang"]
    (kv319,) = [f for f in report["findings"] if f["rule"] == "KV319"]
    assert kv319["severity"] == "warning"
    assert kv319["message"] == (
        "Deployment 'llama-wrapped', container 'server', asks for 4 GPUs (limits[nvidia.com/gpu]) but starts no "
        "engine server kvcheck reads: python3 serve.py --config /etc/llm/llama.yaml; it is not checked"
    )
    assert kv319["location"] == {"file": str(path), "line": 52, "column": 11}
    assert run_kvcheck(*args, "--strict").exit_code == 1
    # the import says so too, in the manifest it writes
    imported = run_kvcheck("import", str(path), "--model-config", LLAMA)
    assert imported.exit_code == 0, imported.stderr
    assert f"kvcheck: warning: {path}:52:11: KV319 Deployment 'llama-wrapped', container 'server'" in imported.stderr


WRAPPED_DYNAMO_WORKER = """\
---
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata:
  name: wrapped-graph
spec:
  services:
    Frontend:
      componentType: frontend
      extraPodSpec:
        mainContainer:
          image: nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.6.1
          command: ["python3", "-m", "dynamo.frontend"]
    Worker:
      componentType: worker
      resources:
        limits:
          gpu: "4"
      extraPodSpec:
        mainContainer:
          image: registry.example.com/llm-wrapper:1.4
          command: ["python3", "serve.py"]
"""


def test_a_dynamo_worker_that_starts_no_server_kvcheck_reads_is_named_too(tmp_path: Path) -> None:
    """Dynamo asks for a worker's GPUs on the service (resources.limits.gpu) and runs its mainContainer, not a
    pod template's containers: such a worker behind a wrapper script was still skipped without a word."""
    path = tmp_path / "all.yaml"
    path.write_text((REPO_ROOT / FIX / "deployment.yaml").read_text(encoding="utf-8") + WRAPPED_DYNAMO_WORKER)
    result = run_kvcheck("verify", str(path), "--mode", "estimate", "--model-config", LLAMA, "--format", "json")
    assert result.exit_code == 0, result.stderr
    (kv319,) = [f for f in _json(result)["findings"] if f["rule"] == "KV319"]
    assert kv319["message"] == (
        "DynamoGraphDeployment 'wrapped-graph', container 'Worker', asks for 4 GPUs (limits[gpu]) but starts no "
        "engine server kvcheck reads: python3 serve.py; it is not checked"
    )
    assert kv319["location"] == {"file": str(path), "line": 63, "column": 11}  # its mainContainer


def test_kv319_names_the_one_way_it_can_be_let_stand_and_that_way_works(tmp_path: Path) -> None:
    """KV319's fix said 'suppress the finding', but an inline or ignore-file suppression of a KV3xx code is
    refused (exit 2). An overlay manifest's policy.ignore is what takes it, as the hint now says."""
    files = tmp_path / "all.yaml"
    files.write_text((REPO_ROOT / FIX / "deployment.yaml").read_text(encoding="utf-8") + WRAPPED_SERVER)
    args = ("--mode", "estimate", "--model-config", LLAMA, "--strict", "--format", "json")
    (kv319,) = [f for f in _json(run_kvcheck("verify", str(files), *args))["findings"] if f["rule"] == "KV319"]
    assert kv319["hint"] == (
        "start the engine in the container's command (python -m sglang.launch_server ..., vllm serve ...) so "
        "kvcheck reads its arguments; for a GPU workload that serves no model, list KV319 under policy.ignore "
        "in an overlay manifest (deployment: [FILE]): inline and ignore-file suppressions refuse KV3xx codes"
    )
    ignored = tmp_path / "ignore.yaml"
    ignored.write_text("suppressions:\n  - {rule: KV319, reason: a training run}\n")
    refused = run_kvcheck("verify", str(files), *args, "--ignore-file", str(ignored))
    assert refused.exit_code == 2
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("deployment: [all.yaml]\npolicy: {ignore: [KV319]}\n")
    result = run_kvcheck("verify", str(overlay), "--mode", "estimate", "--model-config", LLAMA, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert [f["rule"] for f in _json(result)["findings"] if f["rule"] == "KV319"] == []


def test_a_wrapper_service_beside_a_server_in_the_same_graph_is_named(tmp_path: Path) -> None:
    """KV319 looked only at documents that gave no role: a DynamoGraphDeployment with one SGLang worker and one
    worker behind a wrapper script passed on the SGLang worker alone. Each GPU container is judged now; the
    graph's own SGLang worker, and a LeaderWorkerSet's worker pods (they run the engine too), are not named."""
    graph = WRAPPED_DYNAMO_WORKER.replace(
        "    Worker:\n", "    Server:\n      componentType: worker\n"
        "      resources:\n        limits:\n          gpu: \"1\"\n      extraPodSpec:\n        mainContainer:\n"
        "          image: nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.6.1\n"
        "          command: [python3, -m, dynamo.sglang, --model-path, meta-llama/Llama-3.1-8B-Instruct,"
        " --context-length, \"131072\"]\n    Worker:\n")
    path = tmp_path / "graph.yaml"
    path.write_text(graph)
    args = ("--mode", "estimate", "--gpu", "H100", "--model-config", LLAMA, "--format", "json")
    report = _json(run_kvcheck("verify", str(path), *args))
    assert [r["name"] for r in report["roles"]] == ["Server"]
    assert [f["message"].split(",")[1] for f in report["findings"] if f["rule"] == "KV319"] == [" container 'Worker'"]
    for multi_node in (f"{FIX}/lws-pd.yaml", "tests/data/vllm-deploy/lws-vllm-gpu.yaml", f"{FIX}/vllm/raycluster.yaml"):
        imported = run_kvcheck("import", multi_node)
        assert imported.exit_code in (0, 1), imported.stderr  # lws-pd.yaml's leader and worker disagree (KV501)
        assert "KV319" not in imported.stderr  # worker pods that join the leader (its Ray cluster) are the role's
