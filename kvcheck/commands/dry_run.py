"""`kvcheck verify --dry-run`: what a run would create (the Kubernetes launcher's objects, as YAML).

Nothing is created and no cluster is contacted: the manifest (or deployment files) is loaded and
checked as verify checks it, and the chosen launcher renders every selected role as `start()` would
(`Launcher.dry_run`; secret values redacted); the text goes to stdout.
"""

from __future__ import annotations

from kvcheck.commands.verify import VerifyOptions
from kvcheck.errors import InputError
from kvcheck.inputs.roles import select_roles


def dry_run(options: VerifyOptions) -> str:
    """The text of what a run of these options would create, from the launcher that can show it."""
    from kvcheck.backends.measure.backend import check_measurable
    from kvcheck.backends.measure.launchers import LAUNCHERS, build_launcher, chosen_kind
    from kvcheck.inputs.load import load_inputs

    if options.mode != "measure":
        raise InputError("--dry-run shows what measure mode would create; it does not apply to --mode estimate")
    loaded = load_inputs(options.inputs or (str(options.manifest),), options.overrides)
    spec = getattr(loaded.manifest, "launcher", None)
    chosen = chosen_kind(options.launcher, spec)
    launcher = build_launcher(chosen, spec, gpu_check=options.gpu_check)
    if launcher.dry_run_shows is None:
        showing = {kind: shows for kind, load in LAUNCHERS.items() if (shows := load().dry_run_shows)}
        raise InputError(
            f"--dry-run prints {' or '.join(showing.values())} a run would create; the launcher here is {chosen}",
            hint="add "
            + " or ".join(f"--launcher {kind} (or launcher.kind: {kind} in the manifest)" for kind in showing),
        )
    targets = select_roles(loaded.targets, options.roles, loaded.display_path)
    check_measurable(targets, loaded.display_path, need_gpus=False)
    return launcher.dry_run(targets, timeout_s=options.timeout_s, dummy_weights=options.dummy_weights)
