"""`kvcheck verify --launcher kubernetes --dry-run`: the objects verify would create, as YAML.

Nothing is created and no cluster is contacted: the manifest (or deployment files) is loaded and
checked as verify checks it, every selected role is rendered as `start()` would render it, and the
text goes to stdout (secret values redacted).
"""

from __future__ import annotations

from kvcheck.commands.verify import VerifyOptions
from kvcheck.errors import InputError
from kvcheck.inputs.roles import select_roles


def dry_run(options: VerifyOptions) -> str:
    """The YAML of every object a `--launcher kubernetes` run of these options would create."""
    from kvcheck.backends.measure.backend import check_measurable
    from kvcheck.backends.measure.launchers.kubernetes.dryrun import dry_run_text
    from kvcheck.backends.measure.launchers.kubernetes.settings import settings_from
    from kvcheck.backends.measure.launchers.kubernetes.templates import pod_templates
    from kvcheck.inputs.load import load_inputs

    if options.mode != "measure":
        raise InputError("--dry-run shows what measure mode would create; it does not apply to --mode estimate")
    loaded = load_inputs(options.inputs or (str(options.manifest),), options.overrides)
    spec = getattr(loaded.manifest, "launcher", None)
    chosen = options.launcher or getattr(spec, "kind", None) or "local"
    if chosen != "kubernetes":
        raise InputError(
            f"--dry-run prints the Kubernetes objects a run would create; the launcher here is {chosen}",
            hint="add --launcher kubernetes (or launcher.kind: kubernetes in the manifest)",
        )
    targets = select_roles(loaded.targets, options.roles, loaded.display_path)
    check_measurable(targets, loaded.display_path, need_gpus=False)
    return dry_run_text(
        targets,
        settings_from(getattr(spec, "kubernetes", None)),
        timeout_s=options.timeout_s,
        dummy_weights=options.dummy_weights,
        templates=pod_templates(targets),
    )
