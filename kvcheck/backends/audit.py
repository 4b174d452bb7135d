"""Audit live SGLang servers: ask each for its pool and limits, and judge it like any other role.

The flow: endpoints (URLs, a fleet file, or a manifest's roles paired with URLs) -> one
`SglangClient` per endpoint, run on a bounded set of threads -> one RoleTarget and one
PoolMeasurement per endpoint -> `app.judge`. Threads, not asyncio: the work is three blocking HTTP
GETs per server, the client stays the same synchronous client the measure backend uses on loopback,
and a fixed number of worker threads bounds the concurrency with one number (`--concurrency`).

A server that cannot be audited is reported (KV306, exit 3) next to the others; it never passes.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import os
import queue
import shlex
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from rich.console import Console

import kvcheck.backends.audit_rules  # noqa: F401  (defines KV306-KV308)
from kvcheck.engines.sglang.client import (
    ServerInfo,
    SglangClient,
    display_url,
    make_ssl_context,
    validate_base_url,
)
from kvcheck.errors import EndpointError, InputError, InputIssue
from kvcheck.inputs.textfile import read_text_file
from kvcheck.model import Finding, Location, PoolMeasurement, RoleTarget
from kvcheck.policy.registry import finding
from kvcheck.redact import REDACTED

if TYPE_CHECKING:
    from kvcheck.model import Report

MAX_FLEET_BYTES = 4 * 1024 * 1024
FLEET_ENTRY_KEYS = ("url", "context_length", "role")
BACKOFF_S = 0.5  # first retry waits this long, then doubles

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Endpoint:
    """One live server to audit; `context_length` (tokens) overrides the command-line window."""

    name: str
    url: str
    role: str | None = None
    context_length: int | None = None
    location: Location | None = None  # where a fleet file declares it


# -- endpoints -----------------------------------------------------------------------------------


def endpoints_from_urls(urls: Iterable[str]) -> list[Endpoint]:
    """Command-line URLs, each named by its URL; every bad URL is reported in one pass."""
    endpoints, problems = [], []
    for url in urls:
        try:
            parsed = validate_base_url(url)
        except InputError as exc:
            problems.append(exc.message)
            continue
        endpoints.append(Endpoint(name=display_url(parsed), url=str(parsed)))
    if problems:
        raise InputError("\n".join(problems), hint="each URL is a server's base, e.g. http://10.0.0.5:30000")
    return endpoints


def parse_fleet_file(path: str | Path) -> list[Endpoint]:
    """A fleet file: one URL per line (`#` comments, blank lines), or a YAML mapping
    `name: URL` / `name: {url: URL, context_length: N, role: R}` (a YAML list of URLs also works)."""
    path = Path(path)
    display = str(path)
    text = _read_fleet(path, display)
    lines = text.splitlines()
    content = [(n, _strip_comment(line)) for n, line in enumerate(lines, 1)]
    content = [(n, line) for n, line in content if line.strip()]
    if not content:
        raise InputError(f"{display}: the fleet file lists no servers")
    if path.suffix.lower() in (".yaml", ".yml") or any(_looks_like_yaml(line) for _, line in content):
        endpoints, issues = _parse_fleet_yaml(text, display)
    else:
        endpoints, issues = _parse_fleet_lines(content, lines, display)
    issues.extend(_duplicate_issues(endpoints, display))
    if issues:
        count = len(issues)
        body = "\n".join(issue.render() for issue in issues)
        raise InputError(
            f"{count} error{'s' if count != 1 else ''} in fleet file:\n{body}",
            hint="a fleet file is one URL per line, or YAML mapping names to URLs (see docs/audit.md)",
        )
    return endpoints


def endpoints_from_manifest(manifest_targets: Sequence[RoleTarget], pairs: Sequence[str]) -> list[Endpoint]:
    """`--endpoint ROLE=URL` pairs, checked against the manifest's roles (all problems in one pass)."""
    known = {t.name: t for t in manifest_targets}
    endpoints: list[Endpoint] = []
    problems: list[str] = []
    seen: dict[str, str] = {}
    for pair in pairs:
        role, sep, url = pair.partition("=")
        role, url = role.strip(), url.strip()
        if not sep or not role or not url:
            problems.append(f"--endpoint {pair!r}: expected ROLE=URL, e.g. prefill=http://10.0.0.5:30000")
            continue
        if role not in known:
            close = difflib.get_close_matches(role, list(known), n=1)
            suggestion = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(
                f"--endpoint {role}=...: the manifest has no role '{role}'{suggestion}; "
                f"its roles are: {', '.join(known)}"
            )
            continue
        if role in seen:
            problems.append(f"--endpoint {role}=...: role '{role}' is given twice")
            continue
        try:
            parsed = validate_base_url(url)
        except InputError as exc:
            problems.append(f"--endpoint {role}=...: {exc.message}")
            continue
        seen[role] = str(parsed)
        endpoints.append(
            Endpoint(name=role, url=str(parsed), role=role, context_length=known[role].context_length)
        )
    if problems:
        raise InputError("\n".join(problems))
    return endpoints


def _read_fleet(path: Path, display: str) -> str:
    return read_text_file(path, display, kind="fleet file", max_bytes=MAX_FLEET_BYTES)


def _strip_comment(line: str) -> str:
    """A line without its `#` comment (a `#` starts one at the line start or after a blank)."""
    if line.lstrip().startswith("#"):
        return ""
    for index, char in enumerate(line):
        if char == "#" and index > 0 and line[index - 1] in " \t":
            return line[:index].rstrip()
    return line.rstrip()


def _looks_like_yaml(line: str) -> bool:
    """YAML keys end in `:` followed by a blank or the line end; URLs have `://` and `:port`."""
    stripped = line.strip()
    return stripped.startswith(("- ", "{", "[")) or any(
        char == ":" and (index + 1 == len(stripped) or stripped[index + 1] in " \t")
        for index, char in enumerate(stripped)
    )


def _parse_fleet_lines(
    content: list[tuple[int, str]], lines: list[str], display: str
) -> tuple[list[Endpoint], list[InputIssue]]:
    endpoints, issues = [], []
    for number, line in content:
        column = len(lines[number - 1]) - len(lines[number - 1].lstrip()) + 1
        words = line.split()
        if len(words) != 1:
            issues.append(
                InputIssue(display, number, column, "", f"expected one URL per line, got {line.strip()!r}")
            )
            continue
        try:
            parsed = validate_base_url(words[0])
        except InputError as exc:
            issues.append(InputIssue(display, number, column, "", exc.message))
            continue
        name = display_url(parsed)
        endpoints.append(Endpoint(name=name, url=str(parsed), location=Location(display, number, column)))
    return endpoints, issues


def _parse_fleet_yaml(text: str, display: str) -> tuple[list[Endpoint], list[InputIssue]]:
    from kvcheck.inputs.yamlpos import load_yaml_with_positions

    data, positions, issues = load_yaml_with_positions(text, display)
    endpoints: list[Endpoint] = []

    def where(path: tuple[str | int, ...], *, key: bool = False) -> tuple[int | None, int | None]:
        found = positions.of_key(path) if key else positions.of_value(path)
        return found or (None, None)

    def url_of(value: Any, path: tuple[str | int, ...], label: str) -> str | None:
        if not isinstance(value, str):
            issues.append(InputIssue(display, *where(path), label, f"expected a URL, got {_kind(value)}"))
            return None
        try:
            return str(validate_base_url(value))
        except InputError as exc:
            issues.append(InputIssue(display, *where(path), label, exc.message))
            return None

    if isinstance(data, list):
        for index, item in enumerate(data):
            url = url_of(item, (index,), f"[{index}]")
            if url is not None:
                endpoints.append(
                    Endpoint(name=display_url(url), url=url, location=Location(display, *where((index,))))
                )
        return endpoints, issues
    if not isinstance(data, dict):
        issues.append(
            InputIssue(display, 1, 1, "", "a YAML fleet file maps server names to URLs (or lists URLs)")
        )
        return endpoints, issues

    for name, value in data.items():
        location = Location(display, *where((name,), key=True))
        if isinstance(value, str):
            url = url_of(value, (name,), name)
            if url is not None:
                endpoints.append(Endpoint(name=name, url=url, location=location))
            continue
        if not isinstance(value, dict):
            issues.append(
                InputIssue(
                    display,
                    *where((name,)),
                    name,
                    f"expected a URL or a mapping with url, got {_kind(value)}",
                )
            )
            continue
        for key in value:
            if key not in FLEET_ENTRY_KEYS:
                close = difflib.get_close_matches(str(key), FLEET_ENTRY_KEYS, n=1)
                suggestion = f" (did you mean '{close[0]}'?)" if close else ""
                issues.append(
                    InputIssue(
                        display,
                        *where((name, key), key=True),
                        f"{name}.{key}",
                        f"unknown key{suggestion}; allowed: {', '.join(FLEET_ENTRY_KEYS)}",
                    )
                )
        if "url" not in value:
            issues.append(InputIssue(display, *where((name,), key=True), name, "missing url"))
            url = None
        else:
            url = url_of(value["url"], (name, "url"), f"{name}.url")
        context = value.get("context_length")
        if context is not None and (isinstance(context, bool) or not isinstance(context, int) or context < 1):
            issues.append(
                InputIssue(
                    display,
                    *where((name, "context_length")),
                    f"{name}.context_length",
                    f"expected a positive number of tokens, got {context!r}",
                )
            )
            context = None
        role = value.get("role")
        if role is not None and (not isinstance(role, str) or not role.strip()):
            issues.append(
                InputIssue(display, *where((name, "role")), f"{name}.role", f"expected a name, got {role!r}")
            )
            role = None
        if url is not None:
            endpoints.append(
                Endpoint(name=name, url=url, role=role, context_length=context, location=location)
            )
    return endpoints, issues


def _duplicate_issues(endpoints: Sequence[Endpoint], display: str) -> list[InputIssue]:
    issues, first_seen = [], {}
    for endpoint in endpoints:
        key = endpoint.url.rstrip("/")
        if key in first_seen:
            where = endpoint.location or Location(display)
            issues.append(
                InputIssue(
                    display,
                    where.line,
                    where.column,
                    "",
                    f"{display_url(key)} is listed twice (first as {first_seen[key]})",
                )
            )
        else:
            first_seen[key] = endpoint.name
    return issues


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"{value!r} ({type(value).__name__})"


# -- the audit ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditOutcome:
    """One endpoint's audit: its target (window, headroom, args) and its measurement."""

    target: RoleTarget
    measurement: PoolMeasurement


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
    if min_headroom <= 0:
        raise InputError(f"min headroom must be positive, got {min_headroom:g}")
    context = make_ssl_context(verify)  # built once: loading the CA store costs tens of ms
    by_role = {t.name: t for t in manifest_targets}
    console = Console(stderr=True)
    show = console.is_terminal if progress is None else (progress and console.is_terminal)

    def one(endpoint: Endpoint) -> AuditOutcome:
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
        )

    if not show:
        outcomes = run_bounded(endpoints, one, concurrency)
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
            outcomes = run_bounded(endpoints, one, concurrency, on_done=lambda: bar.advance(task))
    return [o.target for o in outcomes], [o.measurement for o in outcomes]


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
) -> AuditOutcome:
    """One endpoint: ask it, then build its target and measurement (failures become KV306)."""
    try:
        with SglangClient(
            endpoint.url,
            timeout_s=timeout_s,
            verify=verify,
            token=token,
            retries=retries,
            backoff_s=BACKOFF_S,
            transport=transport,
        ) as client:
            info = client.server_info()
    except EndpointError as exc:
        return _unaudited(endpoint, exc, context_length, min_headroom, manifest_target)
    return _audited(endpoint, info, context_length, min_headroom, manifest_target)


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
) -> RoleTarget:
    if manifest_target is not None:
        return manifest_target
    # An unknown window is 0 tokens here only so that the role can be listed; its KV306 finding
    # makes the role `error` (exit 3), so the 0 never lets it pass.
    return RoleTarget(
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
) -> AuditOutcome:
    window, source = _window(endpoint, context_length, manifest_target, info.served_context_len)
    target = _target(endpoint, window, min_headroom, manifest_target, info)
    findings: list[Finding] = []
    if window is None:
        findings.append(
            finding(
                "KV306",
                target.name,
                f"{info.url}: the server does not state the context window it serves "
                "(no /v1/models max_model_len, no sglang:context_len gauge), so its pool cannot be judged",
                hint="pass --context-length N (or context_length in the fleet file)",
                location=_where(endpoint, manifest_target),
            )
        )
    pool_tokens, disagreements = _cross_check(info)
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
        findings.extend(_manifest_drift(manifest_target, info))
    details = {
        "url": info.url,
        "role": endpoint.role,
        "info_endpoint": info.endpoint,
        "redirected_to": info.redirected_to,
        "context_source": source,
        "served_context_len": info.served_context_len,
        "context_length_arg": info.context_length_arg,
        "max_total_num_tokens": info.max_total_num_tokens,
        "dp_token_capacities": list(info.dp_token_capacities) or None,
        "swa_token_capacities": list(info.swa_token_capacities) or None,
        "metrics": dict(info.metrics) or None,
        "notes": list(info.notes) or None,
    }
    measurement = PoolMeasurement(
        role=target.name,
        source="audit",
        pool_tokens=pool_tokens,
        max_input_tokens=info.max_req_input_len,
        context_len=info.served_context_len,
        engine_version=info.version,
        resolved_args=dict(info.resolved_args),
        argv=_argv(info.launch_command),
        details=_clean(details),
        findings=tuple(findings),
    )
    return AuditOutcome(target, measurement)


def _cross_check(info: ServerInfo) -> tuple[int | None, list[str]]:
    """The pool to judge (the smallest figure the server states) and every disagreement found."""
    pool = info.pool_tokens
    texts: list[str] = []
    figures = [pool] if pool is not None else []
    ranks = info.dp_token_capacities
    if ranks and info.max_total_num_tokens is not None and info.max_total_num_tokens < min(ranks):
        texts.append(
            f"server info's max_total_num_tokens {info.max_total_num_tokens:,} is below every DP rank's "
            f"token_capacity (smallest {min(ranks):,})"
        )
        figures.append(info.max_total_num_tokens)
    gauge = info.metrics.get("sglang:max_total_num_tokens")
    if gauge is not None and pool is not None and int(gauge) != pool:
        texts.append(
            f"the sglang:max_total_num_tokens gauge says {int(gauge):,} tokens (smallest rank), "
            f"server info says {pool:,}"
        )
        figures.append(int(gauge))
    served_models = info.served_context_len if info.served_context_source == "/v1/models" else None
    gauge_ctx = info.metrics.get("sglang:context_len")
    if served_models is not None and gauge_ctx is not None and int(gauge_ctx) != served_models:
        texts.append(
            f"/v1/models serves max_model_len {served_models:,} but the sglang:context_len gauge says "
            f"{int(gauge_ctx):,}"
        )
    if (
        info.context_length_arg is not None
        and info.served_context_len is not None
        and info.context_length_arg != info.served_context_len
    ):
        texts.append(
            f"the server was started with --context-length {info.context_length_arg:,} but serves "
            f"a context of {info.served_context_len:,} tokens"
        )
    judged = min(figures) if figures else None
    if info.max_req_input_len is not None and judged is not None and info.max_req_input_len >= judged:
        texts.append(
            f"server info's max_req_input_len {info.max_req_input_len:,} is not below the pool of "
            f"{judged:,} tokens: the smallest rank refuses prompts that figure admits"
        )
    return judged, texts


def _manifest_drift(target: RoleTarget, info: ServerInfo) -> list[Finding]:
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
        differences.insert(0, f"SGLang version: manifest {target.engine_version}, server {info.version}")
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


@dataclass(frozen=True)
class AuditOptions:
    """Everything `kvcheck audit` takes, as the CLI collected it."""

    urls: tuple[str, ...] = ()
    fleet: Path | None = None
    context_length: int | None = None
    min_headroom: float | None = None  # None: the manifest's policy, else 1.0
    manifest: Path | None = None
    endpoints: tuple[str, ...] = ()  # ROLE=URL, with --manifest
    timeout_s: float = 10.0
    retries: int = 2
    concurrency: int = 32
    ca_bundle: Path | None = None
    insecure: bool = False
    token_env: str | None = None
    strict: bool = False
    progress: bool | None = None  # None: only when stderr is a terminal


def read_token(token_env: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The bearer token from the named environment variable (never from the command line)."""
    if token_env is None:
        return None
    if not token_env or "=" in token_env:
        raise InputError(f"--token-env takes the NAME of an environment variable, got {token_env!r}")
    value = environ.get(token_env, "").strip()
    if not value:
        raise InputError(
            f"--token-env {token_env}: the environment variable is not set or empty",
            hint=f"export {token_env}=... before running kvcheck",
        )
    return value


def _verify_setting(options: AuditOptions, console: Console) -> bool | str:
    if options.insecure and options.ca_bundle is not None:
        raise InputError("--insecure and --ca-bundle contradict each other; choose one")
    if options.insecure:
        console.print(
            "kvcheck: warning: --insecure: TLS certificates are NOT verified; anyone on the path can "
            "impersonate the servers (and read the token)",
            style="bold yellow",
            highlight=False,
        )
        return False
    return str(options.ca_bundle) if options.ca_bundle is not None else True


def _warn_plain_http_token(endpoints: Sequence[Endpoint], console: Console) -> None:
    """A bearer token over plain HTTP to another machine can be read on the way: say so."""
    exposed = []
    for endpoint in endpoints:
        url = httpx.URL(endpoint.url)
        if url.scheme != "http":
            continue
        try:
            loopback = ipaddress.ip_address(url.host).is_loopback
        except ValueError:
            loopback = url.host == "localhost"
        if not loopback:
            exposed.append(endpoint.name)
    if exposed:
        names = ", ".join(exposed[:3]) + (f" and {len(exposed) - 3} more" if len(exposed) > 3 else "")
        console.print(
            f"kvcheck: warning: the token is sent over plain HTTP to {names}; use https:// where you can",
            style="yellow",
            highlight=False,
        )


def run_audit(options: AuditOptions) -> Report:
    """`kvcheck audit`: collect the endpoints, ask them, judge every server like a role."""
    from kvcheck import app
    from kvcheck.policy.rules import PolicyConfig

    console = Console(stderr=True)
    token = read_token(options.token_env)
    verify = _verify_setting(options, console)
    extra: list[Finding] = []
    manifest_targets: Sequence[RoleTarget] = ()
    if options.manifest is not None:
        from kvcheck.inputs.manifest.load import load_manifest

        if options.urls or options.fleet is not None:
            raise InputError(
                "--manifest takes its servers from --endpoint ROLE=URL, not from URLs or --fleet"
            )
        if not options.endpoints:
            raise InputError(
                "--manifest needs the live server of at least one role: --endpoint ROLE=URL",
                hint="e.g. --endpoint prefill=http://10.0.0.5:30000 --endpoint decode=http://10.0.0.6:30000",
            )
        if options.context_length is not None:
            raise InputError(
                "--context-length conflicts with --manifest: the manifest's context_length is the window"
            )
        loaded = load_manifest(options.manifest)
        policy = loaded.policy
        manifest_targets = loaded.targets
        if options.min_headroom is not None:
            policy = replace(policy, min_headroom=options.min_headroom)
            manifest_targets = app.with_min_headroom(manifest_targets, options.min_headroom)
        endpoints = endpoints_from_manifest(manifest_targets, options.endpoints)
        source = loaded.display_path
        window: int | None = loaded.manifest.context_length
        extra.extend(loaded.notes())
    else:
        if options.endpoints:
            raise InputError("--endpoint ROLE=URL pairs servers with a manifest's roles: it needs --manifest")
        endpoints = []
        if options.fleet is not None:
            endpoints.extend(parse_fleet_file(options.fleet))
        endpoints.extend(endpoints_from_urls(options.urls))
        if not endpoints:
            raise InputError(
                "nothing to audit",
                hint="give server URLs, --fleet FILE, or --manifest M --endpoint ROLE=URL",
            )
        if options.fleet is not None and options.urls:
            duplicates = _duplicate_issues(endpoints, "command line")
            if duplicates:
                raise InputError("\n".join(issue.message for issue in duplicates))
        policy = PolicyConfig(min_headroom=options.min_headroom if options.min_headroom is not None else 1.0)
        parts = ([str(options.fleet)] if options.fleet is not None else []) + list(options.urls)
        source = ", ".join(parts) if len(parts) <= 3 else f"{parts[0]} and {len(parts) - 1} more"
        window = options.context_length
    if token is not None:
        _warn_plain_http_token(endpoints, console)
    targets, measurements = audit_endpoints(
        endpoints,
        context_length=options.context_length,
        min_headroom=policy.min_headroom,
        timeout_s=options.timeout_s,
        retries=options.retries,
        concurrency=options.concurrency,
        verify=verify,
        token=token,
        progress=options.progress,
        manifest_targets=manifest_targets,
    )
    # A manifest role without a live server was not audited: fail closed rather than drop it.
    paired = {endpoint.role for endpoint in endpoints}
    for target in manifest_targets:
        if target.name not in paired:
            targets.append(target)
            measurements.append(
                PoolMeasurement(
                    role=target.name,
                    source="audit",
                    pool_tokens=None,
                    findings=(
                        finding(
                            "KV306",
                            target.name,
                            f"manifest role '{target.name}' has no --endpoint, so it was not audited",
                            hint=f"add --endpoint {target.name}=URL (every role of the manifest is checked)",
                            location=target.location,
                        ),
                    ),
                )
            )
    return app.judge(
        command="audit",
        mode="audit",
        source=source,
        targets=targets,
        measurements=measurements,
        policy=policy,
        strict=options.strict,
        extra_findings=extra,
        context_length=window,
    )
