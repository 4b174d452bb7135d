"""A small Kubernetes API server on loopback, for the Kubernetes launcher's tests.

It speaks the REST paths the `kubernetes` client library calls (create, list, delete Jobs and
LeaderWorkerSets; list pods; pod logs with follow; the pod proxy; delete pods), checks the bearer
token of the kubeconfig it writes, refuses objects that fail the vendored schemas (as
fieldValidation=Strict does), and plays the controllers and the kubelet:

  * the Job controller makes one pod per Job; the LeaderWorkerSet controller makes `size` pods
    (`NAME-0` the leader, `NAME-0-1`... workers) with LWS_LEADER_ADDRESS, LWS_WORKER_INDEX and
    LWS_GROUP_SIZE set, and only after the owner Job named in its ownerReferences exists (by uid);
  * the scheduler places a pod on one of `nodes` nodes with enough free `nvidia.com/gpu`, else marks
    it Unschedulable with a message in the scheduler's words;
  * the kubelet runs the engine container as a local process (the engine double), each pod on its
    own loopback address (127.0.0.N, standing in for the pod IP), `$(VAR)` references expanded from
    the container's env as the kubelet does, output kept as the pod's log;
  * deleting an object deletes what it owns (pods, a LeaderWorkerSet owned by a Job) half a second
    later, as the garbage collector does after a Background deletion; a deleted pod's process gets
    SIGTERM, then SIGKILL after the grace period, and the pod is listed until the process is gone.

Knobs: `quota_gpus` (a ResourceQuota on GPUs) and `deny_pods` (an admission webhook) make the
controllers fail to create pods, as a FailedCreate Event in their words; an image containing `no-such-image` cannot be pulled; a container env FAKE_KUBELET_OOMKILL_AFTER_S
makes the kubelet kill it as the kernel's OOM killer would (OOMKilled, exit 137) after that time.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.measure.kubernetes.schemas import validation_errors

REPO = Path(__file__).resolve().parents[3]
TOKEN = "kvcheck-test-token"
GPU = "nvidia.com/gpu"
LWS_PATH = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets"
GC_DELAY_S = 0.5  # from an owner's deletion to the garbage collector's deletion of what it owned
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class FakePod:
    obj: dict[str, Any]
    gpus: int
    env: dict[str, str]
    command: list[str]
    restart_always: bool
    engine: bool  # False: the deadline Job's pause container (no process)
    process: subprocess.Popen | None = None
    log: list[bytes] = field(default_factory=list)
    stamps: list[str] = field(default_factory=list)  # the kubelet's RFC3339Nano time of each log line
    streams: int = 0  # log streams opened so far
    log_done: threading.Event = field(default_factory=threading.Event)
    node: str | None = None
    ip: str | None = None
    deleting: bool = False
    oom_killed: bool = False
    gone: threading.Event = field(default_factory=threading.Event)

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]

    @property
    def container(self) -> dict[str, Any]:
        return self.obj["spec"]["containers"][0] if not self.engine else _engine_container(self.obj["spec"])


def _engine_container(spec: dict[str, Any]) -> dict[str, Any]:
    for container in spec["containers"]:
        if GPU in ((container.get("resources") or {}).get("limits") or {}):
            return container
    return spec["containers"][0]


def _field(event: dict[str, Any], path: str) -> Any:
    """An Event's field by a field selector's dotted path (involvedObject.name, reason)."""
    value: Any = event
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (selector or "").split(",")):
        if "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


class FakeCluster:
    """The API server, its controllers and a kubelet; `kubeconfig` points the client at it."""

    def __init__(self, workdir: Path, *, nodes: int = 2, gpus_per_node: int = 8) -> None:
        self.nodes = {f"gpu-node-{i}": gpus_per_node for i in range(nodes)}
        self.lock = threading.RLock()
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, ns, name) -> object
        self.pods: dict[tuple[str, str], FakePod] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path) in arrival order
        self.refuse: dict[tuple[str, str], tuple[int, str, str]] = {}  # (method, path prefix) -> (status, reason, msg)
        self.expired: list[str] = []  # Jobs whose activeDeadlineSeconds passed
        self.quota_gpus: int | None = None  # a ResourceQuota on requests.nvidia.com/gpu in every namespace
        self.deny_pods: str | None = None  # an admission webhook that denies every pod, with this message
        self.events: list[dict[str, Any]] = []  # core/v1 Events the controllers recorded
        self.finished_logs: dict[str, list[str]] = {}  # a deleted pod's whole output, by pod name
        self.break_streams = 0  # the first N log streams of each pod break (connection reset) ...
        self.break_after_lines = 5  # ... after this many lines
        self._next_ip = 8
        self.workdir = workdir
        cluster = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return None

            def _handle(self, method: str) -> None:
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self._status(401, "Unauthorized", "Unauthorized")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                cluster.dispatch(self, method, body)

            def do_GET(self) -> None:  # noqa: N802
                self._handle("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._handle("POST")

            def do_DELETE(self) -> None:  # noqa: N802
                self._handle("DELETE")

            def _json(self, status: int, data: Any) -> None:
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _status(self, code: int, reason: str, message: str) -> None:
                self._json(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                                  "reason": reason, "code": code})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, client_address: None  # clients that hang up at stop()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.kubeconfig = workdir / "kubeconfig"
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: fake, cluster: {{server: '{self.url}'}}}}]\n"
            f"users: [{{name: kvcheck, user: {{token: {TOKEN}}}}}]\n"
            "contexts: [{name: fake, context: {cluster: fake, user: kvcheck}}]\n"
            "current-context: fake\n"
        )

    # -- the REST surface ---------------------------------------------------------------------------

    def dispatch(self, h: Any, method: str, body: dict[str, Any]) -> None:
        parts = urlsplit(h.path)
        path = unquote(parts.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        with self.lock:
            self.requests.append((method, path))
        for (m, prefix), (code, reason, message) in self.refuse.items():
            if m == method and path.startswith(prefix):
                h._status(code, reason, message)
                return
        if path in ("/version", "/version/") and method == "GET":
            h._json(200, {"major": "1", "minor": "30", "gitVersion": "v1.30.0-fake"})
            return
        m = re.fullmatch(r"/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?", path)
        if m:
            self._objects(h, method, "Job", m.group(1), m.group(2), query, body)
            return
        m = re.fullmatch(r"/apis/leaderworkerset\.x-k8s\.io/v1/namespaces/([^/]+)/leaderworkersets(?:/([^/]+))?", path)
        if m:
            self._objects(h, method, "LeaderWorkerSet", m.group(1), m.group(2), query, body)
            return
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/(events|pods)", path)
        if m and method == "GET":
            h._json(200, self._events(m.group(1), query) if m.group(2) == "events" else self._pod_list(m.group(1), query))
            return
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/:]+)(?::(\d+))?(/log|/proxy/.*)?", path)
        if m:
            ns, name, port, rest = m.groups()
            with self.lock:
                pod = self.pods.get((ns, name))
            if pod is None:
                h._status(404, "NotFound", f'pods "{name}" not found')
            elif method == "DELETE":
                self.delete_pod(pod, grace_s=float(query.get("gracePeriodSeconds", 30)))
                h._json(200, self.pod_json(pod))
            elif rest == "/log":
                self._log(h, pod, query)
            elif rest and rest.startswith("/proxy/"):
                self._proxy(h, pod, int(port or 80), rest[len("/proxy"):], parts.query)
            else:
                h._json(200, self.pod_json(pod))
            return
        h._status(404, "NotFound", "the server could not find the requested resource")

    def _pod_list(self, ns: str, query: dict) -> dict[str, Any]:
        with self.lock:
            items = [self.pod_json(p) for (n, _), p in self.pods.items()
                     if n == ns and _matches(p.obj["metadata"]["labels"], query.get("labelSelector", ""))]
        return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}

    def _events(self, ns: str, query: dict) -> dict[str, Any]:
        """An EventList, filtered by a fieldSelector of `path=value` terms (all must hold) and `limit`."""
        fields = dict(term.split("=", 1) for term in filter(None, query.get("fieldSelector", "").split(",")))
        with self.lock:
            items = [e for e in self.events if e["metadata"]["namespace"] == ns
                     and all(_field(e, key) == value for key, value in fields.items())]
        limit = int(query.get("limit") or 0)
        return {"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": items[:limit] if limit else items}

    def _objects(self, h: Any, method: str, kind: str, ns: str, name: str | None, query: dict, body: dict) -> None:
        if method == "POST":
            errors = validation_errors(body)
            if errors:
                h._status(422, "Invalid", f"{kind}.{body.get('apiVersion')} is invalid: {'; '.join(errors)}")
                return
            key = (kind, ns, body["metadata"]["name"])
            with self.lock:
                if key in self.objects:
                    h._status(409, "AlreadyExists", f'{kind} "{key[2]}" already exists')
                    return
                for ref in body["metadata"].get("ownerReferences") or []:
                    owner = self.objects.get((ref["kind"], ns, ref["name"]))
                    if owner is None or owner["metadata"]["uid"] != ref["uid"]:
                        h._status(422, "Invalid", f"ownerReference to {ref['kind']} {ref['name']} uid {ref['uid']} "
                                  "does not name an existing object")
                        return
                obj = json.loads(json.dumps(body))
                obj["metadata"].update(uid=secrets.token_hex(16), creationTimestamp=_now())
                self.objects[key] = obj
            self.reconcile(kind, ns, obj)
            h._json(201, obj)
        elif method == "GET" and name is None:
            with self.lock:
                items = [o for (k, n, _), o in self.objects.items()
                         if k == kind and n == ns and _matches(o["metadata"].get("labels") or {},
                                                               query.get("labelSelector", ""))]
            h._json(200, {"kind": f"{kind}List", "items": items, "metadata": {}})
        elif method == "DELETE" and name is not None:
            with self.lock:
                obj = self.objects.get((kind, ns, name))
            if obj is None:
                h._status(404, "NotFound", f'{kind.lower()}s "{name}" not found')
                return
            self.delete_object(kind, ns, name)
            h._json(200, {"kind": "Status", "status": "Success"})
        else:
            h._status(405, "MethodNotAllowed", "method not allowed")

    def _log(self, h: Any, pod: FakePod, query: dict) -> None:
        """The pod's output; with follow=true it streams until the process has exited (chunked)."""
        follow = query.get("follow") == "true"
        stamps = query.get("timestamps") == "true"
        with self.lock:
            pod.streams += 1
            breaks = pod.streams <= self.break_streams
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        sent = 0
        try:
            while True:
                with self.lock:
                    upto = min(len(pod.log), self.break_after_lines) if breaks else len(pod.log)
                    chunk = b"".join(
                        (pod.stamps[i].encode() + b" " if stamps else b"") + pod.log[i] for i in range(sent, upto)
                    )
                    sent = upto
                    done = pod.log_done.is_set()
                if breaks and sent == self.break_after_lines:
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunk else b"")
                    h.wfile.flush()
                    h.close_connection = True
                    h.connection.shutdown(socket.SHUT_RDWR)  # a connection reset mid-stream
                    return
                if chunk:
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    h.wfile.flush()
                if not follow or (done and sent == len(pod.log)):
                    break
                time.sleep(0.02)
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _proxy(self, h: Any, pod: FakePod, port: int, path: str, query: str) -> None:
        if pod.ip is None:
            h._status(503, "ServiceUnavailable", f"pod {pod.name} has no IP yet")
            return
        url = f"http://{pod.ip}:{port}{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                status, data = answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            status, data = exc.code, exc.read()
        except OSError as exc:
            h._status(503, "ServiceUnavailable", f"error trying to reach service: dial tcp {pod.ip}:{port}: {exc}")
            return
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    # -- controllers, scheduler, kubelet ------------------------------------------------------------

    def reconcile(self, kind: str, ns: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        owner = {"apiVersion": obj["apiVersion"], "kind": kind, "name": name, "uid": obj["metadata"]["uid"]}
        if kind == "Job":
            self._job_timers(ns, obj)
            template = obj["spec"]["template"]
            self.add_pod(ns, f"{name}-{secrets.token_hex(3)[:5]}", template, owner,
                         {"batch.kubernetes.io/job-name": name}, {}, restart_always=False)
            return
        # the LWS controller's leader StatefulSet (NAME) makes the leader; the group's worker
        # StatefulSet (NAME-0) makes the workers: they are who report a pod they may not create
        group = obj["spec"]["leaderWorkerTemplate"]
        size = int(group["size"])
        leader_ip = self.alloc_ip()
        for index in range(size):
            template = group["leaderTemplate"] if index == 0 else group["workerTemplate"]
            pod_name = f"{name}-0" if index == 0 else f"{name}-0-{index}"
            lws_env = {"LWS_LEADER_ADDRESS": leader_ip, "LWS_WORKER_INDEX": str(index), "LWS_GROUP_SIZE": str(size)}
            labels = {"leaderworkerset.sigs.k8s.io/name": name, "leaderworkerset.sigs.k8s.io/worker-index": str(index)}
            self.add_pod(ns, pod_name, template, owner, labels, lws_env, restart_always=True,
                         ip=leader_ip if index == 0 else None,
                         creator=("StatefulSet", name if index == 0 else f"{name}-0"))

    def _job_timers(self, ns: str, job: dict[str, Any]) -> None:
        """The Job controller's deadline and the TTL controller: at activeDeadlineSeconds the Job fails
        (DeadlineExceeded) and its pods are deleted; ttlSecondsAfterFinished later the Job is deleted,
        and with it what it owns."""
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        deadline = job["spec"].get("activeDeadlineSeconds")
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        if deadline is None:
            return

        def expire() -> None:
            with self.lock:
                current = self.objects.get(("Job", ns, name))
                if current is None or current["metadata"]["uid"] != uid:
                    return
                current["status"] = {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}
                pods = [p for p in self.pods.values() if any(r["uid"] == uid for r in p.obj["metadata"]["ownerReferences"])]
                self.expired.append(name)
            for pod in pods:
                self.delete_pod(pod, grace_s=0.5)
            if ttl is not None:
                timer = threading.Timer(float(ttl), lambda: self._expire_ttl(ns, name, uid))
                timer.daemon = True
                timer.start()

        timer = threading.Timer(float(deadline), expire)
        timer.daemon = True
        timer.start()

    def _expire_ttl(self, ns: str, name: str, uid: str) -> None:
        with self.lock:
            current = self.objects.get(("Job", ns, name))
            if current is None or current["metadata"]["uid"] != uid:
                return
        self.delete_object("Job", ns, name)

    def alloc_ip(self) -> str:
        """A loopback address of its own for each pod (127.0.0.0/8 all reaches this host)."""
        with self.lock:
            self._next_ip += 1
            return f"127.0.{self._next_ip // 250}.{self._next_ip % 250 + 2}"

    def add_pod(self, ns: str, name: str, template: dict, owner: dict, labels: dict, extra_env: dict,
                *, restart_always: bool, ip: str | None = None, creator: tuple[str, str] | None = None) -> None:
        spec = json.loads(json.dumps(template["spec"]))
        container = _engine_container(spec)
        gpus = int(((container.get("resources") or {}).get("limits") or {}).get(GPU, 0))
        refusal = self._admission(ns, name, gpus)
        if refusal is not None:
            kind, about = creator or (owner["kind"], owner["name"])
            self._failed_create(ns, kind, about, name, refusal)
            return
        env = dict(extra_env)
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), item["value"])
        command = [_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), a) for a in container.get("command") or []]
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": secrets.token_hex(16),
                         "labels": {**(template.get("metadata") or {}).get("labels", {}), **labels},
                         "ownerReferences": [owner], "creationTimestamp": _now()},
            "spec": spec,
        }
        pod = FakePod(obj, gpus, env, command, restart_always, engine=bool(gpus) or "pause" not in container["image"])
        pod.ip = ip or self.alloc_ip()
        with self.lock:
            self.pods[(ns, name)] = pod
            self.schedule(pod)

    def _admission(self, ns: str, pod: str, gpus: int) -> str | None:
        """Why the API server refuses to create this pod (an admission webhook, the quota), or None."""
        if self.deny_pods is not None:
            return f'admission webhook "gpu-policy.example.com" denied the request: {self.deny_pods}'
        if self.quota_gpus is None or not gpus:
            return None
        with self.lock:
            used = sum(p.gpus for (n, _), p in self.pods.items() if n == ns and not p.gone.is_set())
        if used + gpus <= self.quota_gpus:
            return None
        return (f'pods "{pod}" is forbidden: exceeded quota: gpu-quota, requested: requests.{GPU}={gpus}, '
                f"used: requests.{GPU}={used}, limited: requests.{GPU}={self.quota_gpus}")

    def _failed_create(self, ns: str, kind: str, about: str, pod: str, refusal: str) -> None:
        """The controller's Warning Event, in its own words (the Job and StatefulSet controllers')."""
        if kind == "Job":
            message, component = f"Error creating: {refusal}", "job-controller"
        else:
            message, component = f"create Pod {pod} in {kind} {about} failed error: {refusal}", "statefulset-controller"
        with self.lock:
            self.events.append({
                "kind": "Event", "apiVersion": "v1",
                "metadata": {"name": f"{about}.{secrets.token_hex(8)}", "namespace": ns},
                "involvedObject": {"kind": kind, "namespace": ns, "name": about},
                "reason": "FailedCreate", "message": message, "type": "Warning", "count": 1,
                "firstTimestamp": _now(), "lastTimestamp": _now(), "source": {"component": component},
            })

    def schedule(self, pod: FakePod) -> None:
        used = {node: 0 for node in self.nodes}
        for other in self.pods.values():
            if other.node is not None and not other.gone.is_set():
                used[other.node] += other.gpus
        free = [n for n, total in self.nodes.items() if total - used[n] >= pod.gpus]
        if not free:
            return  # stays Pending and Unschedulable (pod_json says why)
        pod.node = free[0]
        image = pod.container["image"]
        if "no-such-image" in image or not pod.engine:
            return
        command = list(pod.command)
        if "--host" in command:  # the pod's own address stands in for its network namespace
            command[len(command) - 1 - command[::-1].index("--host") + 1] = pod.ip
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), **pod.env}
        pod.process = subprocess.Popen(command, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        threading.Thread(target=self._pump, args=(pod,), daemon=True).start()
        oom_after = pod.env.get("FAKE_KUBELET_OOMKILL_AFTER_S")
        if oom_after:
            threading.Timer(float(oom_after), self._oom_kill, args=(pod,)).start()

    def _oom_kill(self, pod: FakePod) -> None:
        if pod.process is not None and pod.process.poll() is None:
            pod.oom_killed = True
            os.killpg(pod.process.pid, signal.SIGKILL)

    def _pump(self, pod: FakePod) -> None:
        assert pod.process is not None and pod.process.stdout is not None
        for raw in pod.process.stdout:
            now = time.time_ns()
            fraction = f"{now % 1_000_000_000:09d}".rstrip("0")
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now // 1_000_000_000))
            with self.lock:
                pod.log.append(raw)
                pod.stamps.append(f"{stamp}.{fraction}Z" if fraction else f"{stamp}Z")
        pod.process.wait()
        pod.log_done.set()

    def pod_json(self, pod: FakePod) -> dict[str, Any]:
        obj = json.loads(json.dumps(pod.obj))
        container = pod.container
        status: dict[str, Any] = {"phase": "Pending", "conditions": []}
        if pod.deleting:
            obj["metadata"]["deletionTimestamp"] = _now()
        if pod.node is None:
            busy = len(self.nodes)
            status["conditions"].append({
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": f"0/{busy} nodes are available: {busy} Insufficient {GPU}. preemption: 0/{busy} nodes are "
                           f"available: {busy} No preemption victims found for incoming pod.",
            })
            obj["status"] = status
            return obj
        obj["spec"]["nodeName"] = pod.node
        status["conditions"].append({"type": "PodScheduled", "status": "True"})
        cstatus: dict[str, Any] = {"name": container["name"], "image": container["image"], "restartCount": 0}
        if "no-such-image" in container["image"]:
            cstatus["state"] = {"waiting": {
                "reason": "ErrImagePull",
                "message": f'rpc error: code = NotFound desc = failed to pull and unpack image "{container["image"]}": '
                           "not found"}}
        elif not pod.engine or pod.process is None or pod.process.poll() is None:
            status["phase"] = "Running"
            cstatus["state"] = {"running": {"startedAt": _now()}}
        else:
            code = pod.process.returncode
            exit_code = 137 if pod.oom_killed else (128 - code if code < 0 else code)
            reason = "OOMKilled" if pod.oom_killed else ("Completed" if exit_code == 0 else "Error")
            terminated = {"exitCode": exit_code, "reason": reason, "finishedAt": _now()}
            if pod.restart_always and not pod.deleting:
                cstatus.update(restartCount=1, lastState={"terminated": terminated},
                               state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting"}})
                status["phase"] = "Running"
            else:
                cstatus["state"] = {"terminated": terminated}
                status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
        status["podIP"] = pod.ip
        status["containerStatuses"] = [cstatus]
        obj["status"] = status
        return obj

    def delete_object(self, kind: str, ns: str, name: str) -> None:
        with self.lock:
            obj = self.objects.pop((kind, ns, name), None)
            if obj is None:
                return
            uid = obj["metadata"]["uid"]
            owned_objects = [(k, n, o["metadata"]["name"]) for (k, n, _), o in self.objects.items()
                             if any(r["uid"] == uid for r in o["metadata"].get("ownerReferences") or [])]
            owned_pods = [p for p in self.pods.values()
                          if any(r["uid"] == uid for r in p.obj["metadata"]["ownerReferences"])]
        if not owned_objects and not owned_pods:
            return

        def collect() -> None:
            for key in owned_objects:
                self.delete_object(*key)
            for pod in owned_pods:
                self.delete_pod(pod, grace_s=30.0)

        # propagationPolicy Background: the owner is gone at once and the garbage collector deletes
        # what it owned a moment later, so the pods are still listed when the deleter looks
        timer = threading.Timer(GC_DELAY_S, collect)
        timer.daemon = True
        timer.start()

    def delete_pod(self, pod: FakePod, *, grace_s: float) -> None:
        with self.lock:
            if pod.deleting:
                return
            pod.deleting = True

        def terminate() -> None:
            process = pod.process
            if process is not None and process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                    process.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                except ProcessLookupError:
                    pass
            if process is not None:
                pod.log_done.wait(5.0)
            with self.lock:
                self.pods.pop((pod.obj["metadata"]["namespace"], pod.name), None)
                self.finished_logs[pod.name] = [raw.decode("utf-8", "replace").rstrip("\n") for raw in pod.log]
                pod.gone.set()
                for other in self.pods.values():  # the freed GPUs let a pending pod be placed
                    if other.node is None:
                        self.schedule(other)

        threading.Thread(target=terminate, daemon=True).start()

    # -- for the tests ------------------------------------------------------------------------------

    def add_object(self, obj: dict[str, Any]) -> None:
        """An object another run left behind (for cleanup tests), created as the API would."""
        obj = json.loads(json.dumps(obj))
        obj["metadata"].setdefault("uid", secrets.token_hex(16))
        obj["metadata"].setdefault("creationTimestamp", _now())
        ns = obj["metadata"]["namespace"]
        with self.lock:
            self.objects[(obj["kind"], ns, obj["metadata"]["name"])] = obj
        self.reconcile(obj["kind"], ns, obj)

    def wait_idle(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if not self.pods:
                    return
            time.sleep(0.05)

    def close(self) -> None:
        with self.lock:
            pods = list(self.pods.values())
        for pod in pods:
            if pod.process is not None and pod.process.poll() is None:
                try:
                    os.killpg(pod.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                pod.process.wait()
        self.server.shutdown()
        self.server.server_close()
