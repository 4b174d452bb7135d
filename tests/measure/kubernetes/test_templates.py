"""Pod templates taken from the deployment file a role was read from (its container's file:line:column)."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from kvcheck.backends.measure.launchers.kubernetes.render import render_role
from kvcheck.backends.measure.launchers.kubernetes.settings import KubernetesSettings
from kvcheck.backends.measure.launchers.kubernetes.templates import pod_templates, template_at
from kvcheck.model import Location
from tests.measure.conftest import make_target
from tests.measure.kubernetes.schemas import validation_errors

LWS = """\
apiVersion: v1
kind: Service
metadata: {name: sglang-leader}
spec: {selector: {role: leader}, ports: [{port: 40000}]}
---
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: sglang
spec:
  replicas: 2
  leaderWorkerTemplate:
    size: 2
    leaderTemplate:
      metadata:
        labels: {role: leader}
      spec:
        nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
        containers:
          - name: sglang-leader
            image: lmsysorg/sglang:v0.5.23
            command: [python3, -m, sglang.launch_server, --model-path, /models/llama, --tp, "16",
                      --dist-init-addr, "$(LWS_LEADER_ADDRESS):20000", --nnodes, "$(LWS_GROUP_SIZE)",
                      --node-rank, "$(LWS_WORKER_INDEX)", --host, 0.0.0.0, --port, "40000"]
            resources: {limits: {nvidia.com/gpu: "8"}}
            readinessProbe: {tcpSocket: {port: 40000}}
            volumeMounts: [{mountPath: /models, name: weights}]
        volumes: [{name: weights, hostPath: {path: /mnt/models}}]
    workerTemplate:
      spec:
        containers:
          - name: sglang-worker
            image: lmsysorg/sglang:v0.5.23
            command: [python3, -m, sglang.launch_server, --model-path, /models/llama, --tp, "16"]
            resources: {limits: {nvidia.com/gpu: "8"}}
            volumeMounts: [{mountPath: /models, name: weights}]
        volumes: [{name: weights, hostPath: {path: /mnt/models}}]
"""

DYNAMO = """\
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
spec:
  services:
    decode:
      extraPodSpec:
        mainContainer:
          image: nvcr.io/dynamo:0.5
          args: [--tp, "8"]
"""


def _target(path: Path, line: int, column: int, **kw):
    target = make_target(model_path="/models/llama", **kw)
    return dataclasses.replace(target, location=Location(str(path), line, column),
                               engine_command=("python3", "-m", "sglang.launch_server"))


def test_a_leaderworkerset_files_leader_and_worker_templates_are_used(tmp_path):
    path = tmp_path / "lws.yaml"
    path.write_text(LWS)
    found = template_at(str(path), 20, 13)
    assert found is not None
    assert (found.container, found.worker_container, found.source) == ("sglang-leader", "sglang-worker", f"{path}:20")
    assert found.leader["metadata"] == {"labels": {"role": "leader"}}
    target = _target(path, 20, 13, args={"tp_size": 16, "nnodes": 2}, gpus=())
    assert pod_templates([target]) == {"prefill": found}
    rendered = render_role(target, KubernetesSettings(namespace="ml-gate"), run_id="0a1b2c3d", timeout_s=600,
                           templates=found)
    group = rendered.objects[1]["spec"]["leaderWorkerTemplate"]
    leader, worker = group["leaderTemplate"], group["workerTemplate"]
    assert "role" not in leader["metadata"]["labels"]  # production's Service selects role=leader
    assert leader["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert leader["spec"]["volumes"] == [{"name": "weights", "hostPath": {"path": "/mnt/models"}}]
    (engine,) = leader["spec"]["containers"]
    assert "readinessProbe" not in engine and engine["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
    assert engine["command"][-6:] == [
        "--port", "30000", "--dist-init-addr", "$(LWS_LEADER_ADDRESS):20000", "--node-rank", "$(LWS_WORKER_INDEX)"]
    assert worker["spec"]["containers"][0]["name"] == "sglang-worker"
    assert worker["spec"]["containers"][0]["command"] == engine["command"]
    for obj in rendered.objects:
        assert validation_errors(obj) == []


def test_a_container_outside_a_standard_pod_template_gives_none(tmp_path):
    path = tmp_path / "dynamo.yaml"
    path.write_text(DYNAMO)
    assert template_at(str(path), 8, 11) is None
    assert pod_templates([_target(path, 8, 11)]) == {}


def test_a_kvcheck_manifest_or_a_missing_file_gives_none(tmp_path):
    manifest = tmp_path / "m.yaml"
    manifest.write_text("context_length: 1000\nroles:\n  prefill:\n    gpus: [0]\n")
    assert pod_templates([_target(manifest, 4, 5), _target(tmp_path / "gone.yaml", 1, 1)]) == {}


def test_the_file_is_read_again_under_the_input_bounds(tmp_path):
    # The roles were loaded from the file before; the launcher reads it again for the pod template, and
    # a file swapped for a bomb or a FIFO in between must not cost memory or block (issue 14).
    from tests.security.test_files import alias_bomb

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb())
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert template_at(str(bomb), 1, 1) is None
    assert template_at(str(fifo), 1, 1) is None
    assert time.monotonic() - started < 5  # the unbounded loader took 24-50 s and gigabytes on the bomb
