"""Weights an engine keeps off the GPU when it sizes the pool, as a price or a bound the estimate can state.

Two kinds of weight offload reach the pool:
- `--cpu-offload-gb` (SGLang's OffloaderV1, vLLM's UVAOffloader and its `maybe_offload_to_cpu` up to 0.14)
  moves whole parameters of the layers the model class builds through `make_layers`, in the class's own order,
  until the per-GPU budget is reached: which parameters, and so how many bytes, depends on the class (a class
  that builds its layers otherwise moves none), on quantization methods that replace parameters after loading,
  and on the parameters an engine keeps resident. Not priced: the point figure keeps every weight on the GPU
  (the smallest pool the offload can leave), the high end of the range moves the budget plus one layer (the
  parameter that crosses the budget moves whole), and KV113 says so.
- group offload (`--offload-group-size`: SGLang's OffloaderV2, vLLM's PrefetchOffloader) moves the last
  `--offload-num-in-group` layers of every `--offload-group-size` and keeps staging copies of
  `--offload-prefetch-step` of them on the GPU. The engine modules price it where they can (vLLM's whole
  layers of one kind) and state a bound where they cannot (SGLang's experts, which quantization may re-create).

Each offload is a WeightOffload: the net bytes off each GPU (moved less the staging kept) at the estimate's
low end, figure and high end, priced or a bound, with the assumption that explains it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvcheck.errors import EstimateError
from kvcheck.policy.registry import finding

if TYPE_CHECKING:
    from kvcheck.model import Finding, RoleTarget

GIB = float(1 << 30)
EVERY_WEIGHT_ON_GPU = "with every weight on the GPU"
BUDGET_CAP_GIB = 1 << 20  # a --cpu-offload-gb budget beyond this moves every weight of any GPU (1 PiB)


@dataclass(frozen=True)
class WeightOffload:
    """Net weight bytes off each GPU (moved to the CPU less the staging copies kept on the GPU) at the estimate's
    low end, figure and high end. `priced`: the engine's own arithmetic, at the weights' band; otherwise a bound
    whose figure is the smallest pool the settings can leave (`basis` says how), named by KV113."""

    engine: str  # "SGLang", "vLLM"
    setting: str  # how the messages name it: "--cpu-offload-gb 8"
    flag: str  # the flag the hint names
    field: str  # the args key findings point at
    note: str  # the assumption the estimate states
    low_bytes: float = 0.0
    point_bytes: float = 0.0
    high_bytes: float = 0.0  # each stage moves at most its own weights
    priced: bool = False
    basis: str = EVERY_WEIGHT_ON_GPU  # the figure of a bound: how few weight bytes it takes off the GPU
    stage_high_bytes: tuple[float, ...] = ()  # the high end per pipeline stage, where the stages differ
    # staging copies physically on the GPU that high_bytes does not net out (vLLM up to 0.26, whose profiler does
    # not count them, or an unstated release): the room checks of an explicit cache subtract them all the same
    gpu_staging_bytes: float = 0.0
    # (fewest, most) staging bytes a profiled pool does not count (a stated vLLM release up to 0.26): vLLM sizes
    # the KV cache as without them, so they take GPU memory beyond --gpu-memory-utilization
    staging_outside_bytes: tuple[float, float] = (0.0, 0.0)

    def moved(self, end: int, weights_bytes: float) -> float:
        """The weight bytes off the GPU at one end of the estimate's range (-1 low, 0 figure, +1 high); negative
        where the staging copies outweigh what moves."""
        return min(self.low_bytes if end < 0 else self.point_bytes if end == 0 else self.high_bytes, weights_bytes)

    @property
    def active(self) -> bool:
        """Whether these settings change the weights on the GPU at all."""
        return bool(self.note)

    @property
    def unpriced(self) -> bool:
        """A bound (KV113): the estimate cannot tell which weights move."""
        return self.active and not self.priced and self.high_bytes > 0

    def notes(self) -> list[str]:
        """The assumption the estimate states, where weights may move."""
        return [self.note] if self.note else []

    def findings(self, target: RoleTarget, pool_tokens: int, high_tokens: int) -> list[Finding]:
        """KV113 for a bound: the pool is predicted at the bound's small end, and may be larger. None where even
        the bound's large end leaves no larger pool: the verdict is the same whatever moves."""
        if not self.unpriced or high_tokens <= pool_tokens:
            return []
        return [finding(
            "KV113", target.name,
            f"{self.setting} is not priced: the pool is predicted {self.basis} ({pool_tokens:,} tokens), and the "
            f"weights {self.engine} moves to the CPU leave a larger one, up to {high_tokens:,} tokens (the "
            "estimate's range); a role that fails here may fit",
            hint=f"measure the role (kvcheck verify without --mode estimate), or size it without {self.flag}",
            location=target.arg_location(self.field),
        )]

    def check_start(self, refusal: str | None, high_tokens: int) -> None:
        """A start refused at the bound's small end, which the moved weights may let through: the estimate cannot
        tell whether the engine starts, so the role is not checked (EstimateError) rather than called a refused
        start. A priced offload's refusal is the engine's."""
        if not self.unpriced or refusal is None or high_tokens <= 0:
            return
        raise EstimateError(
            f"{self.basis} {self.engine} would not start ({refusal}), and the weights {self.setting} moves to the "
            f"CPU may leave a pool of up to {high_tokens:,} tokens: the estimate does not price which weights move, "
            "so it cannot tell whether the role starts",
            hint="measure the role (kvcheck verify without --mode estimate)")


def int_arg(args: Mapping[str, Any], name: str, default: int) -> int:
    """An offload flag's integer value, `default` where it is unset or not a number (the catalogue has refused
    what the engine would)."""
    value = args.get(name)
    try:
        return default if value is None else int(value)
    except (TypeError, ValueError):
        return default


def budget_offload(engine: str, gib: float, layer_bytes: float, source: str) -> WeightOffload:
    """--cpu-offload-gb: a bound, the budget plus the largest layer at the high end. A budget beyond any GPU's
    weights (the catalogue takes up to 1e18) is taken at BUDGET_CAP_GIB, which moves every weight all the same."""
    high = float(min(gib, BUDGET_CAP_GIB)) * GIB + layer_bytes
    shown = f"{gib:g}" if isinstance(gib, float) or abs(gib) < 10**15 else f"<{len(str(abs(gib)))}-digit integer>"
    return WeightOffload(
        engine=engine, setting=f"--cpu-offload-gb {shown}", flag="--cpu-offload-gb", field="cpu_offload_gb",
        note=(f"--cpu-offload-gb {shown}: {engine} moves layer weights to the CPU parameter by parameter in its model "
              f"class's order ({source}), which the estimate does not price: the figure keeps every weight on the "
              f"GPU, the range's high end moves up to {high / GIB:.2f} GiB per GPU (the budget plus the largest "
              f"layer, {layer_bytes / GIB:.2f} GiB, as the parameter that crosses the budget moves whole)"),
        high_bytes=high,
    )


NO_OFFLOAD = WeightOffload(engine="", setting="", flag="", field="", note="")


def ignored(engine: str, note: str) -> WeightOffload:
    """Settings the engine reads and then ignores: nothing moves, and the estimate says why."""
    return WeightOffload(engine=engine, setting="", flag="", field="", note=note, priced=True)


def selected_layers(stage_layers: int, group_size: int, num_in_group: int) -> list[int]:
    """The positions in a stage's make_layers stack that group offload moves: the last `num_in_group` of every
    `group_size` (`module_index % group_size >= group_size - num_in_group`, the same test in SGLang's OffloaderV2
    and vLLM's PrefetchOffloader, counted from the stage's first layer)."""
    if group_size <= 0:
        return []
    return [i for i in range(stage_layers) if i % group_size >= group_size - num_in_group]
