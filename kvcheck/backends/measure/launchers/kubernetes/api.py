"""The one place kvcheck talks to the Kubernetes API server, through the `kubernetes` client library.

The library is an optional extra (`pip install 'kvcheck[k8s]'`), imported on first use. It reads the
kubeconfig (or the in-cluster service account) and handles every authentication scheme clusters use
(certificates, tokens, exec plugins), which is why kvcheck does not speak HTTP to the API server
itself. Answers are read as plain JSON (`_preload_content=False`): kvcheck needs a few fields, not
the library's models. Every API failure becomes a `KubeError` carrying the server's own message.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kvcheck.errors import CheckError, MissingExtraError
from kvcheck.io.jsontext import loads as json_loads

INSTALL_HINT = "pip install 'kvcheck[k8s]'"
LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
REQUEST_TIMEOUT_S = 30.0
EVENTS_LIMIT = 50
# An engine may print nothing for a long time (loading weights); the log stream must outlive that.
# The pod listing, not the stream, notices a pod that died.
LOG_READ_TIMEOUT_S = 24 * 3600.0


class KubeError(CheckError):
    """The API server refused or could not be reached; `status` is the HTTP status (0: no answer)."""

    def __init__(
        self, message: str, *, status: int = 0, reason: str = "", detail: str = "", hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.reason = reason
        self.detail = detail or message  # the server's own words, without what kvcheck was doing


def _client_module() -> Any:
    try:
        import kubernetes  # noqa: F401
        from kubernetes import client, config
    except ImportError as exc:
        raise MissingExtraError(
            "the Kubernetes launcher needs the kubernetes client library, which is not installed",
            hint=INSTALL_HINT,
        ) from exc
    return client, config


def _status_message(exc: Any) -> tuple[int, str, str]:
    """(status, reason, message) from the library's ApiException: the server's Status if it sent one."""
    status = int(getattr(exc, "status", 0) or 0)
    body = getattr(exc, "body", None)
    try:
        data = json_loads(body) if body else {}
    except (TypeError, ValueError):
        data = {}
    if isinstance(data, dict) and data.get("message"):
        return status, str(data.get("reason") or ""), str(data["message"])
    return status, str(getattr(exc, "reason", "") or ""), str(body or getattr(exc, "reason", "") or exc)


class KubeApi:
    """A connection to one cluster; methods take and return plain JSON values."""

    def __init__(self, api_client: Any) -> None:
        client, _ = _client_module()
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.host = str(api_client.configuration.host)

    @classmethod
    def connect(cls, *, kubeconfig: str | None = None, context: str | None = None) -> KubeApi:
        """From the kubeconfig (the file, $KUBECONFIG or ~/.kube/config) or, inside a pod, its account."""
        _, config = _client_module()
        in_cluster = kubeconfig is None and context is None and "KUBERNETES_SERVICE_HOST" in os.environ
        default = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config"))
        if in_cluster and not Path(default.split(os.pathsep)[0]).exists():
            try:
                from kubernetes import client

                configuration = client.Configuration()
                config.load_incluster_config(client_configuration=configuration)
                return cls(client.ApiClient(configuration))
            except Exception as exc:  # noqa: BLE001 - any failure here means: cannot reach the cluster
                raise KubeError(f"cannot use the pod's service account: {exc}") from exc
        try:
            api_client = config.new_client_from_config(
                config_file=kubeconfig, context=context, persist_config=False
            )
        except Exception as exc:  # noqa: BLE001 - ConfigException, a missing file, a broken exec plugin
            where = kubeconfig or default
            raise KubeError(
                f"cannot load the Kubernetes configuration ({where}"
                + (f", context {context}" if context else "")
                + f"): {exc}",
                hint="point launcher.kubernetes.kubeconfig and context (kvcheck cleanup: --kubeconfig, --context) at the cluster",
            ) from exc
        return cls(api_client)

    # -- calls ------------------------------------------------------------------------------------

    def _call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        client, _ = _client_module()
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT_S)
        try:
            response = method(*args, _preload_content=False, **kwargs)
        except client.ApiException as exc:
            status, reason, message = _status_message(exc)
            raise KubeError(f"{what}: {message}", status=status, reason=reason, detail=message) from exc
        except Exception as exc:  # noqa: BLE001 - urllib3 connection errors, timeouts
            detail = f"the API server at {self.host} did not answer ({exc})"
            raise KubeError(f"{what}: {detail}", detail=detail) from exc
        return response

    def _json(self, what: str, method: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        response = self._call(what, method, *args, **kwargs)
        try:
            decoded: dict[str, Any] = json_loads(response.data or b"{}")
            return decoded
        except ValueError as exc:
            raise KubeError(f"{what}: the API server's answer is not JSON") from exc

    def server_version(self) -> str:
        """The API server's version (GET /version, which every authenticated user may read): proves the
        cluster answers before anything is created."""
        client, _ = _client_module()
        data = self._json(
            "asking the API server for its version", client.VersionApi(self.api_client).get_code
        )
        return str(data.get("gitVersion") or f"{data.get('major')}.{data.get('minor')}")

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create one object; unknown fields are refused (fieldValidation=Strict), not dropped."""
        kind, name = obj["kind"], obj["metadata"]["name"]
        namespace = obj["metadata"]["namespace"]
        what = f"creating {kind} {namespace}/{name}"
        if kind == "Job":
            return self._json(
                what, self.batch.create_namespaced_job, namespace, dict(obj), field_validation="Strict"
            )
        if kind == "LeaderWorkerSet":
            return self._json(
                what,
                self.custom.create_namespaced_custom_object,
                LWS_GROUP,
                LWS_VERSION,
                namespace,
                LWS_PLURAL,
                dict(obj),
                field_validation="Strict",
            )
        raise ValueError(f"kvcheck does not create {kind}")

    def delete(self, kind: str, namespace: str, name: str) -> bool:
        """Delete one object and, in the background, what it owns (pods); False when already gone."""
        what = f"deleting {kind} {namespace}/{name}"
        try:
            if kind == "Job":
                self._call(
                    what, self.batch.delete_namespaced_job, name, namespace, propagation_policy="Background"
                )
            elif kind == "LeaderWorkerSet":
                self._call(
                    what,
                    self.custom.delete_namespaced_custom_object,
                    LWS_GROUP,
                    LWS_VERSION,
                    namespace,
                    LWS_PLURAL,
                    name,
                    propagation_policy="Background",
                )
            elif kind == "Pod":
                self._call(what, self.core.delete_namespaced_pod, name, namespace)
            else:
                raise ValueError(f"kvcheck does not delete {kind}")
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def delete_pod(self, namespace: str, name: str, *, grace_s: int | None = None) -> bool:
        try:
            self._call(
                f"deleting Pod {namespace}/{name}",
                self.core.delete_namespaced_pod,
                name,
                namespace,
                grace_period_seconds=grace_s,
            )
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        data = self._json(
            f"listing pods in {namespace}", self.core.list_namespaced_pod, namespace, label_selector=selector
        )
        return list(data.get("items") or [])

    def list_events(self, namespace: str, *, about: str, reason: str) -> list[dict[str, Any]]:
        """The namespace's core/v1 Events about the object named `about` with this reason (at most
        EVENTS_LIMIT: a controller retrying for hours folds its repeats into one Event's count)."""
        data = self._json(
            f"listing events in {namespace}",
            self.core.list_namespaced_event,
            namespace,
            field_selector=f"involvedObject.name={about},reason={reason}",
            limit=EVENTS_LIMIT,
        )
        return list(data.get("items") or [])

    def list_objects(self, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        """Jobs or LeaderWorkerSets with these labels; no LeaderWorkerSet CRD means none."""
        what = f"listing {kind}s in {namespace}"
        if kind == "Job":
            data = self._json(what, self.batch.list_namespaced_job, namespace, label_selector=selector)
        else:
            try:
                data = self._json(
                    what,
                    self.custom.list_namespaced_custom_object,
                    LWS_GROUP,
                    LWS_VERSION,
                    namespace,
                    LWS_PLURAL,
                    label_selector=selector,
                )
            except KubeError as exc:
                if exc.status == 404:  # the CRD is not installed: nothing of that kind can exist
                    return []
                raise
        return list(data.get("items") or [])

    def follow_log(self, namespace: str, pod: str, container: str) -> Any:
        """The container's log as a streaming HTTP response (read it with `lines`, close it to stop).

        Each line starts with the kubelet's RFC 3339 timestamp and a space (`timestamps=true`), so a
        stream that breaks can be resumed without losing or repeating a line (`split_timestamp`).
        """
        return self._call(
            f"reading the log of {namespace}/{pod}",
            self.core.read_namespaced_pod_log,
            pod,
            namespace,
            container=container,
            follow=True,
            timestamps=True,
            _request_timeout=(REQUEST_TIMEOUT_S, LOG_READ_TIMEOUT_S),
        )

    def read_log(self, namespace: str, pod: str, container: str, *, previous: bool = False) -> str:
        """The container's whole log so far (the previous instance's with `previous`), without timestamps."""
        response = self._call(
            f"reading the log of {namespace}/{pod}", self.core.read_namespaced_pod_log, pod, namespace,
            container=container, previous=previous,
        )
        return bytes(response.data or b"").decode("utf-8", "replace")

    def proxy_get(
        self, namespace: str, pod: str, port: int, path: str, *, timeout_s: float
    ) -> tuple[int, bytes]:
        """GET a path of the pod's port through the API server's pod proxy: (status, body)."""
        client, _ = _client_module()
        try:
            response = self.core.connect_get_namespaced_pod_proxy_with_path(
                f"{pod}:{port}",
                namespace,
                path.lstrip("/"),
                _preload_content=False,
                _request_timeout=timeout_s,
            )
        except client.ApiException as exc:
            return int(exc.status or 502), (
                exc.body if isinstance(exc.body, bytes) else str(exc.body or "").encode()
            )
        except Exception as exc:  # noqa: BLE001 - a connection error: the relay answers 502
            return 502, f"the API server at {self.host} did not answer: {exc}".encode()
        return int(response.status), bytes(response.data or b"")

    def close(self) -> None:
        try:
            self.api_client.close()
        except Exception:  # noqa: BLE001 - closing a pool that is already gone
            pass


_TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ")


def split_timestamp(line: str) -> tuple[str | None, str]:
    """(sortable timestamp, text) of a `timestamps=true` log line; (None, line) without a timestamp.

    The kubelet trims trailing zeros of the fraction (RFC3339Nano), so the key pads it to 9 digits.
    """
    match = _TIMESTAMP.match(line)
    if match is None:
        return None, line
    seconds, fraction, zone = match.groups()
    return f"{seconds}.{(fraction or '').ljust(9, '0')}{zone}", line[match.end() :]


def default_namespace(*, kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace kubectl would use: the context's, the pod's own (in a cluster), else default."""
    _, config = _client_module()
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    except Exception:  # noqa: BLE001 - no kubeconfig: maybe inside a pod
        token_ns = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        try:
            return token_ns.read_text().strip() or "default"
        except OSError:
            return "default"
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


def lines(response: Any, *, max_line_bytes: int = 1 << 20) -> Iterator[str]:
    """The lines of a streaming response as they arrive (the last one even without a newline).

    A line longer than `max_line_bytes` is cut there and the rest of it skipped, so a container that
    prints without newlines cannot exhaust kvcheck's memory.
    """
    pending = b""
    skipping = False  # inside an over-long line whose head was already handed on
    for chunk in response.stream(64 * 1024, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            if skipping:
                skipping = False
                continue
            yield raw[:max_line_bytes].decode("utf-8", "replace").rstrip("\r")
        if len(pending) > max_line_bytes:
            if not skipping:
                yield pending[:max_line_bytes].decode("utf-8", "replace")
            skipping = True
            pending = b""
    if pending and not skipping:
        yield pending.decode("utf-8", "replace").rstrip("\r")
