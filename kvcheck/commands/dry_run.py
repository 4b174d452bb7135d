"""`kvcheck verify --dry-run`: what a run would create (the Kubernetes launcher's objects, as YAML).

Nothing is created and no cluster is contacted: the manifest (or deployment files) is loaded and
checked as verify checks it, and the chosen launcher renders every selected role as `start()` would
(`Launcher.dry_run`; secret values redacted); the text goes to stdout.

A role the launcher refuses before anything starts (`Launcher.refuse`: a Ray-group role, a CPU role on
a GPU launcher) would not start in a run either: then the dry run gives the report a run would give
for those roles (KV301, exit 3) instead of objects that could not start.
"""

from __future__ import annotations

from dataclasses import replace

from kvcheck.commands.verify import VerifyOptions, judge_measurements, measure_backend
from kvcheck.errors import InputError
from kvcheck.inputs.roles import select_roles
from kvcheck.model import Report
from kvcheck.policy.suppress import Gate


def dry_run(options: VerifyOptions) -> str | Report:
    """The text of what a run of these options would create, from the launcher that can show it; the
    run's report of the refused roles when the launcher refuses any of them."""
    from kvcheck.backends.measure.backend import check_measurable
    from kvcheck.backends.measure.launchers import LAUNCHERS, chosen_kind
    from kvcheck.inputs.load import load_inputs

    if options.mode != "measure":
        raise InputError("--dry-run shows what measure mode would create; it does not apply to --mode estimate")
    loaded = load_inputs(options.inputs or (str(options.manifest),), options.overrides)
    spec = getattr(loaded.manifest, "launcher", None)
    chosen = chosen_kind(options.launcher, spec)
    backend = measure_backend(replace(options, launcher=chosen), spec)
    launcher = backend.launcher
    if launcher.dry_run_shows is None:
        showing = {kind: shows for kind, load in LAUNCHERS.items() if (shows := load().dry_run_shows)}
        raise InputError(
            f"--dry-run prints {' or '.join(showing.values())} a run would create; the launcher here is {chosen}",
            hint="add "
            + " or ".join(f"--launcher {kind} (or launcher.kind: {kind} in the manifest)" for kind in showing),
        )
    targets = select_roles(loaded.targets, options.roles, loaded.display_path)
    gate = Gate.open(options.gate, targets)
    check_measurable(targets, loaded.display_path, need_gpus=False)
    # rendered first: settings no role can run with are input errors (exit 2), as a run's are
    text = launcher.dry_run(targets, timeout_s=options.timeout_s, dummy_weights=options.dummy_weights)
    refused = [(t, m) for t, m in zip(targets, backend.refused(targets), strict=True)]
    if not any(m is not None for _, m in refused):
        return text
    kept = [(t, m) for t, m in refused if m is not None]
    return judge_measurements(
        options, loaded, [t for t, _ in kept], [m for _, m in kept], backend=backend, gate=gate
    )
