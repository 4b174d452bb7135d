"""`kvcheck audit`: collect the endpoints, ask them (backends/audit.py), judge every server like a role.

Option conflicts and the warnings people must see (--insecure, a token over plain HTTP) live here,
not in the backend.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
from rich.console import Console

from kvcheck.backends.audit import audit_endpoints
from kvcheck.errors import InputError
from kvcheck.escape import one_line
from kvcheck.http import token_problem
from kvcheck.inputs.fleet import (
    Endpoint,
    duplicate_issues,
    endpoints_from_manifest,
    endpoints_from_urls,
    parse_fleet_file,
)
from kvcheck.model import Finding, PoolMeasurement, Report, RoleTarget
from kvcheck.policy.config import PolicyConfig
from kvcheck.policy.judge import judge, with_min_headroom
from kvcheck.policy.registry import finding
from kvcheck.policy.suppress import Gate, GateOptions


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
    gate: GateOptions | None = None  # --ignore-file, --baseline, --write-baseline


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
    problem = token_problem(token_env, value)
    if problem is not None:
        raise InputError(problem)
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
            exposed.append(one_line(endpoint.name))
    if exposed:
        names = ", ".join(exposed[:3]) + (f" and {len(exposed) - 3} more" if len(exposed) > 3 else "")
        # names from a fleet file, as written: not markup ("x[/]"), one line (a CI runner reads `::` lines)
        console.print(
            f"kvcheck: warning: the token is sent over plain HTTP to {names}; use https:// where you can",
            style="yellow",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )


@dataclass(frozen=True)
class _Scope:
    """What one audit covers: the servers, the policy, and what the report names as its source."""

    endpoints: list[Endpoint]
    policy: PolicyConfig
    source: str
    window: int | None  # the context length the report states
    manifest_targets: Sequence[RoleTarget] = ()
    notes: tuple[Finding, ...] = ()


def audit(options: AuditOptions) -> Report:
    """`kvcheck audit`: collect the endpoints, ask them, judge every server like a role."""
    console = Console(stderr=True)
    token = read_token(options.token_env)
    verify = _verify_setting(options, console)
    scope = _manifest_scope(options) if options.manifest is not None else _fleet_scope(options)
    gate = Gate.open(options.gate, scope.manifest_targets or ())  # before any server is asked
    if token is not None:
        _warn_plain_http_token(scope.endpoints, console)
    targets, measurements = audit_endpoints(
        scope.endpoints,
        context_length=options.context_length,
        min_headroom=scope.policy.min_headroom,
        timeout_s=options.timeout_s,
        retries=options.retries,
        concurrency=options.concurrency,
        verify=verify,
        token=token,
        progress=options.progress,
        manifest_targets=scope.manifest_targets,
    )
    # A manifest role without a live server was not audited: fail closed rather than drop it.
    for target, measurement in _unaudited_roles(scope):
        targets.append(target)
        measurements.append(measurement)
    report = judge(
        command="audit",
        mode="audit",
        source=scope.source,
        targets=targets,
        measurements=measurements,
        policy=scope.policy,
        strict=options.strict,
        extra_findings=list(scope.notes),
        context_length=scope.window,
        gate=gate,
    )
    # the bearer token is a secret wherever an answer or an error might quote it
    return replace(report, secrets=report.secrets | {token}) if token else report


def _manifest_scope(options: AuditOptions) -> _Scope:
    """--manifest M --endpoint ROLE=URL: the manifest's roles, each checked against its live server."""
    from kvcheck.inputs.manifest.load import load_manifest

    assert options.manifest is not None
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
    manifest_targets: Sequence[RoleTarget] = loaded.targets
    if options.min_headroom is not None:
        policy = replace(policy, min_headroom=options.min_headroom)
        manifest_targets = with_min_headroom(manifest_targets, options.min_headroom)
    return _Scope(
        endpoints=endpoints_from_manifest(manifest_targets, options.endpoints),
        policy=policy,
        source=loaded.display_path,
        window=loaded.manifest.context_length,
        manifest_targets=manifest_targets,
        notes=tuple(loaded.notes()),
    )


def _fleet_scope(options: AuditOptions) -> _Scope:
    """Server URLs and/or a --fleet file: each server judged on its own."""
    if options.endpoints:
        raise InputError("--endpoint ROLE=URL pairs servers with a manifest's roles: it needs --manifest")
    endpoints: list[Endpoint] = []
    if options.fleet is not None:
        endpoints.extend(parse_fleet_file(options.fleet))
    endpoints.extend(endpoints_from_urls(options.urls))
    if not endpoints:
        raise InputError(
            "nothing to audit",
            hint="give server URLs, --fleet FILE, or --manifest M --endpoint ROLE=URL",
        )
    if options.fleet is not None and options.urls:
        duplicates = duplicate_issues(endpoints, "command line")
        if duplicates:
            raise InputError("\n".join(issue.message for issue in duplicates))
    policy = PolicyConfig(min_headroom=options.min_headroom if options.min_headroom is not None else 1.0)
    parts = ([str(options.fleet)] if options.fleet is not None else []) + list(options.urls)
    source = ", ".join(parts) if len(parts) <= 3 else f"{parts[0]} and {len(parts) - 1} more"
    return _Scope(endpoints=endpoints, policy=policy, source=source, window=options.context_length)


def _unaudited_roles(scope: _Scope) -> list[tuple[RoleTarget, PoolMeasurement]]:
    """Manifest roles no --endpoint names: KV306, so they fail closed instead of dropping out."""
    paired = {endpoint.role for endpoint in scope.endpoints}
    return [
        (
            target,
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
            ),
        )
        for target in scope.manifest_targets
        if target.name not in paired
    ]
