"""`verify --launcher kubernetes --dry-run`: the objects a run would create, as YAML; nothing is created.

The text is what `start()` would send (the same `render_role`), with two differences a reader should
know: a LeaderWorkerSet's owner uid is a placeholder (the API server assigns it when the deadline Job
is created), and secret-looking values (env `HF_TOKEN`, `--api-key X`) are shown as REDACTED.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvcheck.backends.measure.launchers.kubernetes.render import new_run_id, render_run, to_yaml
from kvcheck.backends.measure.launchers.kubernetes.settings import KubernetesSettings, PodTemplates
from kvcheck.model import RoleTarget
from kvcheck.redact import REDACTED, is_secret_name, redact_argv


def _redact(node: Any) -> Any:
    """Env entries with secret names lose their value; command lines lose secret flags' values."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "env" and isinstance(value, list):
                out[key] = [
                    {**item, "value": REDACTED}
                    if isinstance(item, dict)
                    and "value" in item
                    and is_secret_name(str(item.get("name", "")))
                    else item
                    for item in value
                ]
            elif (
                key in ("command", "args")
                and isinstance(value, list)
                and all(isinstance(v, str) for v in value)
            ):
                out[key] = redact_argv(value)
            else:
                out[key] = _redact(value)
        return out
    if isinstance(node, list):
        return [_redact(item) for item in node]
    return node


def dry_run_text(
    targets: Sequence[RoleTarget],
    settings: KubernetesSettings,
    *,
    timeout_s: float,
    grace_s: float = 15.0,
    dummy_weights: bool = False,
    templates: Mapping[str, PodTemplates] | None = None,
    run_id: str | None = None,
) -> str:
    """Every role's objects in creation order, one YAML document each, after a comment header."""
    run_id = run_id or new_run_id()
    rendered = render_run(
        targets,
        settings,
        run_id=run_id,
        timeout_s=timeout_s,
        grace_s=grace_s,
        dummy_weights=dummy_weights,
        templates=templates,
    )
    objects = [_redact(obj) for role in rendered for obj in role.objects]
    roles = ", ".join(
        f"{r.role} ({r.kind}, {r.nnodes} x {r.gpus_per_node} {settings.gpu_resource})" for r in rendered
    )
    header = (
        f"# kvcheck verify --launcher kubernetes --dry-run: nothing was created.\n"
        f"# namespace {settings.namespace}, run id {run_id}; roles: {roles}\n"
    )
    return header + to_yaml(objects)
