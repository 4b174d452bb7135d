"""The plan as a readable section for the table and Markdown reports, read from RoleResult.plan.

Renderers only read the report: this works from the typed plan value the report carries
(kvcheck.model.RolePlan), never by calling the planner.
"""

from __future__ import annotations

import io
import math

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from kvcheck.escape import one_line
from kvcheck.model import FractionPlan, PlanOption, Report, RolePlan, RoleResult
from kvcheck.plan.advice import setting_value

_BINDING = {
    "pool": "bound by the predicted pool",
    "max_total_tokens": "bound by --max-total-tokens",
    "model_context_length": "bound by the model's own context length",
    "num_reserved_decode_tokens": "bound by the decode role's per-request reservation (--num-reserved-decode-tokens)",
}
_VERDICT_STYLE = {"holds": "green", "short": "red", "measure": "yellow", "no room": "red", "refused": "red"}


def _tok(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _frac(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _verdict(pool: int | None, pool_range: tuple[int, int] | None, required: int) -> str:
    """holds / short / measure (the window lies inside the range) / not possible."""
    if pool is None:
        return "not possible"
    if pool_range is not None and pool_range[0] < required <= pool_range[1]:
        return "measure"
    return "holds" if pool >= required else "short"


def _range(value: tuple[int, int] | None) -> str:
    return "-" if not value else f"{value[0]:,}-{value[1]:,}"


def plan_rows(role: RoleResult) -> list[tuple[str, str, str, str, str, str]]:
    """(setting, value, pool tokens, pool range, window verdict, note) rows for one role's plan."""
    plan = _plan(role)
    required = plan.required_tokens
    rows: list[tuple[str, str, str, str, str, str]] = []
    f = plan.fraction
    source = "manifest" if f.current_source == "manifest" else f"{f.engine_label} default"
    rows.extend(_fraction_rows(f, source, role.pool_range, required,
                               refused=any(o.current and o.pool_tokens != 0 and _refused(o) for o in plan.tp_options)))
    for options in (plan.tp_options, plan.kv_dtype_options):
        for index, option in enumerate(options):
            label = "tp-size" if option.setting == "tp_size" else option.setting.replace("_", "-")
            rows.append(_option_row(label if index == 0 else "", option, required))
    return rows


def _fraction_rows(f: FractionPlan, source: str, current_range: tuple[int, int] | None, required: int, *,
                   refused: bool) -> list[tuple[str, str, str, str, str, str]]:
    """The memory setting's rows: the manifest's value, the smallest that holds, the safe maximum. `refused`:
    the engine would not start with the manifest's settings (the current TP option's verdict)."""
    current = (f.flag, f"{setting_value(f, f.current)} *", _tok(f.current_pool_tokens), _range(current_range))
    if f.blocked is not None:  # the engine refuses the role before it sizes memory: no value helps
        return [(*current, "refused", source), ("", "any", "-", "-", "refused", "the length is refused first (KV220)")]
    rows = [(*current, "refused" if refused else _verdict(f.current_pool_tokens, current_range, required), source)]
    if f.min_fitting is not None:
        rows.append(("", setting_value(f, f.min_fitting), _tok(f.min_fitting_pool_tokens), "-", "holds", "smallest"))
        if f.min_fitting_worst_case is not None and f.min_fitting_worst_case != f.min_fitting:
            rows.append(("", setting_value(f, f.min_fitting_worst_case), "-", "-", "holds", "smallest, low end"))
    else:
        rows.append(("", "none", "-", "-", "short", "no safe value"))
    if f.max_safe is not None:
        rows.append(("", _frac(f.max_safe), _tok(f.max_safe_pool_tokens), "-",
                     "holds" if (f.max_safe_pool_tokens or 0) >= required else "short", "safe maximum"))
    return rows


def _refused(option: PlanOption) -> bool:
    """The engine would not start with this option (its planner says so in the note): its pool is never allocated."""
    return bool(option.note and option.note.startswith(("vLLM would refuse", "vLLM refuses")))


def _option_row(label: str, option: PlanOption, required: int) -> tuple[str, str, str, str, str, str]:
    value = str(option.value) + (" *" if option.current else "")
    note = ""
    if option.setting == "tp_size" and (option.nnodes or 1) > 1:
        note = f"{option.nnodes} nodes"
    verdict = _verdict(option.pool_tokens, option.pool_range, required)
    if option.pool_tokens == 0:
        verdict, note = "no room", "weights fill GPUs"
    elif _refused(option):
        verdict, note = "refused", str(option.note)
    elif option.pool_tokens is None:
        note = option.note or ""
    elif option.setting == "tensor_parallel_size" and option.gpus is None and option.note:
        note = option.note  # a CPU role's ranks and the host memory they take
    pool_range = option.pool_range if option.pool_tokens else None
    return (label, value, _tok(option.pool_tokens), _range(pool_range), verdict, note)


def _plan(role: RoleResult) -> RolePlan:
    if role.plan is None:
        raise ValueError(f"role {role.name} carries no plan")
    return role.plan


def headline(role: RoleResult) -> str:
    """`plan for prefill: largest context that fits 580,096 tokens (bound by ...)`."""
    plan = _plan(role)
    binding = plan.binding_limit
    other = (
        f"the pool would hold {plan.pool_context_tokens:,}"
        if binding == "model_context_length"
        else f"the model allows {plan.model_context_tokens:,}"
    )
    text = (
        f"plan for {one_line(role.name)}: largest context that fits {plan.largest_context_tokens:,} tokens "
        f"({_BINDING.get(binding, binding)}; {other}); the window needs {plan.required_tokens:,}"
    )
    if plan.required_tokens > math.ceil(plan.min_headroom * plan.context_length):
        text += " (its longest prompt plus the decode role's reservation per request)"
    if plan.uncertain:
        text += "; might not fit; measure"
    return text


def plan_section(report: Report) -> list[RenderableType]:
    """Rich renderables for TableFormat: one headline and one settings table per planned role."""
    out: list[RenderableType] = []
    for role in report.roles:
        if role.plan is None:
            continue
        out.append(Text(headline(role), style="bold"))
        table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
        for column in ("setting", "value", "pool tokens", "pool range", "window", "note"):
            table.add_column(column, justify="right" if column in ("pool tokens", "pool range") else "left",
                             no_wrap=column != "note", overflow="fold")
        for setting, value, pool, pool_range, verdict, note in plan_rows(role):
            table.add_row(setting, value, pool, pool_range, Text(verdict, style=_VERDICT_STYLE.get(verdict, "")),
                          note)
        out.append(table)
    if out:
        out.append(Text("* = the manifest's setting; figures are predictions (estimate mode)", style="dim"))
    return out


def render_plan_text(report: Report, *, width: int = 100, color: bool = False) -> str:
    """The plan section as plain text (what TableFormat prints when it includes plan_section)."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=color, no_color=not color,
                      color_system="standard" if color else None, highlight=False, emoji=False)
    for item in plan_section(report):
        console.print(item)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + ("\n" if buffer.getvalue() else "")


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def plan_markdown(report: Report) -> str:
    """The plan section as Markdown, for MarkdownFormat (merge-request comments, step summaries)."""
    from kvcheck.report.formats.base import markdown_text

    out: list[str] = []
    for role in report.roles:
        if role.plan is None:
            continue
        out.append(f"### {markdown_text(headline(role))}")  # the role's name: untrusted, every special escaped
        out.append("")
        out.append("| setting | value | pool tokens | pool range | window | note |")
        out.append("| --- | --- | ---: | ---: | --- | --- |")
        for row in plan_rows(role):
            out.append("| " + " | ".join(_md(cell) for cell in row) + " |")
        out.append("")
    if out:
        out.append("`*` = the manifest's setting; figures are predictions (estimate mode).")
        out.append("")
    return "\n".join(out)
