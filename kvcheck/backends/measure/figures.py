"""Turn what one engine said (log ranks, server info) into a role's pool figure and findings.

Pure functions, no processes: the rules of fail-closed reading live here so they can be tested on
their own. The role's pool is the minimum over every rank that reported one (attention-DP ranks,
pipeline stages, DP replicas) and over both sources; a disagreement is reported, never averaged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from kvcheck.backends.measure import rules as _rules  # noqa: F401  (registers KV3xx)
from kvcheck.engines import get_engine
from kvcheck.engines.base import ServerInfo
from kvcheck.model import Finding, RoleTarget
from kvcheck.policy.registry import finding


@dataclass(frozen=True)
class RankPool:
    """One rank's final `max_total_num_tokens=` line (tokens)."""

    rank: str  # the log tag, e.g. "DP1 TP4" ("" for a TP1 launch)
    pool_tokens: int
    context_len: int | None = None


@dataclass(frozen=True)
class EngineReport:
    """Everything one boot produced that bears on the verdict."""

    ranks: tuple[RankPool, ...] = ()
    server: ServerInfo | None = None
    server_error: str | None = None  # why /server_info could not be read
    below_context_warnings: tuple[str, ...] = ()  # SGLang's own "fewer than --context-length" lines
    below_context_pools: tuple[int, ...] = ()  # the pool each of those warnings states (every rank prints one)
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RoleFigures:
    """The role's figures after cross-checking; pool_tokens None means no complete set (KV301)."""

    pool_tokens: int | None
    max_input_tokens: int | None
    context_len: int | None
    engine_version: str | None
    findings: tuple[Finding, ...]
    details: Mapping[str, Any]


def _same_version(declared: str, booted: str) -> bool:
    try:
        return Version(declared) == Version(booted)
    except InvalidVersion:
        return declared.strip() == booted.strip()


def _dp_rank_findings(target: RoleTarget, report: EngineReport) -> list[Finding]:
    """KV301/KV310 when some data-parallel ranks did not state their pool."""
    role = target.name
    server = report.server
    found: list[Finding] = []
    # Every data-parallel rank (attention DP or replicas) has its own pool; the log's final line
    # comes from DP0 only, so the others rest on /server_info's per-rank token_capacity.
    expected_dp = get_engine(target.engine).data_parallel_ranks(target.args)
    stated_dp = len(server.dp_token_capacities) if server is not None else 0
    if expected_dp > 1 and server is not None and 0 < stated_dp < expected_dp:
        found.append(
            finding(
                "KV301",
                role,
                f"only {stated_dp} of the role's {expected_dp} data-parallel ranks stated their pool in "
                f"{server.endpoint}; the others were not measured",
                hint="keep the log (--logs-dir) and check that every DP rank's scheduler started",
                location=target.location,
            )
        )
    elif expected_dp > 1 and stated_dp == 0 and len(report.ranks) < expected_dp:
        found.append(
            finding(
                "KV310",
                role,
                f"the role has {expected_dp} data-parallel ranks but neither its log nor its server-info "
                "endpoint states each rank's pool; the pool rests on the ranks that did",
                hint="measure with a release whose /server_info lists internal_states (0.5.x)",
            )
        )
    if server is not None:
        missing_ranks = [note for note in server.notes if "DP ranks" in note]
        if missing_ranks and not 0 < stated_dp < expected_dp:
            found.append(
                finding(
                    "KV310",
                    role,
                    f"{server.endpoint}: {missing_ranks[0]}; the pool is the smallest figure stated",
                    hint="keep the log (--logs-dir) to see every rank's allocation",
                )
            )
    return found


def judge_figures(target: RoleTarget, report: EngineReport) -> RoleFigures:
    """Cross-check log and server figures for one role; the smaller figure wins (fail closed)."""
    role = target.name
    found: list[Finding] = []
    details: dict[str, Any] = dict(report.extra)
    server = report.server

    # Every rank's own figures count: the final lines (tp_rank 0 of each stage/replica) and the
    # "KV pool holds N tokens" warning each rank prints; the smallest is the pool (fail closed).
    log_pool = min((*(r.pool_tokens for r in report.ranks), *report.below_context_pools), default=None)
    server_pool = server.pool_tokens if server is not None else None
    details["log_ranks"] = [
        {"rank": r.rank or "TP0", "pool_tokens": r.pool_tokens, "context_len": r.context_len}
        for r in report.ranks
    ]
    if server is not None:
        details["server_info"] = {
            "endpoint": server.endpoint,
            "max_total_num_tokens": server.max_total_num_tokens,
            "dp_token_capacities": list(server.dp_token_capacities),
            "max_req_input_len": server.max_req_input_len,
            "version": server.version,
        }
    elif report.server_error:
        details["server_info_error"] = report.server_error

    found += _dp_rank_findings(target, report)
    pools = [p for p in (log_pool, server_pool) if p is not None]
    pool = min(pools) if pools else None
    if log_pool is not None and server is not None and server_pool is not None and log_pool != server_pool:
        found.append(
            finding(
                "KV310",
                role,
                f"the startup log gives a pool of {log_pool:,} tokens (minimum over "
                f"{len(report.ranks)} rank line{'s' if len(report.ranks) != 1 else ''}) but {server.endpoint} "
                f"gives {server_pool:,}; using the smaller, {pool:,}",
                hint="keep the log (--logs-dir) and compare the ranks' max_total_num_tokens lines",
            )
        )
    elif pool is not None and log_pool is None:
        found.append(
            finding(
                "KV310",
                role,
                f"the startup log shows no max_total_num_tokens line; the pool ({pool:,} tokens) comes from "
                f"{server.endpoint} alone"
                if server is not None
                else "the startup log shows no pool line",
                hint="measure with --log-level info (the default) so the log can confirm the figure",
            )
        )
    elif pool is not None and server_pool is None:
        reason = f" ({report.server_error})" if report.server_error else ""
        found.append(
            finding(
                "KV310",
                role,
                f"the server-info endpoint could not be read{reason}; the pool ({pool:,} tokens) comes "
                "from the startup log alone",
                hint="let the engine serve HTTP on the loopback port kvcheck passes (--host/--port)",
            )
        )
    if pool is None:
        found.append(
            finding(
                "KV301",
                role,
                "the engine gave no pool figure: no max_total_num_tokens line in its log and no "
                "answer from its server-info endpoint"
                + (f" ({report.server_error})" if report.server_error else ""),
                hint="check the engine log (--logs-dir DIR keeps it); --log-level must be info or lower",
                location=target.location,
            )
        )

    version = server.version if server is not None else None
    if target.engine_version is not None:
        if version is None:
            found.append(
                finding(
                    "KV303",
                    role,
                    f"could not confirm the engine's version (the manifest declares {target.engine_version}): "
                    "the server-info endpoint did not say",
                    hint="let the engine serve on loopback so kvcheck can read /server_info",
                    location=target.arg_location("engine_version"),
                )
            )
        elif not _same_version(target.engine_version, version):
            found.append(
                finding(
                    "KV303",
                    role,
                    f"{get_engine(target.engine).label} {version} booted, but the manifest declares "
                    f"{target.engine_version}: the figures are not those of the release you deploy",
                    hint=f"install {target.engine}=={target.engine_version} on this host, or set engine.version: "
                    f"'{version}' if that is what you deploy",
                    location=target.arg_location("engine_version"),
                )
            )

    if report.below_context_warnings:
        found.append(
            finding(
                "KV314",
                role,
                "SGLang warned: "
                + report.below_context_warnings[0]
                + (
                    f" ({len(report.below_context_warnings)} ranks)"
                    if len(report.below_context_warnings) > 1
                    else ""
                ),
                hint="lower --context-length, raise --mem-fraction-static or use more GPUs per role",
                location=target.location,
            )
        )

    contexts = [r.context_len for r in report.ranks if r.context_len is not None]
    context_len = min(contexts) if contexts else (server.served_context_len if server is not None else None)
    return RoleFigures(
        pool_tokens=pool,
        max_input_tokens=get_engine(target.engine).admission_bound(
            server.max_req_input_len if server is not None else None, context_len, pool, target.args, version,
            target.env),
        context_len=context_len,
        engine_version=version,
        findings=tuple(found),
        details=details,
    )


def estimate_gap(measured_tokens: int, estimate_tokens: int) -> float:
    """Relative gap of an estimate from the measurement (0.12 = 12 %)."""
    return abs(estimate_tokens - measured_tokens) / max(measured_tokens, 1)


def compare_estimate(role: str, measured_tokens: int | None, estimate_tokens: int | None) -> list[Finding]:
    """KV304 when the estimate misses the measured pool by more than 10 %."""
    if measured_tokens is None or estimate_tokens is None:
        return []
    gap = estimate_gap(measured_tokens, estimate_tokens)
    if gap <= 0.10:
        return []
    return [
        finding(
            "KV304",
            role,
            f"the estimate ({estimate_tokens:,} tokens) is {gap:.1%} away from the measured pool "
            f"({measured_tokens:,} tokens)",
            hint="trust the measurement; calibrate the GPU profile or estimate overrides before relying on "
            "--mode estimate or `kvcheck plan` for this model",
        )
    ]
