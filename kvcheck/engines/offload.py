"""Weights an engine moves to the CPU (`--cpu-offload-gb`), as a bound the estimate can state.

Both engines move whole parameters of the layers their model class builds through `make_layers`, in the
class's own order, until the per-GPU budget is reached (SGLang's OffloaderV1, vLLM's UVAOffloader and its
`maybe_offload_to_cpu` up to 0.14): which parameters, and so how many bytes, depends on the class (a class
that builds its layers otherwise moves none), on quantization methods that replace parameters after loading,
and on the parameters an engine keeps resident. The estimate does not price them: its point figure keeps every
weight on the GPU (the smallest pool the offload can leave), the high end of its range moves the budget plus
one layer (the parameter that crosses the budget moves whole), and KV113 says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcheck.errors import EstimateError
from kvcheck.policy.registry import finding

if TYPE_CHECKING:
    from kvcheck.model import Finding, RoleTarget

GIB = float(1 << 30)


@dataclass(frozen=True)
class CpuOffload:
    """Bytes per GPU: the budget (`cpu_offload_gb x 2^30`), the largest layer, and the most that may move."""

    budget_bytes: float
    layer_bytes: float
    high_bytes: float  # budget + the largest layer; each stage moves at most its own weights

    def moved(self, end: int, weights_bytes: float) -> float:
        """The weight bytes off the GPU at one end of the estimate's range (-1 low, 0 figure, +1 high)."""
        return min(self.high_bytes, weights_bytes) if end > 0 else 0.0

    def notes(self, engine: str, source: str) -> list[str]:
        """The assumption the estimate states, where weights may move."""
        return [self.note(engine, source)] if self.high_bytes else []

    def note(self, engine: str, source: str) -> str:
        """The assumption the estimate states."""
        return (f"--cpu-offload-gb {self.budget_bytes / GIB:g}: {engine} moves layer weights to the CPU parameter "
                f"by parameter in its model class's order ({source}), which the estimate does not price: the "
                f"figure keeps every weight on the GPU, the range's high end moves up to {self.high_bytes / GIB:.2f} "
                f"GiB per GPU (the budget plus the largest layer, {self.layer_bytes / GIB:.2f} GiB, as the parameter "
                "that crosses the budget moves whole)")

    def findings(self, target: RoleTarget, engine: str, pool_tokens: int, high_tokens: int) -> list[Finding]:
        """KV113 where weights may move: the pool is predicted without the offload, and may be larger."""
        if not self.high_bytes:
            return []
        return [finding(
            "KV113", target.name,
            f"--cpu-offload-gb {self.budget_bytes / GIB:g} is not priced: the pool is predicted with every weight "
            f"on the GPU ({pool_tokens:,} tokens), and the weights {engine} moves to the CPU leave a larger one, "
            f"up to {high_tokens:,} tokens (the estimate's range); a role that fails here may fit",
            hint="measure the role (kvcheck verify without --mode estimate), or size it without --cpu-offload-gb",
            location=target.arg_location("cpu_offload_gb"),
        )]

    def check_start(self, engine: str, refusal: str | None, high_tokens: int) -> None:
        """A start refused with every weight on the GPU, which the moved weights may let through: the estimate
        cannot tell whether the engine starts, so the role is not checked (EstimateError) rather than called a
        refused start."""
        if not self.high_bytes or refusal is None or high_tokens <= 0:
            return
        raise EstimateError(
            f"with every weight on the GPU {engine} would not start ({refusal}), and the weights --cpu-offload-gb "
            f"{self.budget_bytes / GIB:g} moves to the CPU may leave a pool of up to {high_tokens:,} tokens: the "
            "estimate does not price which weights move, so it cannot tell whether the role starts",
            hint="measure the role (kvcheck verify without --mode estimate)")


NO_OFFLOAD = CpuOffload(0.0, 0.0, 0.0)
