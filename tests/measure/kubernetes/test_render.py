"""What each role becomes in Kubernetes, checked against the cluster's own schemas."""

from __future__ import annotations

import copy

import pytest

from kvcheck.backends.measure.launchers.kubernetes.render import (
    UID_PLACEHOLDER,
    render_role,
    render_run,
    to_yaml,
)
from kvcheck.backends.measure.launchers.kubernetes.settings import KubernetesSettings, PodTemplates
from kvcheck.errors import InputError
from tests.measure.conftest import make_target
from tests.measure.kubernetes.schemas import K8S_VERSIONS, validation_errors

SETTINGS = KubernetesSettings(
    namespace="ml-gate",
    image="lmsysorg/sglang:v0.5.23",
    service_account="kvcheck",
    node_selector={"nvidia.com/gpu.product": "NVIDIA-H200"},
    tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
    image_pull_secrets=("regcred",),
    pod_spec={"priorityClassName": "gpu-batch", "hostIPC": True},
)
LABELS = {
    "app.kubernetes.io/managed-by": "kvcheck",
    "kvcheck.io/run-id": "0a1b2c3d",
    "kvcheck.io/role": "prefill",
    "kvcheck.io/part": "engine",
}


def _target(**kw):
    kw.setdefault("model_path", "deepseek-ai/DeepSeek-R1")
    target = make_target(**kw)
    import dataclasses

    return dataclasses.replace(target, engine_command=("python3", "-m", "sglang.launch_server"))


# A production Deployment's pod template, as a Kubernetes deployment file writes it.
PRODUCTION_POD = {
    "metadata": {"labels": {"app": "sglang-prefill"}, "annotations": {"sidecar.istio.io/inject": "false"}},
    "spec": {
        "serviceAccountName": "sglang",
        "nodeSelector": {"node.kubernetes.io/instance-type": "p5e.48xlarge"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"}],
        "volumes": [
            {"name": "weights", "persistentVolumeClaim": {"claimName": "r1-weights"}},
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
        ],
        "containers": [
            {"name": "metrics-sidecar", "image": "prom/statsd-exporter:v0.26.0"},
            {
                "name": "sglang",
                "image": "registry.example.com/sglang:v0.5.23-cu129",
                "command": ["python3", "-m", "sglang.launch_server"],
                "args": ["--model-path", "/models/r1", "--tp", "8", "--port", "8000"],
                "env": [
                    {"name": "NCCL_IB_HCA", "value": "mlx5"},
                    {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
                ],
                "ports": [{"containerPort": 8000, "name": "http", "hostPort": 8000}],
                "resources": {"limits": {"nvidia.com/gpu": 8, "memory": "1500Gi"}},
                "volumeMounts": [{"name": "weights", "mountPath": "/models"}, {"name": "shm", "mountPath": "/dev/shm"}],
                "livenessProbe": {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 10},
                "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
            },
        ],
    },
}


def test_one_node_role_is_a_job_with_deadline_ttl_labels_and_the_exact_argv():
    target = _target(args={"tp_size": 8, "mem_fraction_static": 0.88}, gpus=(0, 1, 2, 3, 4, 5, 6, 7),
                     env={"NCCL_DEBUG": "WARN"})
    rendered = render_role(target, SETTINGS, run_id="0a1b2c3d", timeout_s=1800, grace_s=15)
    assert (rendered.kind, rendered.name, rendered.nnodes, rendered.gpus_per_node) == (
        "Job", "kvcheck-0a1b2c3d-prefill", 1, 8)
    (job,) = rendered.objects
    assert job["metadata"] == {
        "name": "kvcheck-0a1b2c3d-prefill",
        "namespace": "ml-gate",
        "labels": LABELS,
        "annotations": {"kvcheck.io/role-name": "prefill"},
    }
    assert {k: v for k, v in job["spec"].items() if k != "template"} == {
        "backoffLimit": 0,
        "activeDeadlineSeconds": 1875,  # 1800 s timeout + 15 s grace + 60 s margin
        "ttlSecondsAfterFinished": 300,
    }
    pod = job["spec"]["template"]
    assert pod["metadata"] == {"labels": LABELS}
    assert pod["spec"] == {
        "containers": [
            {
                "name": "engine",
                "image": "lmsysorg/sglang:v0.5.23",
                "command": [
                    "python3", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-R1",
                    "--tp-size", "8", "--mem-fraction-static", "0.88", "--host", "0.0.0.0", "--port", "30000",
                ],
                "env": [{"name": "NCCL_DEBUG", "value": "WARN"}],
                "ports": [{"name": "kvcheck-http", "containerPort": 30000}],
                "resources": {"limits": {"nvidia.com/gpu": "8"}},
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
            }
        ],
        "restartPolicy": "Never",
        "serviceAccountName": "kvcheck",
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "imagePullSecrets": [{"name": "regcred"}],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        "priorityClassName": "gpu-batch",
        "hostIPC": True,
    }
    assert rendered.argv == tuple(pod["spec"]["containers"][0]["command"])
    for version in K8S_VERSIONS:
        assert validation_errors(job, version) == []


def test_several_nodes_become_a_leaderworkerset_owned_by_a_deadline_job():
    target = _target(args={"tp_size": 16, "nnodes": 2, "disaggregation_mode": "prefill"}, gpus=())
    rendered = render_role(target, KubernetesSettings(image="lmsysorg/sglang:v0.5.23"), run_id="0a1b2c3d",
                           timeout_s=600, grace_s=15, dummy_weights=True)
    assert (rendered.kind, rendered.nnodes, rendered.gpus_per_node) == ("LeaderWorkerSet", 2, 8)
    anchor, lws = rendered.objects
    assert anchor["kind"] == "Job" and anchor["metadata"]["name"] == "kvcheck-0a1b2c3d-prefill-deadline"
    assert anchor["metadata"]["labels"]["kvcheck.io/part"] == "deadline"
    assert anchor["spec"]["activeDeadlineSeconds"] == 675
    assert anchor["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.k8s.io/pause:3.10"
    assert "nvidia.com/gpu" not in str(anchor)
    assert lws["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "kvcheck-0a1b2c3d-prefill-deadline", "uid": UID_PLACEHOLDER}
    ]
    group = lws["spec"]["leaderWorkerTemplate"]
    assert (lws["spec"]["replicas"], group["size"], group["restartPolicy"]) == (1, 2, "None")
    for key in ("leaderTemplate", "workerTemplate"):
        container = group[key]["spec"]["containers"][0]
        assert container["command"] == [
            "python3", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-R1",
            "--tp-size", "16", "--nnodes", "2", "--disaggregation-mode", "prefill",
            "--host", "0.0.0.0", "--port", "30000", "--load-format", "dummy",
            "--dist-init-addr", "$(LWS_LEADER_ADDRESS):20000", "--node-rank", "$(LWS_WORKER_INDEX)",
        ]
        assert container["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
        assert group[key]["spec"]["restartPolicy"] == "Always"
        assert group[key]["metadata"]["labels"] == LABELS
    for version in K8S_VERSIONS:
        assert validation_errors(anchor, version) == []
        assert validation_errors(lws, version) == []


def test_the_deployments_own_pod_template_is_used_as_deployed_minus_labels_probes_and_args():
    target = _target(args={"tp_size": 8, "port": 8000}, gpus=(), model_path="/models/r1")
    templates = PodTemplates(leader=PRODUCTION_POD, source="deploy/prefill.yaml")
    before = copy.deepcopy(PRODUCTION_POD)
    rendered = render_role(target, KubernetesSettings(namespace="ml-gate"), run_id="0a1b2c3d", timeout_s=1800,
                           templates=templates)
    assert PRODUCTION_POD == before  # the reader's value is not modified
    pod = rendered.objects[0]["spec"]["template"]
    # Production's labels would put the measurement behind production's Service; annotations stay.
    assert pod["metadata"] == {"labels": LABELS, "annotations": {"sidecar.istio.io/inject": "false"}}
    spec = pod["spec"]
    assert spec["serviceAccountName"] == "sglang"
    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5e.48xlarge"}
    assert spec["volumes"] == PRODUCTION_POD["spec"]["volumes"]
    assert spec["restartPolicy"] == "Never"
    sidecar, engine = spec["containers"]
    assert sidecar == PRODUCTION_POD["spec"]["containers"][0]
    assert rendered.container == "sglang"
    assert engine == {
        "name": "sglang",
        "image": "registry.example.com/sglang:v0.5.23-cu129",
        "command": [
            "python3", "-m", "sglang.launch_server", "--model-path", "/models/r1", "--tp-size", "8",
            "--port", "8000", "--host", "0.0.0.0", "--port", "30000",
        ],
        "env": PRODUCTION_POD["spec"]["containers"][1]["env"],
        "ports": [{"name": "kvcheck-http", "containerPort": 30000}, {"containerPort": 8000, "name": "http"}],
        "resources": {"limits": {"nvidia.com/gpu": 8, "memory": "1500Gi"}},
        "volumeMounts": PRODUCTION_POD["spec"]["containers"][1]["volumeMounts"],
    }
    for version in K8S_VERSIONS:
        assert validation_errors(rendered.objects[0], version) == []


def test_launcher_keys_that_are_set_apply_over_the_pod_template():
    target = _target(args={"tp_size": 8}, gpus=(), env={"NCCL_IB_HCA": "mlx5_0"})
    rendered = render_role(target, SETTINGS, run_id="0a1b2c3d", timeout_s=60, templates=PodTemplates(PRODUCTION_POD))
    spec = rendered.objects[0]["spec"]["template"]["spec"]
    engine = spec["containers"][1]
    assert engine["image"] == "lmsysorg/sglang:v0.5.23"
    assert engine["env"] == [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
        {"name": "NCCL_IB_HCA", "value": "mlx5_0"},
    ]
    assert spec["serviceAccountName"] == "kvcheck"
    assert spec["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "p5e.48xlarge", "nvidia.com/gpu.product": "NVIDIA-H200"}
    assert [t["key"] for t in spec["tolerations"]] == ["dedicated", "nvidia.com/gpu"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert (spec["priorityClassName"], spec["hostIPC"]) == ("gpu-batch", True)


def test_leader_and_worker_templates_of_a_leaderworkerset_file_stay_apart():
    worker = copy.deepcopy(PRODUCTION_POD)
    worker["spec"]["containers"][1]["image"] = "registry.example.com/sglang:worker"
    target = _target(args={"tp_size": 16, "nnodes": 2}, gpus=())
    rendered = render_role(target, KubernetesSettings(), run_id="0a1b2c3d", timeout_s=60,
                           templates=PodTemplates(PRODUCTION_POD, worker=worker, container="sglang"))
    group = rendered.objects[1]["spec"]["leaderWorkerTemplate"]
    assert group["leaderTemplate"]["spec"]["containers"][1]["image"] == "registry.example.com/sglang:v0.5.23-cu129"
    assert group["workerTemplate"]["spec"]["containers"][1]["image"] == "registry.example.com/sglang:worker"
    assert rendered.gpus_per_node == 8
    for obj in rendered.objects:
        assert validation_errors(obj) == []


@pytest.mark.parametrize(
    ("args", "gpus", "settings", "expected"),
    [
        ({"tp_size": 4}, (0, 1), KubernetesSettings(image="i"), 2),  # the manifest's GPU list
        ({"tp_size": 4, "pp_size": 2}, (), KubernetesSettings(image="i"), 8),
        ({"tp_size": 2, "dp_size": 4}, (), KubernetesSettings(image="i"), 8),  # DP replicas
        ({"tp_size": 8, "dp_size": 8, "enable_dp_attention": True}, (), KubernetesSettings(image="i"), 8),
        ({"tp_size": 32, "nnodes": 4}, (), KubernetesSettings(image="i"), 8),
        ({"tp_size": 8}, (), KubernetesSettings(image="i", gpus_per_node=4), 4),
    ],
)
def test_gpus_per_pod(args, gpus, settings, expected):
    rendered = render_role(_target(args=args, gpus=gpus), settings, run_id="0a1b2c3d", timeout_s=60)
    assert rendered.gpus_per_node == expected


def test_no_image_anywhere_is_an_input_error():
    with pytest.raises(InputError) as err:
        render_role(_target(), KubernetesSettings(), run_id="0a1b2c3d", timeout_s=60)
    assert err.value.message == "role prefill: the Kubernetes launcher needs the engine's image"
    assert err.value.exit_code == 2


def test_a_named_container_that_is_not_there_is_an_input_error():
    with pytest.raises(InputError) as err:
        render_role(_target(), KubernetesSettings(), run_id="0a1b2c3d", timeout_s=60,
                    templates=PodTemplates(PRODUCTION_POD, container="engine", source="deploy/p.yaml"))
    assert err.value.message == (
        "deploy/p.yaml: the pod template has no container 'engine' (it has: metrics-sidecar, sglang)")


def test_roles_whose_names_collide_in_kubernetes_are_an_input_error():
    with pytest.raises(InputError) as err:
        render_run([_target(name="Prefill"), _target(name="prefill")], KubernetesSettings(image="i"),
                   run_id="0a1b2c3d", timeout_s=60)
    assert err.value.message == (
        "roles 'Prefill' and 'prefill' would both be named kvcheck-0a1b2c3d-prefill in Kubernetes")


def test_long_and_odd_role_names_give_valid_object_names():
    rendered = render_role(_target(name="Decode_Pool #2 for the very long tenant"), KubernetesSettings(image="i"),
                           run_id="0a1b2c3d", timeout_s=60)
    assert rendered.name == "kvcheck-0a1b2c3d-decode-pool-2-for-th"
    assert rendered.objects[0]["metadata"]["annotations"] == {
        "kvcheck.io/role-name": "Decode_Pool #2 for the very long tenant"}
    assert validation_errors(rendered.objects[0]) == []


def test_the_schemas_catch_what_the_cluster_would_refuse_or_prune():
    (job,) = render_role(_target(), KubernetesSettings(image="i"), run_id="0a1b2c3d", timeout_s=60).objects
    job["spec"]["activeDeadlineSecond"] = 5
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = ["1"]
    errors = validation_errors(job)
    assert len(errors) == 2
    assert "spec: Additional properties are not allowed ('activeDeadlineSecond' was unexpected)" in errors
    lws = render_role(_target(args={"nnodes": 2}), KubernetesSettings(image="i"), run_id="0a1b2c3d",
                      timeout_s=60).objects[1]
    lws["spec"]["leaderWorkerTemplate"]["sizee"] = 2  # a CRD field the API server would silently drop
    lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Never"
    errors = validation_errors(lws)
    assert errors == [
        "spec/leaderWorkerTemplate/restartPolicy: 'Never' is not one of "
        "['Default', 'RecreateGroupOnPodRestart', 'RecreateGroupAfterStart', 'None']",
        "spec/leaderWorkerTemplate: Additional properties are not allowed ('sizee' was unexpected)",
    ]


def test_yaml_is_one_document_per_object_in_creation_order():
    rendered = render_role(_target(args={"nnodes": 2}), KubernetesSettings(image="i"), run_id="0a1b2c3d",
                           timeout_s=60)
    text = to_yaml(rendered.objects)
    assert text.startswith("apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: kvcheck-0a1b2c3d-prefill-deadline\n")
    assert text.count("\n---\n") == 1
    assert "\n---\napiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\n" in text


def test_dry_run_text_is_every_roles_objects_with_secrets_redacted():
    import yaml

    from kvcheck.backends.measure.launchers.kubernetes.dryrun import dry_run_text

    prefill = _target(args={"tp_size": 16, "nnodes": 2, "api_key": "sk-live-123456"}, gpus=(),
                      env={"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz", "NCCL_DEBUG": "WARN"})
    decode = _target(name="decode", args={"tp_size": 8}, gpus=())
    text = dry_run_text([prefill, decode], SETTINGS, timeout_s=1800, run_id="0a1b2c3d")
    assert text.startswith(
        "# kvcheck verify --launcher kubernetes --dry-run: nothing was created.\n"
        "# namespace ml-gate, run id 0a1b2c3d; roles: prefill (LeaderWorkerSet, 2 x 8 nvidia.com/gpu), "
        "decode (Job, 1 x 8 nvidia.com/gpu)\n"
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: kvcheck-0a1b2c3d-prefill-deadline\n")
    docs = list(yaml.safe_load_all(text))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Job", "kvcheck-0a1b2c3d-prefill-deadline"),
        ("LeaderWorkerSet", "kvcheck-0a1b2c3d-prefill"),
        ("Job", "kvcheck-0a1b2c3d-decode"),
    ]
    assert "sk-live-123456" not in text and "hf_abcdefghijklmnopqrstuvwxyz" not in text
    leader = docs[1]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert leader["env"] == [{"name": "HF_TOKEN", "value": "REDACTED"}, {"name": "NCCL_DEBUG", "value": "WARN"}]
    assert leader["command"][leader["command"].index("--api-key") + 1] == "REDACTED"
    for doc in docs:
        assert validation_errors(doc) == []
