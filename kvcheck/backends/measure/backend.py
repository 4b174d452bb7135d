"""Measure mode: boot every role with the real engine and its production arguments, read its pool.

Where each engine runs is the launcher's choice (`launchers/`: this host, or a Slurm allocation).
Roles boot at the same time unless the launcher says a role must wait for an earlier one (locally: a
shared GPU; manifest order is kept). Ctrl-C or SIGTERM stops every engine, with its children, before
kvcheck exits (130 or 143).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from kvcheck.backends.base import Backend
from kvcheck.backends.measure import rules as _rules  # noqa: F401  (registers KV3xx)
from kvcheck.backends.measure.boot import BootSettings, RoleBoot, log_file_name, refusal_measurement
from kvcheck.backends.measure.figures import compare_estimate
from kvcheck.backends.measure.launchers.base import Launcher
from kvcheck.backends.measure.launchers.local import GPU_SETTLE_S, LocalLauncher
from kvcheck.backends.measure.progress import BootProgress, literal
from kvcheck.errors import InputError, InputIssue, KvcheckError, ManifestError
from kvcheck.model import Finding, PoolMeasurement, RoleTarget
from kvcheck.policy.registry import finding


class _Terminated(Exception):
    """SIGTERM arrived while engines ran; raised in the main thread after they are stopped."""


# Signals that would end kvcheck while its engines, in their own sessions, run on: SIGTERM (a CI
# job cancelled), SIGHUP (the terminal or SSH session closed), SIGQUIT. Each stops the engines
# first; kvcheck then dies of the signal it got. SIGKILL cannot be caught (docs/measure.md).
_STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@contextmanager
def _sigterm_cancels(cancel: threading.Event) -> Iterator[dict[str, Any]]:
    """While engines run, SIGTERM/SIGHUP/SIGQUIT set `cancel` instead of killing kvcheck (and orphaning
    engines); `state["signal"]` records which one, to die of it once the engines are gone."""
    state: dict[str, Any] = {"terminated": False, "signal": None}
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def on_signal(signum: int, frame: Any) -> None:
        state["terminated"] = True
        state["signal"] = state["signal"] or signum
        cancel.set()

    previous = {}
    for signum in _STOPPING_SIGNALS:
        handler = signal.getsignal(signum)
        if handler is signal.SIG_IGN:
            continue  # an ignored signal (nohup) stays ignored
        previous[signum] = handler
        signal.signal(signum, on_signal)
    try:
        yield state
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _check_log_names(targets: Sequence[RoleTarget]) -> None:
    """Two roles must not write one --logs-dir file (names that differ only in unsafe characters)."""
    seen: dict[str, str] = {}
    for target in targets:
        name = log_file_name(target.name)
        if name in seen:
            raise InputError(
                f"roles '{seen[name]}' and '{target.name}' would both write the log {name}",
                hint="rename one of the roles (letters, digits, '.', '_' and '-' are kept as they are)",
            )
        seen[name] = target.name


def make_run_folder(logs_dir: Path) -> Path:
    """This run's own folder in --logs-dir, `<UTC time>-<random>`: made with mkdir, which neither
    reuses a folder nor follows a link already there, and readable by its owner only. Runs sharing one
    --logs-dir each write their own folder (issue 14)."""
    try:
        logs_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(64):
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            folder = logs_dir / f"{stamp}-{secrets.token_hex(3)}"
            try:
                folder.mkdir(mode=0o700)
            except FileExistsError:
                continue
            return folder
        raise FileExistsError(errno.EEXIST, "no unused run folder name after 64 tries")
    except OSError as exc:
        raise InputError(
            f"--logs-dir {logs_dir}: cannot create this run's folder: {exc.strerror or exc}",
            hint="pass a folder kvcheck may create and write",
        ) from exc


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass  # it holds logs (or is gone): kept


class _RoleThreads:
    """What one run's role threads share with the main thread: per role, its result or error and
    whether it began and ended; one cancel event for all."""

    def __init__(self, targets: list[RoleTarget], waits: list[list[int]], settings: BootSettings) -> None:
        self.targets = targets
        self.settings = settings  # this run's: logs_dir is the run's own folder
        self.waits = waits  # per role: the earlier roles whose engines must be gone before it starts
        self.results: list[PoolMeasurement | None] = [None] * len(targets)
        self.errors: list[BaseException | None] = [None] * len(targets)
        self.done = [threading.Event() for _ in targets]
        self.begun = [threading.Event() for _ in targets]
        self.cancel = threading.Event()


class MeasureBackend(Backend):
    """Boots each role's engine through a launcher and reads the pool it allocated (docs/measure.md).

    `launcher` defaults to the local launcher built from `gpu_check`, `nvml` and `gpu_settle_s`.
    """

    mode = "measure"
    offline_hints = True  # a measured role's hints stay on local files

    def check_targets(self, targets: Sequence[RoleTarget], source: str) -> None:
        check_measurable(targets, source, need_gpus=self.launcher.needs_gpu_list)

    def __init__(
        self,
        *,
        timeout_s: float = 1800,
        logs_dir: Path | None = None,
        gpu_check: bool = True,
        dummy_weights: bool = False,
        progress: bool | None = None,
        estimator: Backend | None = None,
        grace_s: float = 15.0,
        nvml: Any = None,
        ready_wait_s: float = 10.0,
        gpu_settle_s: float = GPU_SETTLE_S,
        launcher: Launcher | None = None,
    ) -> None:
        if timeout_s <= 0 or grace_s < 0:
            raise ValueError("timeout_s must be positive and grace_s not negative")
        self.settings = BootSettings(
            timeout_s=float(timeout_s),
            grace_s=float(grace_s),
            logs_dir=Path(logs_dir) if logs_dir is not None else None,
            dummy_weights=dummy_weights,
            ready_wait_s=ready_wait_s,
        )
        self.progress = progress
        self.estimator = estimator
        self.launcher = launcher or LocalLauncher(gpu_check=gpu_check, nvml=nvml, gpu_settle_s=gpu_settle_s)

    # -- the one entry point ------------------------------------------------------------------------

    def measure(self, targets: Sequence[RoleTarget]) -> list[PoolMeasurement]:
        targets = list(targets)
        if not targets:
            return []
        settings = self.settings
        if settings.logs_dir is not None:
            _check_log_names(targets)
        estimates = [self._estimate(t) for t in targets]
        launcher = self.launcher

        with ExitStack() as stack:
            if settings.logs_dir is not None:
                run_folder = make_run_folder(settings.logs_dir)
                settings = dataclasses.replace(settings, logs_dir=run_folder)
                # a run whose roles were all refused before their engines started leaves no empty folder
                stack.callback(_remove_if_empty, run_folder)
            run = _RoleThreads(targets, launcher.waits(targets), settings)
            stack.enter_context(launcher)
            progress = stack.enter_context(BootProgress(self.progress))
            if settings.logs_dir is not None:
                progress.note(f"engine logs: {settings.logs_dir}/")
            for i, target in enumerate(targets):
                waiting = ", ".join(literal(targets[j].name) for j in run.waits[i])  # a description is markup
                progress.add(target.name, f"waiting for {waiting}" if waiting else "queued")

            threads = [
                threading.Thread(target=self._run_role, args=(run, i, progress), name=f"kvcheck-role-{t.name}")
                for i, t in enumerate(targets)
            ]
            with _sigterm_cancels(run.cancel) as signals:
                launched = 0
                try:
                    for thread in threads:
                        thread.start()
                        launched += 1
                    self._join(run.done)
                except BaseException:
                    run.cancel.set()
                    self._release_unstarted(launched, run.begun, run.done)
                    self._join_through_interrupts(run.done)
                    raise
            for thread in threads:
                thread.join()  # already finished: their done events are set
            if signals["terminated"]:
                self._reraise_sigterm(signals["signal"] or signal.SIGTERM)
        return self._assemble(run, estimates)

    def refused(self, targets: Sequence[RoleTarget]) -> list[PoolMeasurement | None]:
        """Per role, the measurement a run would report for it when the launcher refuses its shape before
        anything starts (KV301, with its estimate beside it as in a run), else None; starts nothing.

        `verify --dry-run` reports these instead of rendering objects that could not start.
        """
        out: list[PoolMeasurement | None] = []
        for target in targets:
            refused = refusal_measurement(self.launcher, target)
            out.append(None if refused is None else self._with_estimate(refused, self._estimate(target)))
        return out

    def _run_role(self, run: _RoleThreads, i: int, progress: BootProgress) -> None:
        """One role's thread: wait for the roles it shares GPUs with, then measure it (unless cancelled)."""
        run.begun[i].set()
        try:
            for j in run.waits[i]:
                while not run.done[j].wait(0.05):
                    if run.cancel.is_set():
                        return
            if run.cancel.is_set():
                return
            run.results[i] = self._measure_role(
                run.targets[i], progress, run.cancel, shared=bool(run.waits[i]), settings=run.settings
            )
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which re-raises
            run.errors[i] = exc
            run.cancel.set()
        finally:
            run.done[i].set()

    def _assemble(self, run: _RoleThreads, estimates: list[PoolMeasurement | None]) -> list[PoolMeasurement]:
        """The measurements in target order, each with its estimate; a role thread's error is re-raised."""
        for error in run.errors:
            if error is not None:
                raise error
        out: list[PoolMeasurement] = []
        for target, result, estimate in zip(run.targets, run.results, estimates, strict=True):
            if result is None:  # a bug, not an engine failure: never let it pass as a measurement
                raise RuntimeError(f"role {target.name} produced no measurement")
            result = self._with_estimate(result, estimate)
            if self.settings.dummy_weights and result.pool_tokens is not None:
                result = dataclasses.replace(result, findings=(*result.findings, self._dummy_finding(target)))
            out.append(result)
        return out

    # -- pieces -------------------------------------------------------------------------------------

    @staticmethod
    def _join(done: list[threading.Event]) -> None:
        """Wait in short slices so Ctrl-C (KeyboardInterrupt) reaches the main thread promptly.

        Waits on the roles' own events, not Thread.join: a join interrupted by KeyboardInterrupt marks
        a still-running thread as stopped on Python 3.11 (bpo-45274's fix), and the interpreter
        would then exit without waiting for it to stop its engine.
        """
        for event in done:
            while not event.wait(0.1):
                pass

    @staticmethod
    def _release_unstarted(launched: int, begun: list[threading.Event], done: list[threading.Event]) -> None:
        """Roles whose thread never ran (Ctrl-C between two starts) have nothing to stop.

        The thread whose start() was interrupted may or may not run: it gets a second to show up.
        """
        for i in range(launched, len(done)):
            if i > launched or not begun[i].wait(1.0):
                done[i].set()

    @staticmethod
    def _join_through_interrupts(done: list[threading.Event]) -> None:
        """Every role stops its engine before kvcheck may exit; a second Ctrl-C does not skip that."""
        for event in done:
            while True:
                try:
                    if event.wait(0.1):
                        break
                except KeyboardInterrupt:
                    continue

    @staticmethod
    def _reraise_sigterm(signum: int = signal.SIGTERM) -> None:
        """Die of the stopping signal as if no handler had been installed (SIGTERM: exit 143), now that
        the engines are gone."""
        handler = signal.getsignal(signum)
        if handler is signal.SIG_DFL:
            os.kill(os.getpid(), signum)
            time.sleep(1.0)  # delivery is asynchronous; the default action ends the process here
        elif callable(handler):
            handler(signum, None)
        raise SystemExit(128 + signum)

    def _measure_role(
        self,
        target: RoleTarget,
        progress: BootProgress,
        cancel: threading.Event,
        *,
        shared: bool,
        settings: BootSettings,
    ) -> PoolMeasurement:
        def on_phase(text: str) -> None:
            progress.phase(target.name, text)

        refusal = self.launcher.preflight(target, settle=shared, cancel=cancel, on_phase=on_phase)
        if refusal is not None:
            progress.finish(target.name, f"[red]✗ {literal(refusal.summary)}[/]")
            return PoolMeasurement(
                role=target.name,
                source="measure",
                pool_tokens=None,
                gpus=target.gpus or None,
                details=dict(refusal.details),
                findings=refusal.findings,
            )
        boot = RoleBoot(
            target,
            settings,
            cancel=cancel,
            on_phase=on_phase,
            on_start=lambda: progress.start(target.name),
            launcher=self.launcher,
        )
        progress.phase(target.name, "starting")
        measurement = boot.run()
        errors = sorted({f.rule for f in measurement.findings if f.blocks})
        if measurement.pool_tokens is not None and errors:
            progress.finish(
                target.name, f"[yellow]! pool {measurement.pool_tokens:,} tokens ({', '.join(errors)})[/]"
            )
        elif measurement.pool_tokens is not None and measurement.pool_tokens < target.required_tokens:
            # below the window the role fails (KV101, judged after the boot): never the pass mark
            progress.finish(
                target.name,
                f"[red]✗ pool {measurement.pool_tokens:,} tokens, below the {target.required_tokens:,} required[/]",
            )
        elif measurement.pool_tokens is not None:
            progress.finish(target.name, f"[green]✓ pool {measurement.pool_tokens:,} tokens[/]")
        else:
            progress.finish(target.name, "[red]✗ not measured (KV301)[/]")
        return measurement

    def _estimate(self, target: RoleTarget) -> PoolMeasurement | None:
        if self.estimator is None:
            return None
        try:
            estimates = self.estimator.measure([target])
        except KvcheckError as exc:
            return PoolMeasurement(
                role=target.name, source="estimate", pool_tokens=None, details={"error": exc.message}
            )
        except Exception as exc:  # noqa: BLE001 - the estimate is a side check; the measurement decides
            return PoolMeasurement(
                role=target.name,
                source="estimate",
                pool_tokens=None,
                details={"error": f"the estimate model failed ({type(exc).__name__}: {exc}); please report it"},
            )
        return estimates[0] if estimates else None

    @staticmethod
    def _dummy_finding(target: RoleTarget) -> Finding:
        return finding(
            "KV315",
            target.name,
            "the pool was measured with --load-format dummy: a real checkpoint load can leave less memory "
            "for the pool",
            hint="measure with the real weights before the rollout (drop --dummy-weights)",
            location=target.location,
        )

    @staticmethod
    def _with_estimate(measurement: PoolMeasurement, estimate: PoolMeasurement | None) -> PoolMeasurement:
        """The estimate beside the measurement (details) and KV304 when they differ by more than 10 %."""
        if estimate is None:
            return measurement
        details = dict(measurement.details)
        details["estimate_pool_tokens"] = estimate.pool_tokens
        if estimate.pool_range is not None:
            details["estimate_pool_range"] = list(estimate.pool_range)
        if estimate.pool_tokens is None:
            reasons = [f.message for f in estimate.findings] or [estimate.details.get("error", "no estimate")]
            details["estimate_error"] = "; ".join(str(r) for r in reasons)
        extra = compare_estimate(measurement.role, measurement.pool_tokens, estimate.pool_tokens)
        return dataclasses.replace(measurement, details=details, findings=(*measurement.findings, *extra))


def check_measurable(targets: Sequence[RoleTarget], source: str, *, need_gpus: bool = True) -> None:
    """Measure mode boots engines on listed GPUs: a role without them is an input error up front.

    `need_gpus=False` for launchers that size a role's request from its parallel layout (Slurm).
    """
    from kvcheck.backends.measure.launchers.command import on_cpu

    issues = []
    for target in targets:
        if on_cpu(target):
            if target.gpus:
                where = target.location
                issues.append(InputIssue(
                    source, where.line if where else None, where.column if where else None,
                    f"roles.{target.name}.gpus",
                    "the role runs on the CPU (device: cpu): it takes no GPU list; remove gpus",
                ))
        elif not target.gpus and need_gpus:
            where = target.location
            issues.append(
                InputIssue(
                    source,
                    where.line if where else None,
                    where.column if where else None,
                    f"roles.{target.name}.gpus",
                    "measure mode needs the GPU indices the role boots on (or use --mode estimate)",
                )
            )
        if not target.model_path:
            issues.append(InputIssue(source, None, None, "model.path", "measure mode needs model.path"))
    if issues:
        raise ManifestError(issues)
