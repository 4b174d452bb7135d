"""The Kubernetes launcher: create a role's objects, watch its pods, stream their logs, delete it all.

Each role is rendered (`render.py`) and created through the API server. A watcher thread lists the
role's pods (by the run's labels) every `poll_s` and
  * starts following each pod's engine log as soon as its container runs, feeding every line to the
    measurement's log reader as it arrives (the same reader the local launcher feeds);
  * ends the role, fail closed, on what Kubernetes itself reports: a pod the scheduler cannot place
    (its reason, at once unless `unschedulable_wait_s`), pods their controller may not create (a
    quota or an admission webhook: the FailedCreate Event, likewise), an image that cannot be pulled, a container
    that cannot be created, a container that terminated or restarted (its exit code; OOMKilled
    named), a pod that failed (deadline, eviction) or vanished.
`/server_info` is read through the API server's pod proxy (`relay.py`). `stop()` deletes the objects
(their pods go with them), waits for the pods to be gone, and says what it could not delete.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kvcheck.backends.measure.launchers.base import (
    CleanupReport,
    Launcher,
    LaunchError,
    LaunchRequest,
    RunningEngine,
)
from kvcheck.backends.measure.launchers.kubernetes.api import KubeApi, KubeError, lines, split_timestamp
from kvcheck.backends.measure.launchers.kubernetes.cleanup import clean_up, delete_role
from kvcheck.backends.measure.launchers.kubernetes.relay import PodRelay
from kvcheck.backends.measure.launchers.kubernetes.render import (
    RUN_LABEL,
    RenderedRole,
    new_run_id,
    render_role,
    render_run,
    role_slug,
)
from kvcheck.backends.measure.launchers.kubernetes.settings import (
    KubernetesSettings,
    PodTemplates,
    settings_from,
)
from kvcheck.backends.measure.launchers.kubernetes.templates import pod_templates
from kvcheck.backends.measure.launchers.process import MAX_LINE_BYTES, open_log
from kvcheck.model import RoleTarget

LEADER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
PULL_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
CREATE_ERRORS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
API_LOSS_S = 30.0  # the API server may fail to answer this long before the role is given up
RESUME_S = 1.0  # pause before a broken log stream is opened again
FAILED_BY_LAUNCHER = 1  # poll()'s status when Kubernetes, not the engine, ended the role
MAX_EVENT_CHARS = 2000  # of an Event's message quoted in the report
RBAC_HINT = 'kvcheck needs the Role in docs/measure.md ("Kubernetes") in the namespace'


class _LogPosition:
    """How far a pod's log was taken, so that a reopened stream (read from the start) skips what was."""

    def __init__(self) -> None:
        self.last: tuple[str, int] | None = None  # (timestamp key, lines taken with that key)
        self._skip: tuple[str, int] | None = None

    def reopened(self) -> None:
        self._skip = self.last

    def is_new(self, key: str | None) -> bool:
        """Whether a line with this timestamp key is past the last one taken; counts it as taken."""
        if key is not None and self._skip is not None:
            if key < self._skip[0]:
                return False
            if key == self._skip[0] and self._skip[1] > 0:
                self._skip = (self._skip[0], self._skip[1] - 1)
                return False
            self._skip = None
        if key is not None:
            self.last = (key, self.last[1] + 1) if self.last is not None and self.last[0] == key else (key, 1)
        return True


class KubernetesEngine(RunningEngine):
    """One role's objects in the cluster, its pods' logs as they arrive, and its deletion."""

    pump_error: Exception | None = None  # set by the log streams' threads
    # Never 0 here: a pod deleted with gracePeriodSeconds 0 leaves the API at once while its container
    # may still run (and hold its GPUs) on the node; 1 s still has the kubelet SIGKILL it at once.
    measured_grace_s = 1.0

    def __init__(
        self,
        api: KubeApi,
        rendered: RenderedRole,
        request: LaunchRequest,
        settings: KubernetesSettings,
        *,
        run_id: str,
        created: Sequence[tuple[str, str]],
        started_at: float,
        poll_s: float,
        server_version: str | None = None,
    ) -> None:
        self.api = api
        self._server_version = server_version
        self.rendered = rendered
        self.request = request
        self.settings = settings
        self.argv = rendered.argv
        self.started_at = started_at
        self._run_id = run_id
        self._created = list(created)
        self._poll_s = poll_s
        self._lock = threading.Lock()
        self._log = open_log(request.log_path)  # no symlink followed, the owner's only (process.py)
        self._pods: dict[str, dict[str, Any]] = {}
        self._streams: dict[str, threading.Thread] = {}
        self._responses: dict[str, Any] = {}
        self._leader: str | None = None
        self._relay: PodRelay | None = None
        self._returncode: int | None = None
        self._failure: tuple[str, str] | None = None
        self._note = ""
        self._phase: str | None = "waiting for the pods to be created"
        self._unschedulable_since: dict[str, float] = {}
        self._refused_since: float | None = None
        self._events_readable = True
        self._api_error_since: float | None = None
        self._stopping = threading.Event()
        self._stopped = False
        self._nodes: dict[str, str] = {}
        self._watcher = threading.Thread(target=self._watch, name=f"kvcheck-k8s-{rendered.name}", daemon=True)
        self._watcher.start()

    # -- what boot.py asks ------------------------------------------------------------------------

    @property
    def details(self) -> Mapping[str, Any]:
        with self._lock:
            pods = sorted(self._pods)
            nodes = dict(self._nodes)
        return {
            "engine_env": {str(k): str(v) for k, v in self.request.target.env.items()},
            "ports": {"http": self.settings.http_port, "bootstrap": None},
            "kubernetes": {
                "namespace": self.settings.namespace,
                "run_id": self._run_id,
                "server_version": self._server_version,
                "objects": [f"{kind}/{name}" for kind, name in self._created],
                "pods": pods,
                "nodes": nodes,
                "gpus_per_pod": self.rendered.gpus_per_node,
                "nnodes": self.rendered.nnodes,
            },
        }

    @property
    def http_port(self) -> int:
        return self.settings.http_port

    def base_url(self) -> str | None:
        with self._lock:
            return self._relay.url if self._relay is not None else None

    def poll(self) -> int | None:
        with self._lock:
            return self._returncode

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def phase(self) -> str | None:
        with self._lock:
            return self._phase

    def failure(self) -> tuple[str, str] | None:
        with self._lock:
            return self._failure

    def exit_note(self) -> str:
        with self._lock:
            return self._note

    # -- watching the pods ------------------------------------------------------------------------

    def _watch(self) -> None:
        """The watcher thread; a failure of kvcheck's own code here is a bug (exit 4), never a hang."""
        try:
            self._watch_pods()
        except Exception as exc:  # noqa: BLE001 - reported by the role as kvcheck's bug, never swallowed
            self.pump_error = self.pump_error or exc
            with self._lock:
                if self._returncode is None:
                    self._returncode = FAILED_BY_LAUNCHER

    def _watch_pods(self) -> None:
        selector = self.rendered.pod_selector
        while not self._stopping.is_set():
            try:
                pods = self.api.list_pods(self.settings.namespace, selector)
            except KubeError as exc:
                now = time.monotonic()
                self._api_error_since = self._api_error_since or now
                if now - self._api_error_since >= API_LOSS_S:
                    self._end_by_launcher(
                        f"lost the Kubernetes API server for {API_LOSS_S:g} s while the engine ran: {exc.message}",
                        "check the cluster's API server and kvcheck's network path to it",
                    )
                    return
            else:
                self._api_error_since = None
                if self._judge(pods):
                    return
            self._stopping.wait(self._poll_s)

    def _judge(self, pods: list[dict[str, Any]]) -> bool:
        """Take in one listing; True when the role has ended (its status is then set)."""
        names = {pod["metadata"]["name"] for pod in pods}
        with self._lock:
            vanished = sorted(set(self._pods) - names)
            for pod in pods:
                name = pod["metadata"]["name"]
                self._pods[name] = pod
                node = (pod.get("spec") or {}).get("nodeName")
                if node:
                    self._nodes[name] = node
        if vanished and not self._stopping.is_set():
            self._end_by_launcher(
                f"pod {', '.join(vanished)} was deleted while the engine ran (evicted, preempted or deleted by "
                "someone else)",
                "check the namespace's events (kubectl get events) and rerun",
            )
            return True
        for pod in sorted(pods, key=self._pod_order):
            if self._judge_pod(pod):
                return True
        if len(pods) < self.rendered.nnodes and self._pods_refused():
            return True
        self._update_phase(pods)
        return False

    def _pods_refused(self) -> bool:
        """While pods are missing: did their controller fail to create them (a ResourceQuota, a
        LimitRange, an admission webhook, Pod Security)? Only the controller's FailedCreate Event says
        so; without it the role would wait, pod-less, until the timeout. True when the role has ended."""
        if not self._events_readable:
            return False
        # the Job controller reports on the Job; a LeaderWorkerSet's pods come from its leader
        # StatefulSet (the LWS's name) and the group's worker StatefulSet (NAME-0)
        about = [self.rendered.name] + ([f"{self.rendered.name}-0"] if self.rendered.kind != "Job" else [])
        try:
            events = [e for name in about for e in self.api.list_events(self.settings.namespace, about=name,
                                                                         reason="FailedCreate")]
        except KubeError as exc:
            if exc.status in (401, 403):  # a Role from before kvcheck read events: wait, as it did then
                self._events_readable = False
            return False
        if not events:
            self._refused_since = None
            return False
        self._refused_since = self._refused_since or time.monotonic()
        if time.monotonic() - self._refused_since < self.settings.unschedulable_wait_s:
            return False
        latest = max(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        involved = latest.get("involvedObject") or {}
        said = " ".join(str(latest.get("message") or "no message").split())[:MAX_EVENT_CHARS]
        count = latest.get("count") or 1
        self._end_by_launcher(
            f"the cluster refused to create the role's pods: {involved.get('kind', 'its controller')} "
            f"{involved.get('name', self.rendered.name)}: {said}"
            + (f" ({count} attempts)" if isinstance(count, int) and count > 1 else ""),
            f"a ResourceQuota, LimitRange, admission webhook or Pod Security level in namespace "
            f"{self.settings.namespace} refuses the pod (kubectl describe quota,limitrange -n "
            f"{self.settings.namespace}); when quota frees up as other work ends, set "
            "launcher.kubernetes.unschedulable_wait",
        )
        return True

    def _pod_order(self, pod: dict[str, Any]) -> tuple[int, str]:
        labels = pod["metadata"].get("labels") or {}
        index = labels.get(LEADER_INDEX_LABEL, "0")
        return (int(index) if str(index).isdigit() else 0, pod["metadata"]["name"])

    def _is_leader(self, pod: dict[str, Any]) -> bool:
        labels = pod["metadata"].get("labels") or {}
        return self.rendered.kind == "Job" or str(labels.get(LEADER_INDEX_LABEL, "")) == "0"

    def _container_status(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") == self.rendered.container:
                found: dict[str, Any] = status
                return found
        return None

    def _judge_pod(self, pod: dict[str, Any]) -> bool:
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        for condition in status.get("conditions") or []:
            if (condition.get("type"), condition.get("status"), condition.get("reason")) == (
                "PodScheduled",
                "False",
                "Unschedulable",
            ):
                first = self._unschedulable_since.setdefault(name, time.monotonic())
                if time.monotonic() - first >= self.settings.unschedulable_wait_s:
                    self._end_by_launcher(
                        f"the cluster cannot place pod {name}: {condition.get('message') or 'Unschedulable'} "
                        f"(the role asks for {self.rendered.gpus_per_node} {self.settings.gpu_resource} per pod on "
                        f"{self.rendered.nnodes} node{'s' if self.rendered.nnodes != 1 else ''})",
                        "free or add nodes with that many GPUs, or correct the node selector and tolerations; "
                        "with a cluster autoscaler, set launcher.kubernetes.unschedulable_wait",
                    )
                    return True
        container = self._container_status(pod)
        if container is not None:
            state = container.get("state") or {}
            waiting = state.get("waiting") or {}
            reason = waiting.get("reason")
            if reason in PULL_ERRORS:
                self._end_by_launcher(
                    f"pod {name} cannot pull image {container.get('image')}: {reason}: {waiting.get('message', '')}".rstrip(
                        ": "
                    ),
                    "check the image name and tag, and the pull secrets (launcher.kubernetes.image_pull_secrets)",
                )
                return True
            if reason in CREATE_ERRORS:
                self._end_by_launcher(
                    f"pod {name} cannot start its engine container: {reason}: {waiting.get('message', '')}".rstrip(
                        ": "
                    ),
                    "a Secret, ConfigMap or volume the pod template names is missing in the namespace",
                )
                return True
            terminated = state.get("terminated") or (container.get("lastState") or {}).get("terminated")
            if terminated:
                self._end_by_engine(name, terminated, restarted=not state.get("terminated"))
                return True
            if state.get("running") and name not in self._streams:
                self._follow(pod)
        if status.get("phase") == "Failed":
            self._end_by_launcher(
                f"pod {name} failed: {status.get('reason') or 'Failed'}: {status.get('message') or 'no message'}",
                "a DeadlineExceeded pod ran past kvcheck's timeout; an evicted one lost its node",
            )
            return True
        if (
            self._is_leader(pod)
            and status.get("podIP")
            and container
            and (container.get("state") or {}).get("running")
        ):
            self._open_relay(name)
        return False

    def _update_phase(self, pods: list[dict[str, Any]]) -> None:
        if not pods:
            phase: str | None = "waiting for the pods to be created" + (
                "" if self._events_readable else " (kvcheck may not list events here, so a refusal is not seen: "
                "grant list on events, docs/measure.md)"
            )
        elif any(
            c.get("type") == "PodScheduled" and c.get("status") == "False"
            for p in pods
            for c in (p.get("status") or {}).get("conditions") or []
        ):
            phase = "waiting for a node"
        elif all((self._container_status(p) or {}).get("state", {}).get("running") for p in pods):
            phase = None  # the engine's own log tells the phase from here on
        else:
            phase = "pulling the image and starting the containers"
        with self._lock:
            self._phase = phase

    def _end_by_launcher(self, message: str, hint: str) -> None:
        with self._lock:
            if self._returncode is None:
                self._failure = (message, hint)
                self._returncode = FAILED_BY_LAUNCHER

    def _end_by_engine(self, pod: str, terminated: Mapping[str, Any], *, restarted: bool) -> None:
        """A container ended: wait for its log to drain (its last lines say why), then report its status."""
        stream = self._streams.get(pod)
        if stream is not None:
            stream.join(timeout=5.0)
        else:  # it ended between two listings, before kvcheck followed it: read what it printed
            try:
                text = self.api.read_log(self.settings.namespace, pod, self.rendered.container, previous=restarted)
            except KubeError as exc:
                self._write(f"kvcheck: could not read the log of pod {pod}: {exc.message}")
            else:
                for line in text.splitlines()[-5000:]:
                    self._take("", line)
        code = int(terminated.get("exitCode", 1) or 0)
        signal = terminated.get("signal")
        reason = terminated.get("reason") or ""
        note = f"; pod {pod}" + (" (restarted)" if restarted else "")
        if reason == "OOMKilled":
            note += ": OOMKilled (the kernel killed it at the container's memory limit; raise resources.limits.memory)"
        elif reason and reason not in ("Error", "Completed"):
            note += f": {reason}"
        if terminated.get("message"):
            note += f": {str(terminated['message']).strip()[:400]}"
        with self._lock:
            if self._returncode is None:
                self._returncode = code if code else (128 + int(signal) if signal else 0)
                self._note = note

    # -- logs and the server ----------------------------------------------------------------------

    def _follow(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        prefix = "" if self._is_leader(pod) else f"[{name}] "
        thread = threading.Thread(
            target=self._pump, args=(name, prefix), name=f"kvcheck-k8s-log-{name}", daemon=True
        )
        self._streams[name] = thread
        thread.start()

    def _pump(self, pod: str, prefix: str) -> None:
        """Copy a pod's log to the log file and the reader as it arrives, until its container ends.

        A stream that breaks while the container still runs (an API server restart, an idle timeout on
        a load balancer during a long weight load) is opened again and read from the start, skipping
        every line up to the last one taken (the kubelet's timestamps order them), so no line is lost
        or fed twice. A reader failure is kept, never allowed to stop the draining (as locally).
        """
        position = _LogPosition()
        while not self._stopping.is_set():
            try:
                response = self.api.follow_log(self.settings.namespace, pod, self.rendered.container)
            except KubeError as exc:
                if not self._stopping.is_set():
                    self._write(f"kvcheck: could not follow the log of pod {pod}: {exc.message}")
                if self._container_ended(pod):
                    return
                self._stopping.wait(RESUME_S)
                continue
            with self._lock:
                self._responses[pod] = response
            position.reopened()
            try:
                for raw in lines(response, max_line_bytes=MAX_LINE_BYTES):
                    key, line = split_timestamp(raw)
                    if position.is_new(key):
                        self._take(prefix, line)
            except Exception as exc:  # noqa: BLE001 - the connection closed under us at stop(), or broke
                if not self._stopping.is_set():
                    self._write(f"kvcheck: the log stream of pod {pod} broke ({exc}); resuming")
            finally:
                try:
                    response.release_conn()
                except Exception:  # noqa: BLE001 - already closed
                    pass
            if self._stopping.is_set() or self._container_ended(pod):
                return
            self._stopping.wait(RESUME_S)

    def _take(self, prefix: str, line: str) -> None:
        self._write(prefix + line)
        if self.pump_error is None:
            try:
                self.request.on_line(line)
            except Exception as exc:  # noqa: BLE001 - reported by the role (exit 4), never swallowed
                self.pump_error = exc

    def _container_ended(self, pod: str) -> bool:
        """True when the pod's engine container is no longer running (its log is complete), or the
        pod is gone; asks the API server, since the watcher's last listing may be older than the EOF."""
        try:
            pods = self.api.list_pods(self.settings.namespace, self.rendered.pod_selector)
        except KubeError:
            return False
        for item in pods:
            if item["metadata"]["name"] == pod:
                state = (self._container_status(item) or {}).get("state") or {}
                return not state.get("running")
        return True

    def _write(self, line: str) -> None:
        with self._lock:
            if not self._log.closed:
                self._log.write(line + "\n")
                self._log.flush()

    def _open_relay(self, pod: str) -> None:
        with self._lock:
            if self._relay is not None or self._stopping.is_set():
                return
            self._leader = pod
            namespace, port = self.settings.namespace, self.settings.http_port

            def proxy_get(path: str, timeout_s: float) -> tuple[int, bytes]:
                return self.api.proxy_get(namespace, pod, port, path, timeout_s=timeout_s)

            self._relay = PodRelay(proxy_get)

    # -- the end ----------------------------------------------------------------------------------

    def stop(self, grace_s: float) -> str | None:
        """Delete the role's objects and pods; wait until the pods are gone. None when nothing is left."""
        with self._lock:
            if self._stopped:
                return None
            self._stopped = True
        self._stopping.set()
        self._watcher.join(timeout=10.0)
        problems = delete_role(
            self.api, self.settings.namespace, self._created, self._role_selector(), grace_s
        )
        with self._lock:
            responses = list(self._responses.values())
            relay, self._relay = self._relay, None
        for response in responses:
            try:
                response.close()
            except Exception:  # noqa: BLE001 - already closed
                pass
        for thread in list(self._streams.values()):
            thread.join(timeout=5.0)
        if relay is not None:
            relay.close()
        with self._lock:
            self._log.close()
        if problems is None:
            return None
        return (
            f"{problems}; the cluster removes them by itself at their deadline "
            f"(activeDeadlineSeconds {self.rendered.objects[0]['spec']['activeDeadlineSeconds']} s), or run "
            f"`kvcheck cleanup --namespace {self.settings.namespace}`"
        )

    def _role_selector(self) -> str:
        return f"{RUN_LABEL}={self._run_id},kvcheck.io/role={role_slug(self.request.target.name)}"


class KubernetesLauncher(Launcher):
    """Runs each role as Kubernetes objects in one namespace; one run id labels them all."""

    name = "kubernetes"
    dry_run_shows = "the Kubernetes objects"

    @classmethod
    def from_settings(cls, settings: Any, *, gpu_check: bool) -> KubernetesLauncher:
        # each pod asks the cluster for its GPUs; there is no inventory to skip
        return cls(settings_from(settings))

    def dry_run(self, targets: Sequence[RoleTarget], *, timeout_s: float, dummy_weights: bool) -> str:
        from kvcheck.backends.measure.launchers.kubernetes.dryrun import dry_run_text

        return dry_run_text(
            targets, self.settings, timeout_s=timeout_s, dummy_weights=dummy_weights, templates=pod_templates(targets)
        )

    @classmethod
    def cleanup(cls, *, run_id: str | None, grace_s: float, where: Mapping[str, str | None]) -> CleanupReport:
        return clean_up(
            run_id=run_id,
            grace_s=grace_s,
            namespace=where.get("namespace"),
            context=where.get("context"),
            kubeconfig=where.get("kubeconfig"),
        )

    def __init__(
        self,
        settings: KubernetesSettings,
        *,
        run_id: str | None = None,
        templates: Mapping[str, PodTemplates] | None = None,
        api: KubeApi | None = None,
        poll_s: float = 1.0,
    ) -> None:
        self.settings = settings
        self.run_id = run_id or new_run_id()
        self.templates = dict(templates or {})
        self._api = api
        self._own_api = api is None
        self._poll_s = poll_s
        self.server_version: str | None = None

    def __enter__(self) -> KubernetesLauncher:
        if self._api is None:
            self._api = KubeApi.connect(kubeconfig=self.settings.kubeconfig, context=self.settings.context)
        try:
            self.server_version = self._api.server_version()
        except KubeError as exc:
            if self._own_api:
                self._api.close()
                self._api = None
            raise KubeError(
                f"the Kubernetes API server cannot be reached: {exc.message}",
                hint="check the kubeconfig context (launcher.kubernetes.context) and the network path to the "
                "cluster; nothing was created",
            ) from exc
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._own_api and self._api is not None:
            self._api.close()
            self._api = None

    def waits(self, targets: Sequence[RoleTarget]) -> list[list[int]]:
        """No role waits for another: the scheduler places each on GPUs of its own.

        Every role is rendered here once, before anything is created, so that launcher settings the
        roles cannot run with (no image, colliding names, a pod template without the named container)
        are input errors (exit 2) instead of half a run.
        """
        self._templates_for(targets)
        render_run(targets, self.settings, run_id=self.run_id, timeout_s=1.0, templates=self.templates)
        return [[] for _ in targets]

    def _templates_for(self, targets: Sequence[RoleTarget]) -> None:
        """Pod templates from the deployment files the roles were read from, unless given."""
        missing = [t for t in targets if t.name not in self.templates]
        self.templates.update(pod_templates(missing))

    def start(self, request: LaunchRequest) -> KubernetesEngine:
        api = self._api
        if api is None:
            raise RuntimeError("the Kubernetes launcher is used outside its `with` block")
        started_at = time.monotonic()
        self._templates_for([request.target])
        rendered = render_role(
            request.target,
            self.settings,
            run_id=self.run_id,
            timeout_s=request.timeout_s,
            grace_s=request.grace_s,
            dummy_weights=request.dummy_weights,
            templates=self.templates.get(request.target.name),
        )
        created: list[tuple[str, str]] = []
        owner_uid: str | None = None
        for obj in rendered.objects:
            obj = dict(obj)
            if obj["kind"] == "LeaderWorkerSet" and owner_uid is not None:
                metadata = dict(obj["metadata"])
                metadata["ownerReferences"] = [
                    {**ref, "uid": owner_uid} for ref in metadata["ownerReferences"]
                ]
                obj["metadata"] = metadata
            try:
                answer = api.create(obj)
            except KubeError as exc:
                problems = delete_role(
                    api, self.settings.namespace, created, self._selector(request), request.grace_s
                )
                verb = "refused" if exc.status else "did not create"
                raise LaunchError(
                    f"the cluster {verb} {obj['kind']} {self.settings.namespace}/{obj['metadata']['name']}: "
                    f"{exc.detail}" + (f"; {problems}" if problems else ""),
                    hint=self._refusal_hint(exc, obj["kind"]),
                    argv=rendered.argv,
                    details={"kubernetes": {"namespace": self.settings.namespace, "run_id": self.run_id}},
                ) from exc
            created.append((obj["kind"], obj["metadata"]["name"]))
            if obj["kind"] == "Job" and rendered.kind == "LeaderWorkerSet":
                owner_uid = str((answer.get("metadata") or {}).get("uid") or "")
        return KubernetesEngine(
            api,
            rendered,
            request,
            self.settings,
            run_id=self.run_id,
            created=created,
            started_at=started_at,
            poll_s=self._poll_s,
            server_version=self.server_version,
        )

    def _selector(self, request: LaunchRequest) -> str:
        return f"{RUN_LABEL}={self.run_id},kvcheck.io/role={role_slug(request.target.name)}"

    def _refusal_hint(self, exc: KubeError, kind: str) -> str:
        if exc.status == 403:
            return RBAC_HINT + f" {self.settings.namespace}"
        if exc.status == 404 and kind == "LeaderWorkerSet":
            return "multi-node roles need the LeaderWorkerSet controller (v0.4 or later) installed in the cluster"
        if exc.status == 404:
            return f"create the namespace {self.settings.namespace} or set launcher.kubernetes.namespace"
        return "the message above is the API server's; fix the launcher settings or the pod template"
