"""Audit live servers (SGLang today): ask each for its pool and limits, and judge it like any other role.

The flow: endpoints (URLs, a fleet file, or a manifest's roles paired with URLs) -> one engine
`ServerClient` per endpoint (`Engine.server_client`), run on a bounded set of threads -> one
RoleTarget and one PoolMeasurement per endpoint -> `app.judge`. Threads, not asyncio: the work is
three blocking HTTP GETs per server, the client stays the same synchronous client the measure
backend uses on loopback, and a fixed number of worker threads bounds the concurrency with one
number (`--concurrency`).

A server that cannot be audited is reported (KV306, exit 3) next to the others; it never passes.
"""

from __future__ import annotations

import math
import queue
import shlex
import ssl
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from rich.console import Console

import kvcheck.backends.audit_rules  # noqa: F401  (defines KV306-KV308)
from kvcheck.engines import engine_names, get_engine
from kvcheck.engines.base import RouterAnswer
from kvcheck.errors import EndpointError, InputError, ServerUnusable
from kvcheck.http import deadline, display_url, make_ssl_context
from kvcheck.model import Endpoint, Finding, Location, PoolMeasurement, RoleTarget
from kvcheck.policy.registry import finding
from kvcheck.redact import REDACTED

if TYPE_CHECKING:
    from kvcheck.engines.base import Engine, ServerClient, ServerInfo

BACKOFF_S = 0.5  # first retry waits this long, then doubles

T = TypeVar("T")
R = TypeVar("R")


# -- the audit ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditOutcome:
    """One endpoint's audit: its target (window, headroom, args) and its measurement."""

    target: RoleTarget
    measurement: PoolMeasurement


@dataclass(frozen=True)
class RouterOutcome:
    """An endpoint that is a router: its workers, audited next (as a fleet's servers are), and a KV306
    outcome for the router itself when it lists more workers than kvcheck follows (fail closed)."""

    workers: tuple[Endpoint, ...]
    left_out: AuditOutcome | None = None


def audit_endpoints(
    endpoints: Sequence[Endpoint],
    *,
    context_length: int | None,
    min_headroom: float,
    timeout_s: float,
    retries: int,
    concurrency: int,
    verify: bool | str | ssl.SSLContext,
    token: str | None,
    progress: bool | None = None,
    manifest_targets: Sequence[RoleTarget] = (),
    transport: httpx.BaseTransport | None = None,
) -> tuple[list[RoleTarget], list[PoolMeasurement]]:
    """Ask every endpoint concurrently (at most `concurrency` at a time); results in input order.

    `progress`: True shows a bar on stderr when it is a terminal, None decides by the terminal alone.
    """
    if concurrency < 1:
        raise InputError(f"concurrency must be at least 1, got {concurrency}")
    if not min_headroom >= 1:  # below 1, a pool smaller than the window would pass
        raise InputError(f"min headroom must be at least 1, got {min_headroom:g}")
    context = make_ssl_context(verify)  # built once: loading the CA store costs tens of ms
    by_role = {t.name: t for t in manifest_targets}
    # Resolved here, not on the worker threads: a manifest role names its engine; a fleet file or a
    # bare URL names none, so every registered engine may be asked (audit_one), each built here first.
    default_engine = get_engine()
    for name in engine_names():
        get_engine(name)
    engines = {t.name: get_engine(t.engine) for t in manifest_targets}
    console = Console(stderr=True)
    show = console.is_terminal if progress is None else (progress and console.is_terminal)

    def one(endpoint: Endpoint) -> AuditOutcome | RouterOutcome:
        return audit_one(
            endpoint,
            context_length=context_length,
            min_headroom=min_headroom,
            timeout_s=timeout_s,
            retries=retries,
            verify=context,
            token=token,
            manifest_target=by_role.get(endpoint.name),
            transport=transport,
            engine=engines.get(endpoint.name),
        )

    def worker(endpoint: Endpoint) -> AuditOutcome | RouterOutcome:
        # a router's worker: the same bounds as a fleet's server, without the token (it was given for
        # the router's origin), and never followed further (a router behind a router is KV306)
        return audit_one(
            endpoint,
            context_length=context_length,
            min_headroom=min_headroom,
            timeout_s=timeout_s,
            retries=retries,
            verify=context,
            token=None,
            transport=transport,
            engine=default_engine,
            follow_routers=False,
        )

    if not show:
        first = run_bounded(endpoints, one, concurrency)
        workers = [w for o in first if isinstance(o, RouterOutcome) for w in o.workers]
        behind = run_bounded(workers, worker, concurrency) if workers else []
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("auditing servers"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task("audit", total=len(endpoints))
            first = run_bounded(endpoints, one, concurrency, on_done=lambda: bar.advance(task))
            workers = [w for o in first if isinstance(o, RouterOutcome) for w in o.workers]
            bar.update(task, total=len(endpoints) + len(workers))
            behind = run_bounded(workers, worker, concurrency, on_done=lambda: bar.advance(task)) if workers else []
    outcomes = _in_order(first, behind)
    return [o.target for o in outcomes], [o.measurement for o in outcomes]


def _in_order(first: Sequence[AuditOutcome | RouterOutcome], behind: Sequence[AuditOutcome | RouterOutcome]) -> list[AuditOutcome]:
    """Every outcome in input order, each router's workers in its place (then its KV306, if any)."""
    workers = iter(behind)
    outcomes: list[AuditOutcome] = []
    for outcome in first:
        if isinstance(outcome, AuditOutcome):
            outcomes.append(outcome)
            continue
        for _ in outcome.workers:
            item = next(workers)
            assert isinstance(item, AuditOutcome)  # workers are never followed: follow_routers=False
            outcomes.append(item)
        if outcome.left_out is not None:
            outcomes.append(outcome.left_out)
    return outcomes


def run_bounded(
    items: Sequence[T], work: Callable[[T], R], concurrency: int, on_done: Callable[[], None] | None = None
) -> list[R]:
    """`work(item)` for every item on at most `concurrency` threads; results in input order.

    Daemon threads rather than a ThreadPoolExecutor: on Ctrl-C the command exits at once instead
    of waiting for every in-flight request to time out (executor threads are joined at exit).
    An exception in `work` (a kvcheck bug: server failures are findings) is raised here.
    """
    pending: queue.SimpleQueue[int] = queue.SimpleQueue()
    for index in range(len(items)):
        pending.put(index)
    finished: queue.SimpleQueue[tuple[int, Any, BaseException | None]] = queue.SimpleQueue()

    def worker() -> None:
        while True:
            try:
                index = pending.get_nowait()
            except queue.Empty:
                return
            try:
                finished.put((index, work(items[index]), None))
            except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
                finished.put((index, None, exc))

    for number in range(max(1, min(concurrency, len(items)))):
        threading.Thread(target=worker, name=f"kvcheck-audit-{number}", daemon=True).start()
    results: list[Any] = [None] * len(items)
    for _ in range(len(items)):
        while True:
            try:
                index, result, exc = finished.get(timeout=0.2)  # short waits keep Ctrl-C responsive
                break
            except queue.Empty:
                continue
        if exc is not None:
            raise exc
        results[index] = result
        if on_done is not None:
            on_done()
    return results


def audit_one(
    endpoint: Endpoint,
    *,
    context_length: int | None,
    min_headroom: float,
    timeout_s: float,
    retries: int,
    verify: bool | str | ssl.SSLContext,
    token: str | None,
    manifest_target: RoleTarget | None = None,
    transport: httpx.BaseTransport | None = None,
    engine: Engine | None = None,
    follow_routers: bool = True,
) -> AuditOutcome | RouterOutcome:
    """One endpoint: ask it, then build its target and measurement (failures become KV306).

    A router (sglang-router) holds no pool: with `follow_routers` and no manifest role, its worker list
    is read and returned (RouterOutcome) for the caller to audit each worker; else, or when the list
    cannot be read, it is KV306 (exit 3) naming what to audit instead. `engine` None: the manifest
    role's engine, else the registry's default.
    """
    # A manifest role (or the caller) names the engine; a bare URL or a fleet entry names none, so each
    # registered engine's client asks in turn, the registry's default first, and the first that reads
    # the server's answer as its own judges it (a vLLM server has no SGLang /server_info, and SGLang's
    # /metrics no vLLM cache gauge). When none can, the default engine's error is reported.
    if engine is not None:
        candidates = [engine]
    elif manifest_target is not None:
        candidates = [get_engine(manifest_target.engine)]
    else:
        default = get_engine()
        candidates = [default, *(get_engine(name) for name in engine_names() if name != default.name)]
    first_error: EndpointError | None = None
    # `--timeout` bounds the whole server: every request, retry, backoff, every engine asked and the
    # reading of the answers (each request's own deadline nests inside this one and ends by it)
    with deadline(timeout_s):
        for candidate in candidates:
            try:
                with candidate.server_client(
                    endpoint.url,
                    timeout_s=timeout_s,
                    verify=verify,
                    token=token,
                    retries=retries,
                    backoff_s=BACKOFF_S,
                    transport=transport,
                ) as client:
                    try:
                        info = client.server_info()
                    except EndpointError as exc:
                        if not isinstance(exc, RouterAnswer):
                            raise
                        return _router(endpoint, exc, client, context_length, min_headroom, manifest_target,
                                       follow=follow_routers and manifest_target is None)
            except EndpointError as exc:
                first_error = first_error or exc
                if isinstance(exc, ServerUnusable):
                    break  # unreachable or refused: no other engine's client would fare better
                continue
            return _audited(endpoint, info, context_length, min_headroom, manifest_target, candidate)
    assert first_error is not None
    return _unaudited(endpoint, first_error, context_length, min_headroom, manifest_target)


def _router(
    endpoint: Endpoint,
    answer: EndpointError,
    client: ServerClient,
    context_length: int | None,
    min_headroom: float,
    manifest_target: RoleTarget | None,
    *,
    follow: bool,
) -> AuditOutcome | RouterOutcome:
    """A router: its workers to audit next, or KV306 saying which URLs to audit instead (fail closed)."""
    try:
        workers, listed = client.router_workers()
    except EndpointError as exc:
        return _unaudited(endpoint, EndpointError(
            f"{answer.message}; its worker list cannot be read ({exc.message}), so no worker was audited",
            hint="audit its workers' URLs directly (kvcheck audit URL... or --fleet FILE)",
        ), context_length, min_headroom, manifest_target)
    if not workers:
        return _unaudited(endpoint, EndpointError(
            f"{answer.message}; it lists no workers, so there is nothing to audit behind it",
            hint="audit the SGLang servers themselves once the router has workers",
        ), context_length, min_headroom, manifest_target)
    urls = [display_url(url) for url, _ in workers]
    if not follow:
        shown = ", ".join(urls[:4]) + (f" and {listed - 4} more" if listed > 4 else "")
        why = "a router behind a router is not followed" if manifest_target is None else (
            "a manifest role is one server")
        return _unaudited(endpoint, EndpointError(
            f"{answer.message}; its workers: {shown} ({why})",
            hint="point --endpoint at one of its workers" if manifest_target is not None
            else "audit the servers themselves",
        ), context_length, min_headroom, manifest_target)
    followed = tuple(
        Endpoint(
            name=f"{endpoint.name} worker {shown_url}",
            url=url,
            role=kind if kind not in (None, "regular") else endpoint.role,
            context_length=endpoint.context_length,
            location=endpoint.location,
        )
        for (url, kind), shown_url in zip(workers, urls, strict=True)
    )
    left_out = None
    if listed > len(followed):
        left_out = _unaudited(endpoint, EndpointError(
            f"{display_url(endpoint.url)} is an sglang-router listing {listed:,} workers; kvcheck audits at most "
            f"{len(followed):,} behind one router, so {listed - len(followed):,} were not audited",
            hint="audit the rest with a fleet file of their URLs (kvcheck audit --fleet FILE)",
        ), context_length, min_headroom, manifest_target)
    return RouterOutcome(workers=followed, left_out=left_out)


def _window(
    endpoint: Endpoint, context_length: int | None, manifest_target: RoleTarget | None, served: int | None
) -> tuple[int | None, str | None]:
    """The window to judge against (tokens) and where it came from."""
    if manifest_target is not None:
        return manifest_target.context_length, "manifest"
    if endpoint.context_length is not None:
        return endpoint.context_length, "fleet file"
    if context_length is not None:
        return context_length, "--context-length"
    if served is not None:
        return served, "served"
    return None, None


def _target(
    endpoint: Endpoint,
    window: int | None,
    min_headroom: float,
    manifest_target: RoleTarget | None,
    info: ServerInfo | None,
    engine: Engine | None = None,
) -> RoleTarget:
    if manifest_target is not None:
        return manifest_target
    # An unknown window is 0 tokens here only so that the role can be listed; its KV306 finding
    # makes the role `error` (exit 3), so the 0 never lets it pass. The engine whose client read the
    # server judges it (a vLLM server's fixes name vLLM's flags); None (unread): the registry's default.
    return RoleTarget(
        engine=engine.name if engine is not None else get_engine().name,
        name=endpoint.name,
        context_length=window or 0,
        min_headroom=min_headroom,
        engine_version=info.version if info is not None else None,
        args=dict(info.resolved_args) if info is not None else {},
        argv_args=(),
        location=endpoint.location,
    )


def _where(endpoint: Endpoint, manifest_target: RoleTarget | None) -> Location | None:
    """Where the server is declared: its fleet-file line, else its manifest role."""
    if endpoint.location is not None:
        return endpoint.location
    return manifest_target.location if manifest_target is not None else None


def _unaudited(
    endpoint: Endpoint,
    exc: EndpointError,
    context_length: int | None,
    min_headroom: float,
    manifest_target: RoleTarget | None,
) -> AuditOutcome:
    window, source = _window(endpoint, context_length, manifest_target, None)
    target = _target(endpoint, window, min_headroom, manifest_target, None)
    measurement = PoolMeasurement(
        role=target.name,
        source="audit",
        pool_tokens=None,
        details=_clean({"url": display_url(endpoint.url), "role": endpoint.role, "context_source": source}),
        findings=(
            finding(
                "KV306", target.name, exc.message, hint=exc.hint, location=_where(endpoint, manifest_target)
            ),
        ),
    )
    return AuditOutcome(target, measurement)


def _audited(
    endpoint: Endpoint,
    info: ServerInfo,
    context_length: int | None,
    min_headroom: float,
    manifest_target: RoleTarget | None,
    engine: Engine,
) -> AuditOutcome:
    window, source = _window(endpoint, context_length, manifest_target, info.served_context_len)
    target = _target(endpoint, window, min_headroom, manifest_target, info, engine)
    findings: list[Finding] = []
    if window is None:
        findings.append(
            finding(
                "KV306",
                target.name,
                f"{info.url}: the server does not state the context window it serves "
                f"(no /v1/models max_model_len{_no_gauge(engine.context_gauge)}), so its pool cannot be judged",
                hint="pass --context-length N (or context_length in the fleet file)",
                location=_where(endpoint, manifest_target),
            )
        )
    pool_tokens, disagreements = _cross_check(info, engine)
    max_input_tokens = engine.admission_bound(info.max_req_input_len, info.served_context_len, pool_tokens,
                                              info.resolved_args, info.version)
    if window is not None and max_input_tokens is None:
        # Fail closed: a window to judge against is not the server's own bound. A server that states
        # neither the longest prompt it admits nor the context it serves (a vLLM server whose
        # /v1/models lists no max_model_len) may refuse every prompt past a few thousand tokens; its
        # pool alone cannot vouch for the window. KV101 on that pool still fails the run (exit 1).
        findings.append(
            finding(
                "KV306",
                target.name,
                f"{info.url}: the server does not state the longest prompt it admits (no /v1/models max_model_len"
                f"{_no_gauge(engine.context_gauge)}), so it cannot be checked against the {window:,}-token window",
                hint="check that the URL points at the server itself and that it lists its base model with its "
                     "context length; or judge its startup log (kvcheck logs)",
                location=_where(endpoint, manifest_target),
            )
        )
    findings.extend(
        finding(
            "KV307",
            target.name,
            text,
            hint="kvcheck judges with the smallest pool figure; compare with the startup log (kvcheck logs)",
            location=_where(endpoint, manifest_target),
        )
        for text in disagreements
    )
    if manifest_target is not None:
        findings.extend(_manifest_drift(manifest_target, info, engine))
        findings.extend(_other_model(manifest_target, info))
        findings.extend(_other_role(manifest_target, info, engine))
    details = {
        "url": info.url,
        "role": endpoint.role,
        "info_endpoint": info.endpoint,
        "redirected_to": info.redirected_to,
        "context_source": source,
        "served_context_len": info.served_context_len,
        "context_length_arg": info.context_length_arg,
        "max_total_num_tokens": info.max_total_num_tokens,
        "max_req_input_len": info.max_req_input_len,
        "dp_token_capacities": list(info.dp_token_capacities) or None,
        "swa_token_capacities": list(info.swa_token_capacities) or None,
        "metrics": dict(info.metrics) or None,
        "notes": list(info.notes) or None,
    }
    measurement = PoolMeasurement(
        role=target.name,
        source="audit",
        pool_tokens=pool_tokens,
        max_input_tokens=max_input_tokens,
        context_len=info.served_context_len,
        engine_version=info.version,
        max_running_requests=info.max_running_requests,
        resolved_args=dict(info.resolved_args),
        argv=_argv(info.launch_command),
        details=_clean(details),
        findings=tuple(findings),
    )
    return AuditOutcome(target, measurement)


def _no_gauge(name: str | None) -> str:
    """The ", no <gauge> gauge" part of a message, empty for an engine without that gauge."""
    return f", no {name} gauge" if name is not None else ""


def _gauge(info: ServerInfo, name: str | None) -> float | None:
    """A constant gauge's value (min over ranks), None when the engine has no such gauge or it is absent."""
    return info.metrics.get(name) if name is not None else None


def _cross_check(info: ServerInfo, engine: Engine) -> tuple[int | None, list[str]]:
    """The pool to judge (the smallest figure the server states) and every disagreement found."""
    pool = info.pool_tokens
    texts: list[str] = []
    figures = [pool] if pool is not None else []
    ranks = info.dp_token_capacities
    if ranks and info.max_total_num_tokens is not None and info.max_total_num_tokens < min(ranks):
        texts.append(engine.pool_below_ranks(info.max_total_num_tokens, min(ranks)))
        figures.append(info.max_total_num_tokens)
    gauge = _gauge(info, engine.pool_gauge)
    if gauge is not None and pool is not None and int(gauge) != pool:
        texts.append(
            f"the {engine.pool_gauge} gauge says {int(gauge):,} tokens (smallest rank), "
            f"server info says {pool:,}"
        )
        figures.append(int(gauge))
    served_models = info.served_context_len if info.served_context_source == "/v1/models" else None
    gauge_ctx = _gauge(info, engine.context_gauge)
    if served_models is not None and gauge_ctx is not None and int(gauge_ctx) != served_models:
        texts.append(
            f"/v1/models serves max_model_len {served_models:,} but the {engine.context_gauge} gauge says "
            f"{int(gauge_ctx):,}"
        )
    if (
        info.context_length_arg is not None
        and info.served_context_len is not None
        and info.context_length_arg != info.served_context_len
    ):
        texts.append(
            f"the server was started with --{engine.window_flag} {info.context_length_arg:,} but serves "
            f"a context of {info.served_context_len:,} tokens"
        )
    judged = min(figures) if figures else None
    if (info.max_req_input_len is not None and judged is not None
            and (over := engine.bound_over_pool(info.max_req_input_len, judged, info)) is not None):
        texts.append(over)
    return judged, texts


def _manifest_drift(target: RoleTarget, info: ServerInfo, engine: Engine) -> list[Finding]:
    """KV308: the server's resolved args or version differ from what the manifest declares."""
    differences: list[str] = []
    first_key: str | None = None
    for key, declared in target.args.items():
        if key not in info.resolved_args or declared is None:
            continue
        running = info.resolved_args[key]
        if running == REDACTED or _same_value(declared, running):
            continue
        differences.append(f"{key.replace('_', '-')}: manifest {declared!r}, server {running!r}")
        first_key = first_key or key
    if target.engine_version and info.version and target.engine_version != info.version:
        differences.insert(0, f"{engine.label} version: manifest {target.engine_version}, server {info.version}")
    if not differences:
        return []
    shown = "; ".join(differences[:8]) + (
        f"; and {len(differences) - 8} more" if len(differences) > 8 else ""
    )
    return [
        finding(
            "KV308",
            target.name,
            f"{info.url} runs other settings than the manifest declares: {shown}",
            hint="redeploy the server from the manifest, or update the manifest to what runs",
            location=target.arg_location(first_key) if first_key else target.location,
        )
    ]


def _other_role(target: RoleTarget, info: ServerInfo, engine: Engine) -> list[Finding]:
    """KV311: a prefill or decode role's endpoint answers as another role, or as a plain server."""
    declared = engine.role_mode(target.args)
    if declared is None or not info.resolved_args:  # a server that states no arguments states no role
        return []
    served = engine.role_mode(info.resolved_args)
    if served == declared:
        return []
    return [
        finding(
            "KV311",
            target.name,
            f"{info.url} serves as {served or 'a plain server (no disaggregation mode)'}, "
            f"not as the manifest's {declared} role",
            hint="point --endpoint at this role's server, or update the manifest's role",
            location=target.location,
        )
    ]


def _other_model(target: RoleTarget, info: ServerInfo) -> list[Finding]:
    """KV311: the server serves another model than the manifest's role declares."""
    declared = target.model_path
    served = [value for key in ("model_path", "served_model_name")
              if isinstance(value := info.resolved_args.get(key), str) and value and value != REDACTED]
    if not declared or not served or any(_same_model(declared, name) for name in served):
        return []
    return [
        finding(
            "KV311",
            target.name,
            f"{info.url} serves {served[0]!r}, not the manifest's model {declared!r}",
            hint="point --endpoint at this role's server, or update the manifest's model",
            location=target.arg_location("model_path") or target.location,
        )
    ]


def _same_model(declared: str, served: str) -> bool:
    """Equal, or the same last path component (a Hub id and the folder it was downloaded to)."""
    def last(name: str) -> str:
        return name.rstrip("/").rsplit("/", 1)[-1].lower()

    return declared == served or last(declared) == last(served)


def _same_value(declared: Any, running: Any) -> bool:
    if isinstance(declared, bool) or isinstance(running, bool):
        return bool(declared) == bool(running) if running is not None else False
    if isinstance(declared, (int, float)) and isinstance(running, (int, float)):
        return math.isclose(float(declared), float(running), rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(declared, (list, tuple)) and isinstance(running, (list, tuple)):
        return len(declared) == len(running) and all(
            _same_value(a, b) for a, b in zip(declared, running, strict=True)
        )
    return str(declared) == str(running)


def _argv(launch_command: str | None) -> tuple[str, ...] | None:
    if not launch_command:
        return None
    try:
        return tuple(shlex.split(launch_command))
    except ValueError:
        return None


def _clean(details: Mapping[str, Any]) -> dict[str, Any]:
    """Details without empty entries (the JSON report stays readable for hundreds of servers)."""
    return {key: value for key, value in details.items() if value is not None}


# -- the command -------------------------------------------------------------------------------------
