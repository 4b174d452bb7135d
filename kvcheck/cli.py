"""Command line: collect options, call the app, render the report, exit with its code. No logic."""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import click

from kvcheck import __version__
from kvcheck.backends.measure.launchers import LAUNCHERS
from kvcheck.errors import CheckError, InputError, KvcheckError
from kvcheck.escape import no_workflow_commands, one_line, printable
from kvcheck.model import ExitCode, Report
from kvcheck.redact import given_secrets, redact_text
from kvcheck.report.formats import FORMATTERS, Format, TableFormat
from kvcheck.report.outputs import (
    check_outputs,
    parsed_destinations,
    report_files_option,
    write_input_error_reports,
    write_output,
    write_report_files,
)

if TYPE_CHECKING:
    from kvcheck.inputs.deploy.manifest import Overrides


class FiniteFloat(click.FloatRange):
    """A FloatRange that also refuses nan and inf (click lets them through every comparison)."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        converted = super().convert(value, param, ctx)
        if not math.isfinite(converted):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return converted

    def _describe_range(self) -> str:
        """No bounds, no range in --help (click would print `x<=None`)."""
        return "" if self.min is None and self.max is None else super()._describe_range()


class Tokens(click.IntRange):
    """A token count as manifests write it too: 131072, 128k (SI) or 1Mi (IEC), within `min`..2**31-1."""

    def __init__(self, min: int | None = 1) -> None:  # noqa: A002 - click's own parameter name
        super().__init__(min=min, max=2**31 - 1)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.strip()[-1:].isalpha():  # 128k, 1Mi (1e20 stays click's to judge)
            from kvcheck.engines.flags import FlagError, parse_human_readable_int

            try:
                value = parse_human_readable_int(param.opts[0] if param and param.opts else "value", value)
            except FlagError as exc:
                self.fail(str(exc), param, ctx)
        return super().convert(value, param, ctx)


DAY_S = 24 * 3600.0
WEEK_S = 7 * DAY_S


def _silence(stream: TextIO | None) -> None:
    """Point a closed pipe's file descriptor at /dev/null, so later writes and the final flush succeed."""
    try:
        fd = stream.fileno() if stream is not None else -1
    except (OSError, ValueError):
        return
    if fd < 0:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _stderr(message: str) -> None:
    """A line for people on stderr, control characters escaped (a terminal must not run a file's escape
    sequences, nor show bidi-reordered text); a closed or failing stderr never changes the exit code."""
    try:
        click.echo(no_workflow_commands(printable(message)), err=True)
    except OSError:  # `2>&1 | true`: the verdict is the exit code, whatever became of the words
        _silence(sys.stderr)


def echo_report(text: str) -> None:
    """Print the report on stdout; a reader that stops early (`| head`) is not a kvcheck bug.

    When stdout closes, the rest of the report is dropped and the command still exits with its verdict.
    Any other write error (a full disk) is "could not check" (exit 3): the report did not reach its reader.
    """
    if sys.stdout is None:  # started with stdout closed (`>&-`): the report has nowhere to go
        raise CheckError(
            "cannot write the report: standard output is closed",
            hint="give kvcheck a stdout, or write the report with --output FILE",
        )
    try:
        click.echo(text, nl=False)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence(sys.stdout)
    except OSError as exc:
        _silence(sys.stdout)
        raise CheckError(
            f"cannot write the report to standard output: {exc.strerror or exc}",
            hint="free space where stdout goes, or write the report with --output FILE",
        ) from exc


def _escape_unencodable() -> None:
    """Characters the terminal's encoding cannot carry are written as escapes, never a crash."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            reconfigure(errors="backslashreplace")


def emit(report: Report, fmt: str, output: Path | None) -> int:
    """Render the report to stdout (or --output) and return its exit code; secrets never leave."""
    from kvcheck.redact import redact_report

    report = redact_report(report)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:  # a failure from here on (a full stdout) must not replace this report with KV300's
        ctx.meta[_EMITTED] = True
    formatter: Format
    if fmt == "table":
        tty = sys.stdout is not None and sys.stdout.isatty()
        color = output is None and tty and "NO_COLOR" not in os.environ
        width = 100 if output is not None or not tty else None
        formatter = TableFormat(color=color, width=width or shutil.get_terminal_size((100, 24)).columns)
    else:
        formatter = FORMATTERS[fmt]()
    text = formatter.render(report)
    write_report_files(report)
    if output is None:
        echo_report(text)
    else:
        write_output(output, text, f"--output {output}")
        _stderr(f"kvcheck: report written to {output} (verdict {report.verdict}, exit {report.exit_code})")
    return report.exit_code


# The commands whose reports --format and --report shape: an input error becomes a report in them too.
REPORTING_COMMANDS = frozenset({"verify", "plan", "audit", "logs", "probe"})


def _given_source(params: dict[str, Any]) -> str | None:
    """What the command was asked to check, as the command line names it (the report's `source`)."""
    for key in ("files", "url", "manifest", "fleet", "urls"):
        value = params.get(key)
        if isinstance(value, tuple | list):
            named = [str(item) for item in value if not str(item).startswith("-") or str(item) == "-"]
            if named:  # a command line click refused may hold an unknown option among the files
                return ", ".join(named)
        elif value is not None:
            return str(value)
    return None


def _report_input_error(error: InputError | str, secrets: frozenset[str], *, hint: str | None = None,
    ctx: click.Context | None = None, fmt: str | None = None, output: str | Path | None = None,
    report_files: list[str] | None = None, inputs: dict[tuple[int, int], str] | None = None,
    params: dict[str, Any] | None = None) -> None:
    """Write the report of invalid input in the formats the command line asked for (docs/ci.md)."""
    from kvcheck.redact import redact_report
    from kvcheck.report.input_errors import input_error_report

    ctx = ctx or click.get_current_context(silent=True)
    if ctx is None or ctx.command.name not in REPORTING_COMMANDS:
        return
    if fmt is None and output is None and report_files is None:
        fmt, output = ctx.params.get("fmt"), ctx.params.get("output")
    report = redact_report(input_error_report(ctx.command.name, error, source=_given_source(params or ctx.params),
                                              hint=hint,
                                              secrets=secrets))
    try:
        write_input_error_reports(report, fmt=fmt, output=output, report_files=report_files, inputs=inputs,
                                  notice=_stderr, echo=echo_report)
    except KvcheckError as exc:  # stdout closed or full: the message on stderr already said it all
        _stderr(f"kvcheck: {exc.message}")


# each command's report mode when it stops before checking (verify's is its --mode)
_STOPPED_MODES = {"plan": "estimate", "audit": "audit", "logs": "logs", "probe": "probe"}
_EMITTED = "kvcheck.report_emitted"


def _report_check_error(error: KvcheckError, secrets: frozenset[str]) -> None:
    """A run stopped before checking anything (exit 3) is a report too, in the formats asked for (KV300),
    unless the run's own report was already written (a full stdout is exit 3 after it)."""
    from kvcheck.redact import redact_report
    from kvcheck.report.input_errors import check_error_report

    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.command.name not in REPORTING_COMMANDS or ctx.meta.get(_EMITTED):
        return
    mode = str(ctx.params.get("mode") or _STOPPED_MODES.get(ctx.command.name, ctx.command.name))
    report = redact_report(check_error_report(ctx.command.name, error, mode=mode,
                                              source=_given_source(ctx.params), secrets=secrets))
    try:
        write_input_error_reports(report, fmt=ctx.params.get("fmt"), output=ctx.params.get("output"),
                                  notice=_stderr, echo=echo_report)
    except KvcheckError as exc:  # stdout closed or full: the message on stderr already said it all
        _stderr(f"kvcheck: {exc.message}")


class ReportingCommand(click.Command):
    """A command whose usage errors (an unknown flag, a bad value) also reach its report formats."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            if self.name in REPORTING_COMMANDS:
                fmt, output, report_files, inputs, params = parsed_destinations(self, given)
                _report_input_error(exc.format_message(), given_secrets(None), ctx=ctx, fmt=fmt, output=output,
                                    report_files=report_files, inputs=inputs, params=params,
                                    hint=f"kvcheck {self.name} --help lists the options and their values")
            raise


class ReportingGroup(click.Group):
    """kvcheck's command group: every command it defines is a ReportingCommand.

    Ctrl-C is exit 130 from every point: click's own handling (while options, settings and the manifest
    are read, before run_guarded) printed "Aborted!" and exited 1, which CI reads as a failed gate."""

    command_class = ReportingCommand

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except KeyboardInterrupt:
            _interrupted()

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            _interrupted()


def _interrupted() -> NoReturn:
    _stderr("kvcheck: interrupted; every process kvcheck started has been stopped")
    sys.exit(130)


def run_guarded(action: Callable[[], int], *, token_env: str | None = None) -> None:
    """Turn kvcheck's own errors into their exit codes and anything else into exit 4.

    `token_env`: the variable holding the bearer token, which no message may show, whatever its length."""
    try:
        ctx = click.get_current_context(silent=True)
        # report files that are links or inputs are refused before a run that may take minutes
        check_outputs(ctx.params.get("output") if ctx is not None else None)
        code = action()
    except KvcheckError as exc:  # messages may quote what the user gave: secrets hidden here too
        secrets = given_secrets(token_env)
        _stderr(f"kvcheck: error: {redact_text(exc.message, secrets)}")
        if exc.hint:
            _stderr(f"kvcheck: hint: {redact_text(exc.hint, secrets)}")
        if isinstance(exc, InputError):
            _report_input_error(exc, secrets)
        elif exc.exit_code == ExitCode.ERROR:
            _report_check_error(exc, secrets)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _interrupted()
    except click.exceptions.ClickException:
        raise
    except Exception as exc:  # noqa: BLE001 - the last line of defence, reported as a kvcheck bug
        reason = redact_text(str(exc), given_secrets(token_env))
        _stderr(f"kvcheck: internal error (a bug in kvcheck {__version__}): {type(exc).__name__}: {reason}")
        if os.environ.get("KVCHECK_DEBUG"):
            traceback.print_exc()
        else:
            _stderr("kvcheck: rerun with KVCHECK_DEBUG=1 for the traceback")
        _stderr("kvcheck: please report it to the kvcheck maintainers with the command line and the traceback")
        sys.exit(ExitCode.INTERNAL)
    sys.exit(code)


def _with_hub_endpoint_checked(action: Callable[[], int]) -> Callable[[], int]:
    """`action`, after HF_ENDPOINT (when set) is checked: it is the user's setting, so a URL the
    estimator's download could not use is exit 2 naming it, not a KV305 on every role."""
    def checked() -> int:
        endpoint = os.environ.get("HF_ENDPOINT")
        if endpoint:
            from kvcheck.errors import InputError
            from kvcheck.http import validate_base_url

            try:
                validate_base_url(endpoint.rstrip("/"))
            except InputError as exc:
                raise InputError(f"HF_ENDPOINT: {exc.message}", hint="set HF_ENDPOINT to the Hub's base URL "
                                 "(https://huggingface.co or a mirror), or unset it") from exc
        return action()
    return checked


def _output_folder_exists(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """Refuse an --output whose folder is missing before the check runs (a measure run takes minutes)."""
    if value is not None and not value.absolute().parent.is_dir():
        raise click.BadParameter(f"folder {value.absolute().parent} does not exist; create it first", ctx, param)
    return value


def _add_profiles(ctx: click.Context, param: click.Parameter, value: tuple[Path, ...]) -> None:
    """--profiles DIR: GPU profiles read ahead of the shipped ones (docs/estimate.md, GPU profiles)."""
    from kvcheck.errors import InputError
    from kvcheck.gpus import add_profile_dir

    for folder in value:
        try:
            add_profile_dir(folder)
        except InputError as exc:
            raise click.BadParameter(exc.message, ctx=ctx, param=param) from exc


profiles_option = click.option(
    "--profiles",
    type=click.Path(file_okay=False, path_type=Path),
    multiple=True,
    expose_value=False,
    callback=_add_profiles,
    metavar="DIR",
    help="Also read GPU profiles (*.yaml) from DIR, ahead of the shipped ones (repeatable).",
)


def _fail_on_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """--fail-on error|warning: the severity from which a finding fails the check (`warning` is
    --strict). There is no level that lets errors pass: a gate that could not check a role exits 3."""

    @functools.wraps(func)
    def wrapper(*args: Any, fail_on: str | None = None, **kwargs: Any) -> Any:
        if fail_on == "warning":
            kwargs["strict"] = True
        return func(*args, **kwargs)

    return click.option(
        "--fail-on",
        type=click.Choice(["error", "warning"]),
        default=None,
        help="Lowest severity that fails the check: error (the default) or warning (the same as --strict).",
    )(wrapper)


def gate_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--ignore-file, --baseline, --write-baseline (kvcheck/policy/suppress.py), collected as `gate`."""

    @functools.wraps(func)
    def wrapper(*args: Any, ignore_file: Path | None = None, baseline: Path | None = None,
                write_baseline: Path | None = None, **kwargs: Any) -> Any:
        from kvcheck.policy.suppress import GateOptions

        kwargs["gate"] = GateOptions(ignore_file=ignore_file, baseline=baseline, write_baseline=write_baseline)
        return func(*args, **kwargs)

    path = click.Path(dir_okay=False, path_type=Path)
    wrapper = click.option("--write-baseline", type=path, metavar="FILE",
                           help="Write the current findings to FILE as the baseline (they pass; KV3xx never do).")(wrapper)
    wrapper = click.option("--baseline", type=path, metavar="FILE",
                           help="Findings in this baseline file do not fail; new ones do.")(wrapper)
    return click.option("--ignore-file", type=path, metavar="FILE",
                        help="A YAML file of suppressions, each with a reason and an expiry date (see docs/ci.md).")(wrapper)


def report_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--format, --output, --strict and --fail-on, which every checking command takes."""
    func = click.option("--strict", is_flag=True, help="Warnings fail the check too.")(func)
    func = _fail_on_option(func)
    func = report_files_option(func)
    func = click.option(
        "--output",
        "-o",
        type=click.Path(dir_okay=False, writable=True, path_type=Path),
        callback=_output_folder_exists,
        help="Write the report to this file instead of stdout.",
    )(func)
    func = click.option(
        "--format",
        "fmt",
        type=click.Choice(sorted(FORMATTERS)),
        default="table",
        show_default=True,
        help="Report format.",
    )(func)
    return func


def _complete(name: str) -> Callable[[click.Context, click.Parameter, str], list[Any]]:
    """A shell-completion callback of kvcheck/commands/completion.py, imported only when the shell asks."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from kvcheck.commands import completion

        found: list[Any] = getattr(completion, name)(ctx, param, incomplete)
        return found

    return complete


def _version_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--engine-version as a release number: an empty one was dropped silently, and one that is no version was
    blamed on a line of the deployment files."""
    from packaging.version import InvalidVersion, Version

    if value is None:
        return None
    try:
        Version(value)
    except InvalidVersion:
        raise click.BadParameter(f"{value!r} is not a version number (write it like \"0.5.23\")",
                                 ctx=ctx, param=param) from None
    return value


def _deployment_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--gpu, --context-length, --model-config, --engine-version: what deployment files may not state."""
    # --sglang-version is the option's first name (kept: CI files use it); it states any engine's release
    func = click.option("--engine-version", "--sglang-version", "sglang_version", metavar="VERSION",
                        callback=_version_option,
                        help="The engine release the files run (SGLang or vLLM), when no image tag names it; "
                        "--sglang-version is the same option.")(func)
    func = click.option("--model-config", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                        help="The model's config.json, for estimates.")(func)
    func = click.option("--context-length", type=Tokens(),
                        help="The window you advertise, when the files set no common --context-length "
                        "(vLLM: --max-model-len).")(func)
    func = click.option("--gpu", shell_complete=_complete("complete_gpu"),
                        help="GPU type (H100, H200, ...), when no node selector or class names it.")(func)
    return func


def _overrides(gpu: str | None, context_length: int | None, model_config: Path | None,
    sglang_version: str | None) -> Overrides | None:
    """What deployment files lack, from the command line (None when nothing was given)."""
    if not any((gpu, context_length, model_config, sglang_version)):
        return None
    from kvcheck.commands.import_ import overrides_from_options

    return overrides_from_options(gpu=gpu, context_length=context_length, model_config=model_config,
                                  sglang_version=sglang_version)


@click.group(cls=ReportingGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="kvcheck")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Read default options from this settings file (else the nearest .kvcheck.yaml or "
              "pyproject.toml [tool.kvcheck] from the working folder up).")
@click.option("--no-config", is_flag=True, help="Ignore settings files.")
@click.pass_context
def main(ctx: click.Context, config_file: Path | None, no_config: bool) -> None:
    """Gate LLM-serving rollouts on the KV-cache pool each engine role really holds.

    Exit codes: 0 pass, 1 a finding blocks the rollout, 2 invalid input, 3 could not check
    (fail closed), 4 internal error.
    """
    _escape_unencodable()
    from kvcheck.commands.settings import settings_for

    try:
        settings = settings_for(main, explicit=config_file, disabled=no_config)
    except KvcheckError as exc:
        _stderr(f"kvcheck: error: {exc.message}")
        if exc.hint:
            _stderr(f"kvcheck: hint: {exc.hint}")
        sys.exit(exc.exit_code)
    if settings is not None:
        ctx.default_map = settings.default_map
        _stderr(f"kvcheck: defaults from {settings.path}")


def _one_command_line(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> str | None:
    """--cmd once: a second one replaced the first (click keeps the last), so a server went unchecked."""
    if len(value) > 1:
        raise click.BadParameter(
            f"given {len(value)} times: kvcheck reads one command line (a second would replace the first, "
            "unchecked); run kvcheck once per command, or describe the servers in a manifest", ctx=ctx, param=param)
    return value[0] if value else None


@main.command(short_help="Check that every role's KV pool holds the advertised window.")
@click.argument("files", nargs=-1)
@_deployment_options
@click.option("--cmd", multiple=True, callback=_one_command_line,
              help='An engine command line to check, as deployment input: '
              '"python -m sglang.launch_server --model-path M --tp 8".')
@click.option(
    "--mode",
    type=click.Choice(["measure", "estimate"]),
    default="measure",
    show_default=True,
    help="measure: boot each role with the real engine; estimate: predict pools, no GPU needed.",
)
@click.option("--role", "roles", multiple=True, shell_complete=_complete("complete_role"),
              help="Check only this role (repeatable).")
@click.option(
    "--timeout",
    "timeout_s",
    type=FiniteFloat(min=1, max=WEEK_S),
    default=1800,
    show_default=True,
    help="Seconds each role's engine may take to report its pool.",
)
@click.option(
    "--logs-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep each role's engine log in this folder.",
)
@click.option(
    "--no-gpu-check",
    is_flag=True,
    help="Skip the GPU inventory (for an engine.command that runs the engine in a container or scheduler).",
)
@click.option(
    "--dummy-weights",
    is_flag=True,
    help="Boot with --load-format dummy: same memory layout without reading the checkpoint.",
)
@click.option(
    "--launcher",
    type=click.Choice(sorted(LAUNCHERS)),
    help="Where measure mode boots each role: this host (local) or a cluster's scheduler "
    "[default: the manifest's launcher.kind, else local].",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="With --launcher kubernetes: print the objects verify would create, as YAML, and create nothing.",
)
@profiles_option
@report_options
@gate_options
def verify(files: tuple[str, ...], mode: str, roles: tuple[str, ...], timeout_s: float,
    logs_dir: Path | None, no_gpu_check: bool, dummy_weights: bool, launcher: str | None, dry_run: bool,
    fmt: str, output: Path | None, strict: bool, gpu: str | None = None, context_length: int | None = None,
    model_config: Path | None = None, sglang_version: str | None = None, cmd: str | None = None,
    gate: Any = None) -> None:
    """Check every role of a manifest or of deployment files (FILE..., - for stdin, or --cmd): each KV
    pool must hold the advertised context window."""
    from kvcheck.commands import verify as command

    if not files and cmd is None:
        raise click.UsageError('give a manifest or deployment files (FILE..., - for stdin), or --cmd "..."')
    options = command.VerifyOptions(
        manifest=Path(files[0]) if files else Path("--cmd"),
        inputs=tuple(files),
        cmd=cmd,
        overrides=_overrides(gpu, context_length, model_config, sglang_version),
        mode=mode,
        roles=tuple(roles),
        strict=strict,
        timeout_s=timeout_s,
        logs_dir=logs_dir,
        gpu_check=not no_gpu_check,
        dummy_weights=dummy_weights,
        launcher=launcher,
        gate=gate,
    )
    if dry_run:
        from kvcheck.commands.dry_run import dry_run as render_dry_run

        def show_dry_run() -> int:
            shown = render_dry_run(options)
            if isinstance(shown, Report):  # a role the launcher refuses: the run's report (KV301)
                return emit(shown, fmt, output)
            echo_report(shown)
            return 0

        run_guarded(show_dry_run)
        return
    run_guarded(_with_hub_endpoint_checked(lambda: emit(command.verify(options), fmt, output)))


@main.command(short_help="Check each rank's pool in SGLang or vLLM startup logs.")
@click.argument("files", nargs=-1, required=True)
@click.option(
    "--context-length",
    type=Tokens(),
    help="The advertised window to check each pool against (default: the context_len the log states).",
)
@click.option(
    "--min-headroom",
    type=FiniteFloat(min=1),
    default=1.0,
    show_default=True,
    help="Each pool must hold this many times the window.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=FiniteFloat(min=0.1, max=DAY_S),
    default=120,
    show_default=True,
    help="Seconds to read stdin (-) when the pipe does not end (kubectl logs -f): what arrived is judged, with KV312.",
)
@report_options
@gate_options
def logs(files: tuple[str, ...], context_length: int | None, min_headroom: float, timeout_s: float, fmt: str,
    output: Path | None, strict: bool, gate: Any = None) -> None:
    """Read SGLang or vLLM startup logs (FILE... or - for stdin) and check each rank's pool."""
    from kvcheck.commands import logs as command

    options = command.LogsOptions(
        files=tuple(files), context_length=context_length, min_headroom=min_headroom, strict=strict, gate=gate,
        stdin_timeout_s=timeout_s,
    )
    run_guarded(lambda: emit(command.logs(options), fmt, output))


@main.command(short_help="The largest context each role fits, and settings that hold it.")
@click.argument("files", nargs=-1, required=True)
@_deployment_options
@click.option("--role", "roles", multiple=True, shell_complete=_complete("complete_role"),
              help="Plan only this role (repeatable).")
@profiles_option
@report_options
@gate_options
def plan(files: tuple[str, ...], roles: tuple[str, ...], fmt: str, output: Path | None, strict: bool,
    gpu: str | None = None, context_length: int | None = None, model_config: Path | None = None,
    sglang_version: str | None = None, gate: Any = None) -> None:
    """For each role: the largest context that fits and the settings that would hold the window."""
    from kvcheck.commands.plan import PlanOptions, run_plan

    options = PlanOptions(manifest=Path(files[0]), inputs=tuple(files), roles=tuple(roles), strict=strict,
                          overrides=_overrides(gpu, context_length, model_config, sglang_version), gate=gate)
    run_guarded(_with_hub_endpoint_checked(lambda: emit(run_plan(options), fmt, output)))


@main.command(short_help="Print the manifest's JSON Schema (or the report's).")
@click.option("--report", "of_report", is_flag=True,
              help="Print the JSON Schema of the JSON report (kvcheck/report/v1) instead of the manifest's.")
def schema(of_report: bool) -> None:
    """Print the manifest's JSON Schema (for editors' YAML language servers and CI linters), or the report's."""
    if of_report:
        from kvcheck.report.schema import REPORT_JSON_SCHEMA

        click.echo(json.dumps(REPORT_JSON_SCHEMA, indent=2))
        return
    from kvcheck.inputs.manifest.model import json_schema

    click.echo(json.dumps(json_schema(), indent=2))


@main.command(short_help="List the rule codes, or explain one.")
@click.argument("code", required=False, shell_complete=_complete("complete_rule"))
def rules(code: str | None) -> None:
    """List every rule code with its severity, or explain one (kvcheck rules KV101)."""
    from kvcheck.policy.registry import all_rules

    known = all_rules()
    if code is None:
        for rule in known.values():
            click.echo(f"{rule.code}  {rule.severity:<7}  {rule.title}")
        return
    explained = known.get(code.upper())
    if explained is None:
        _stderr(f"kvcheck: error: unknown rule code '{code}'")
        sys.exit(2)
    click.echo(f"{explained.code} ({explained.severity}): {explained.title}\n\n{explained.doc}")


@main.command(short_help="Check the pools of running SGLang or vLLM servers.")
@click.argument("urls", nargs=-1)
@click.option(
    "--fleet",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A fleet file: one URL per line, or YAML mapping names to URLs (with context_length, role).",
)
@click.option(
    "--context-length",
    type=Tokens(),
    help="Check every pool against this window (default: each server's own served context).",
)
@click.option(
    "--min-headroom",
    type=FiniteFloat(min=1),
    default=None,
    help="Each pool must hold this many times the window. [default: 1.0, or the manifest's policy]",
)
@click.option(
    "--manifest",
    type=click.Path(path_type=Path),
    help="Judge the servers as the roles of this manifest (with --endpoint ROLE=URL).",
)
@click.option("--endpoint", "endpoints", multiple=True, help="ROLE=URL: the live server of a manifest role.")
@click.option("--timeout", "timeout_s", type=FiniteFloat(min=0.1, max=DAY_S), default=10, show_default=True,
              help="Seconds per request to one server.")
@click.option("--retries", type=click.IntRange(min=0), default=2, show_default=True,
              help="Retries per server on connection errors and 5xx answers (with backoff).")
@click.option("--concurrency", type=click.IntRange(min=1), default=32, show_default=True,
              help="Servers asked at the same time.")
@click.option("--ca-bundle", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="CA certificates to verify the servers' TLS certificates with.")
@click.option("--insecure", is_flag=True, help="Do NOT verify TLS certificates (says so loudly).")
@click.option("--token-env", metavar="VAR",
              help="Name of an environment variable holding a bearer token (never printed).")
@report_options
@gate_options
def audit(urls: tuple[str, ...], fleet: Any, context_length: int | None, min_headroom: float | None,
    manifest: Any, endpoints: tuple[str, ...], timeout_s: float, retries: int, concurrency: int,
    ca_bundle: Path | None, insecure: bool, token_env: str | None, fmt: str, output: Path | None,
    strict: bool, gate: Any = None) -> None:
    """Ask running SGLang or vLLM servers (URL... or --fleet) for their pool and check it."""
    from kvcheck.commands.audit import AuditOptions
    from kvcheck.commands.audit import audit as run_audit

    options = AuditOptions(
        urls=tuple(urls),
        fleet=fleet,
        context_length=context_length,
        min_headroom=min_headroom,
        manifest=manifest,
        endpoints=tuple(endpoints),
        timeout_s=timeout_s,
        retries=retries,
        concurrency=concurrency,
        ca_bundle=ca_bundle,
        insecure=insecure,
        token_env=token_env,
        strict=strict,
        gate=gate,
    )
    run_guarded(lambda: emit(run_audit(options), fmt, output), token_env=token_env)


@main.command(short_help="Probe a live front door: long prompts refused, tenants isolated.")
@click.argument("url")
@click.option("--context-length", type=Tokens(min=None), metavar="TOKENS",
              help="The window promised to clients (default: what the server serves).")
@click.option("--pool", "pool_tokens", type=Tokens(min=None), metavar="TOKENS",
              help="The smallest role's KV pool: used when the front door states none (a router), and judged "
                   "instead of the stated pool when smaller.")
@click.option("--max-upload-mib", type=int, default=512, show_default=True,
              help="Most MiB of request bodies the whole run sends (prompts are token ids).")
@click.option("--max-requests", type=int, default=64, show_default=True,
              help="Most requests sent in all (GETs included); a plan that needs more is refused.")
@click.option("--concurrency", type=int, default=4, show_default=True, help="Requests in flight at once.")
@click.option("--rate", "rate_per_s", type=FiniteFloat(), default=2.0, show_default=True,
              help="Most request starts per second.")
@click.option("--max-duration", "max_duration_s", type=FiniteFloat(max=WEEK_S), default=1800.0, show_default=True,
              help="Seconds for the whole run; nothing is sent after it.")
@click.option("--request-timeout", "request_timeout_s", type=FiniteFloat(max=DAY_S), default=600.0, show_default=True,
              help="Seconds for one request (long prefills are slow).")
@click.option("--tenants", type=int, default=4, show_default=True,
              help="Synthetic tenants of the isolation check (0 skips it).")
@click.option("--rounds", type=int, default=2, show_default=True, help="Isolation rounds per tenant.")
@click.option("--token-id", type=int, default=None,
              help="Filler token id of every token prompt [default: an id the deployment's tokenizer emits]; "
              "it must be proven inside the vocabulary.")
@click.option("--vocab-size", type=int, default=None, metavar="IDS",
              help="The model's vocabulary size (config.json vocab_size); ids below it count as in range "
              "when the front door serves no /v1/tokenize.")
@click.option("--max-new-tokens", type=int, default=16, show_default=True,
              help="Tokens asked for per request (admitted long prompts get what the window leaves).")
@click.option("--text-prompts/--no-text-prompts", default=None,
              help="Tenants' short prompts as text markers [default: when /server_info shows a tokenizer].")
@click.option("--openai/--no-openai", default=True, show_default=True,
              help="Also probe /v1/completions with token-array prompts.")
@click.option("--stream/--no-stream", default=True, show_default=True,
              help="Also probe streaming /generate at the bound and the window.")
@click.option("--model", help="Model name for /v1/completions (default: from /server_info or /v1/models).")
@click.option("--engine", metavar="NAME",
              help="The front door's engine (sglang, vllm) [default: the first whose server answers as its own].")
@click.option("--seed", type=int, help="Seed for tenant markers and patterns (default: fresh each run).")
@click.option("--dry-run", is_flag=True, help="Print every request the probe would send, and send nothing.")
@click.option("--ca-bundle", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="CA certificates to verify the front door's TLS certificate with.")
@click.option("--insecure", is_flag=True, help="Do NOT verify TLS certificates.")
@click.option("--token-env", metavar="VAR",
              help="Name of an environment variable holding a bearer token (never printed).")
@report_options
def probe(url: str, context_length: int | None, pool_tokens: int | None, max_upload_mib: int,
    max_requests: int, concurrency: int, rate_per_s: float, max_duration_s: float,
    request_timeout_s: float, tenants: int, rounds: int, token_id: int | None, vocab_size: int | None,
    max_new_tokens: int,
    text_prompts: bool, openai: bool, stream: bool, model: str | None, engine: str | None, seed: int | None,
    dry_run: bool,
    ca_bundle: Path | None, insecure: bool, token_env: str | None, fmt: str, output: Path | None,
    strict: bool) -> None:
    """Probe a live deployment's front door: over-long prompts must be refused, tenants isolated."""
    from kvcheck.commands.probe import plan_probe, run_probe
    from kvcheck.probe.options import ProbeOptions

    options = ProbeOptions(
        url=url, context_length=context_length, pool_tokens=pool_tokens, max_requests=max_requests,
        max_upload_mib=max_upload_mib,
        concurrency=concurrency, rate_per_s=rate_per_s, max_duration_s=max_duration_s,
        request_timeout_s=request_timeout_s, tenants=tenants, rounds=rounds, token_id=token_id,
        vocab_size=vocab_size, max_new_tokens=max_new_tokens, text_prompts=text_prompts, openai=openai, stream=stream, model=model,
        dry_run=dry_run, ca_bundle=str(ca_bundle) if ca_bundle else None, insecure=insecure,
        token_env=token_env, seed=seed, strict=strict, engine=engine,
    )

    def write(text: str) -> None:
        if output is None:
            echo_report(text)
            return
        write_output(output, text, f"--output {output}")

    secrets = given_secrets(token_env)

    def progress(result: Any, done: int, total: int) -> None:  # plain lines: a terminal and a CI log alike
        line = f"kvcheck probe: [{done}/{total}] {result.planned.describe()}: {result.outcome}"
        _stderr(redact_text(line, secrets))  # an outcome may quote the server, which may echo the token

    def action() -> int:
        if dry_run:
            plan = plan_probe(options)
            write(plan.render_json() if fmt == "json" else plan.render_text())
            return 0
        options.validate()
        if insecure:
            _stderr("kvcheck: warning: --insecure: TLS certificates are NOT verified")
        return emit(run_probe(options, progress=progress), fmt, output)

    run_guarded(action, token_env=token_env)


@main.command("import", short_help="Print the manifest that deployment files or --cmd describe.")
@click.argument("files", nargs=-1)
@click.option("--cmd", multiple=True, callback=_one_command_line,
              help='An SGLang or vLLM command line: "python -m sglang.launch_server --model-path M --tp 8", '
              '"vllm serve M -tp 8".')
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True,
              help="yaml: with a comment naming the file:line of each value; json: the values only.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True, path_type=Path),
              callback=_output_folder_exists,
              help="Write the manifest to this file (model.config is then relative to it, as it is when stdout is "
              "redirected to a file; on a pipe or a terminal it is absolute) instead of stdout.")
@_deployment_options
def import_(files: tuple[str, ...], cmd: str | None, fmt: str, output: Path | None, gpu: str | None,
    context_length: int | None, model_config: Path | None, sglang_version: str | None) -> None:
    """Print the kvcheck manifest that deployment files (FILE..., - for stdin) or --cmd describe."""
    from kvcheck.commands.import_ import ImportOptions, run_import
    from kvcheck.io.streams import redirected_file

    options = ImportOptions(files=tuple(files), cmd=cmd, fmt=fmt, gpu=gpu, context_length=context_length,
                            model_config=model_config, sglang_version=sglang_version, output=output,
                            stdout_file=None if output is not None else redirected_file(sys.stdout))

    def action() -> int:
        imported = run_import(options)
        for item in imported.findings:
            where = f"{one_line(item.location.render())}: " if item.location else ""
            _stderr(f"kvcheck: {item.severity}: {where}{item.rule} {item.message}")
        if output is not None:
            write_output(output, imported.text, f"--output {output}")
        else:
            echo_report(imported.text)
        # the manifest cannot carry these: a value the files do not set is left out (KV317), a leader and worker
        # that disagree keep the leader's (KV501), so verify on the manifest alone could pass what the files fail
        errors = [item for item in imported.findings if item.severity == "error"]
        if not errors:
            return 0
        unchecked = any(item.rule.startswith("KV3") for item in errors)
        code = ExitCode.ERROR if unchecked else ExitCode.FAIL
        _stderr(f"kvcheck: import: exit {int(code)}: the files have {len(errors)} error finding(s) the printed "
                "manifest does not carry; verify the files themselves, or fix them first")
        return int(code)

    run_guarded(action)


@main.command(short_help="Delete what killed kvcheck runs left on Kubernetes.")
@click.option("--namespace", "-n", help="Where to look (default: the kubeconfig context's namespace).")
@click.option("--context", "kube_context", help="The kubeconfig context (default: the current one).")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="The kubeconfig file (default: $KUBECONFIG).")
@click.option("--run-id", help="Delete only this run's objects (the report's details.kubernetes.run_id).")
@click.option("--grace", "grace_s", type=FiniteFloat(min=0, max=DAY_S), default=15.0, show_default=True,
              help="Seconds each engine gets to stop before it is killed.")
def cleanup(namespace: str | None, kube_context: str | None, kubeconfig: str | None, run_id: str | None,
    grace_s: float) -> None:
    """Delete the Kubernetes Jobs and LeaderWorkerSets that killed kvcheck runs left (by label)."""
    from kvcheck.commands.cleanup import CleanupOptions, run_cleanup

    options = CleanupOptions(namespace=namespace, context=kube_context, kubeconfig=kubeconfig, run_id=run_id,
                             grace_s=grace_s)

    def action() -> int:
        outcome = run_cleanup(options)
        echo_report(outcome.text)
        return outcome.exit_code

    run_guarded(action)
