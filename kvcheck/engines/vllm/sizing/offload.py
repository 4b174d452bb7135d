"""vLLM's weight offload backends as the estimate sees them (model_executor/offloader/, config/offload.py; the
same code from 0.17.0, when the group flags came, to 0.32.0).

`--offload-backend auto` (the default) takes the prefetch backend when `--offload-group-size` is above 0, else UVA
when `--cpu-offload-gb` is (base.py create_offloader:142-178 in 0.32.0); `uva` or `prefetch` takes that one and
ignores the other's flags (config/offload.py validate_offload_config warns so).

PrefetchOffloader (prefetch.py) moves to pinned CPU memory every parameter (`--offload-params` narrows them by name)
of the last `--offload-num-in-group` layers of every `--offload-group-size` in the stage's make_layers stack
(wrap_modules:179-229, `module_index % group_size >= group_size - num_in_group`), as the model is built, so the
load never holds them on the GPU. In post_init (called at the end of GPUModelRunner.load_model,
gpu_model_runner.py:5228 in 0.32.0, after the weights are measured at :5137 and before the memory profile) it
allocates a StaticBufferPool of `--offload-prefetch-step` GPU copies of each distinct (name, shape, stride, dtype)
among the moved parameters (prefetch.py:60-112, 336-383): for a stack of identical layers, prefetch_step whole
layers, whatever the number moved; no pool when nothing moved. From 0.27.0 the profiler counts every byte lost
since its first snapshot (sizing/memory.py TOTAL_CONSUMED_FROM), so the pool comes out of the KV cache; up to
0.26 non_kv_cache_memory was the measured weights, the non-torch increase and the torch peak's increase over the
profile run, none of which holds the pool: the KV cache is sized as without it, and the pool takes GPU memory
beyond --gpu-memory-utilization.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvcheck.engines.offload import GIB, WeightOffload, int_arg, selected_layers
from kvcheck.engines.vllm.sizing.weights import stage_layer_counts
from kvcheck.errors import EngineRefusal
from kvcheck.model import RoleTarget

POOL_COUNTED_FROM = (0, 27, 0)  # sizing/memory.py TOTAL_CONSUMED_FROM: the profiler sees the staging pool
SOURCE = "model_executor/offloader/prefetch.py"


def backend(args: Mapping[str, Any]) -> str:
    """The offloader vLLM builds: "prefetch", "uva" or "none" (create_offloader, base.py:142-178 in 0.32.0)."""
    chosen = str(args.get("offload_backend") or "auto")
    if chosen != "auto":
        return chosen
    if int_arg(args, "offload_group_size", 0) > 0:
        return "prefetch"
    gib = args.get("cpu_offload_gb") or 0
    return "uva" if isinstance(gib, int | float) and gib > 0 else "none"


def check_config(target: RoleTarget) -> None:
    """OffloadConfig.validate_offload_config (config/offload.py:97-112 in 0.32.0, the same from 0.17.0), run as
    EngineArgs.create_engine_config builds the config (engine/arg_utils.py:2806): with the prefetch backend named
    or a group size above 0, vLLM refuses a group that offloads more layers than it holds and a prefetch step
    below 1 (ValueError, before any model loads)."""
    args = target.args
    group = int_arg(args, "offload_group_size", 0)
    if not (args.get("offload_backend") == "prefetch" or group > 0):
        return
    num_in_group = int_arg(args, "offload_num_in_group", 1)
    step = int_arg(args, "offload_prefetch_step", 1)
    if num_in_group > group:
        raise _refuse(target, ("offload_num_in_group", "offload_group_size", "offload_backend"),
                      f"offload_num_in_group ({num_in_group}) must be <= offload_group_size ({group})",
                      hint="set --offload-group-size to the layers of a group (above 0) and --offload-num-in-group "
                      "to at most that many")
    if step < 1:
        raise _refuse(target, ("offload_prefetch_step",),
                      f"offload_prefetch_step ({step}) must be >= 1 when prefetch offloading is enabled "
                      "(offload_group_size > 0)",
                      hint="set --offload-prefetch-step to 1 or more (the default is 1)")


def _refuse(target: RoleTarget, fields: tuple[str, ...], reason: str, hint: str) -> EngineRefusal:
    where = target.arg_location(*fields)
    prefix = f"{where.render()}: " if where is not None else ""
    release = f"vLLM {target.engine_version}" if target.engine_version else "vLLM"
    return EngineRefusal(f"{prefix}role {target.name}: {release} refuses these offload settings before any model "
                          f"loads: OffloadConfig raises '{reason}' (config/offload.py)", hint=hint)


@dataclass(frozen=True)
class LayerFigures:
    """One worker's decoder layers as the weights are counted: a dense layer's bytes, a routed-expert layer's, the
    layers before the first routed-expert one (first_k_dense_replace), and whether the count holds layer by layer
    (a hybrid's layers are not counted one by one: both figures are then a bound on its largest layer)."""

    dense_bytes: float
    moe_bytes: float
    first_moe: int  # 0 for a model whose every layer has routed experts; num_layers for a dense model
    counted: bool

    def kind(self, layer: int) -> str:
        return "dense" if layer < self.first_moe else "moe"

    def bytes_of(self, kind: str) -> float:
        return self.dense_bytes if kind == "dense" else self.moe_bytes


@dataclass(frozen=True)
class _StageNet:
    low: float
    point: float
    high: float
    moved: float
    staging: float  # the figure's staging pool
    layers: int  # moved layers
    count: int  # the stage's layers
    pool: tuple[float, float] = (0.0, 0.0)  # (fewest, most) bytes the staging pool takes on the GPU


def _stage(figures: LayerFigures, start: int, count: int, group: int, num_in_group: int, step: int,
           by_name: bool, pool_counted: bool) -> _StageNet:
    """Net bytes off one stage's GPU: (low, figure, high), as a price where the layers are counted one by one and
    all moved layers are of one kind with every parameter moving, else a bound."""
    picked = [start + i for i in selected_layers(count, group, num_in_group)]
    counts: dict[str, int] = {}
    for layer in picked:
        counts[figures.kind(layer)] = counts.get(figures.kind(layer), 0) + 1
    sizes = {kind: figures.bytes_of(kind) for kind in counts}
    moved = sum(counts[kind] * sizes[kind] for kind in counts)
    slots = step if picked else 0  # no offloaded module: post_init allocates no pool
    if not figures.counted:  # a hybrid: two kinds of layer, each at most the bound
        largest = max(sizes.values(), default=0.0)
        low = min(0, len(picked) - 2 * slots) * largest if pool_counted else 0.0
        high = len(picked) * largest
        return _StageNet(low, low, high, moved, slots * largest, len(picked), count,
                         (0.0, slots * largest))  # the bound says nothing of a layer's least bytes
    if by_name:  # --offload-params: some of each layer's parameters, as many bytes as their names say
        if len(counts) == 1:
            (kind,) = counts
            low = min(0, counts[kind] - slots) * sizes[kind] if pool_counted else 0.0
            high = max(0, counts[kind] - (slots if pool_counted else 0)) * sizes[kind]
        else:
            low = sum(min(0, n - slots) * sizes[k] for k, n in counts.items()) if pool_counted else 0.0
            high = moved
        # the parameters it names: from none of a layer's bytes to all of them per slot
        return _StageNet(low, low, high, moved, slots * max(sizes.values(), default=0.0), len(picked), count,
                         (0.0, slots * sum(sizes.values())))
    # every parameter of each moved layer: one copy per distinct parameter, so one layer of each kind per slot; a
    # dense and a routed-expert layer share their attention's names and shapes, which the count does not split
    smallest_pool = slots * max(sizes.values(), default=0.0)
    largest_pool = slots * sum(sizes.values())
    if not pool_counted:
        return _StageNet(moved, moved, moved, moved, smallest_pool, len(picked), count, (smallest_pool, largest_pool))
    return _StageNet(moved - largest_pool, moved - largest_pool, moved - smallest_pool, moved, largest_pool,
                     len(picked), count, (smallest_pool, largest_pool))


def _experts_stay(net: _StageNet, figures: LayerFigures, picked_moe: bool, pool_counted: bool) -> _StageNet:
    """A stage whose moved routed-expert layers may keep their experts on the GPU: the figure and low end move no
    expert bytes (at most a layer's non-expert parameters move, each at most a dense layer, and as many staging
    copies as the pool holds are charged where the profiler counts them); the high end is unchanged."""
    if not picked_moe:
        return net
    slots = round(net.pool[1] / max(figures.moe_bytes, 1.0)) if figures.moe_bytes else 0
    low = min(0, net.layers - slots) * figures.dense_bytes if pool_counted else 0.0
    return _StageNet(min(low, net.low), min(low, net.point), net.high, net.moved, net.staging, net.layers,
                     net.count, (0.0, net.pool[1]))


def prefetch_offload(target: RoleTarget, figures: LayerFigures, *, num_layers: int, pp: int,
                     release: tuple[int, ...] | None, band: float, experts_replaced: str = "") -> WeightOffload:
    """The prefetch backend's net bytes off each GPU (kvcheck.engines.offload.WeightOffload): a price, at the
    weights' band, for layers of one kind moved whole; a bound (KV113) for mixed kinds, a hybrid or --offload-params.
    An unstated release may predate 0.27.0: the range's high end then leaves the staging pool uncounted."""
    args = target.args
    group = int_arg(args, "offload_group_size", 0)
    num_in_group = int_arg(args, "offload_num_in_group", 1)
    step = int_arg(args, "offload_prefetch_step", 1)
    by_name = bool(args.get("offload_params"))
    counted = release is None or release >= POOL_COUNTED_FROM
    stages: list[tuple[_StageNet, _StageNet]] = []
    start = 0
    for count in stage_layer_counts(num_layers, pp, target.env):
        net = _stage(figures, start, count, group, num_in_group, step, by_name, counted)
        free = net if release is not None else _stage(figures, start, count, group, num_in_group, step, by_name,
                                                      False)
        if experts_replaced:
            picked_moe = any(figures.kind(start + i) == "moe" for i in selected_layers(count, group, num_in_group))
            net = _experts_stay(net, figures, picked_moe, counted)
        stages.append((net, free))
        start += count
    worst = min(stages, key=lambda s: s[0].point)[0]  # the stage whose pool is smallest sizes every worker's
    low = min(s[0].low for s in stages)
    point = worst.point
    high = min(s[1].high for s in stages)
    # the staging copies are GPU memory on every release: where the high end does not net them out (a profiler
    # that does not count them, or an unstated release), the room checks take the fewest back
    uncounted = release is None or not counted
    fewest_copies = min(_pool_bounds(s[1])[0] for s in stages) if uncounted else 0.0
    outside = ((min(_pool_bounds(s[0])[0] for s in stages), max(_pool_bounds(s[0])[1] for s in stages))
               if not counted else (0.0, 0.0))
    priced = figures.counted and not by_name and low == point == min(s[0].high for s in stages) \
        and not (experts_replaced and point < high)
    setting = (f"--offload-group-size {group} --offload-num-in-group {num_in_group} --offload-prefetch-step {step}"
               + (" --offload-params" if by_name else ""))
    what = ("the parameters --offload-params names in" if by_name else "every parameter of")
    note = (f"{setting}: vLLM's PrefetchOffloader moves {what} {worst.layers} of the {worst.count} layers on "
            f"{'each GPU' if pp == 1 else 'the GPU of the stage with the smallest pool'} to the CPU (the last "
            f"{num_in_group} of every {group}; {SOURCE}) as it builds the model")
    if priced:
        copies = f"{step} staging {'copy' if step == 1 else 'copies'} of a moved layer ({worst.staging / GIB:.3f} GiB)"
        when = "allocated after the weights are measured and before the memory profile"
        if counted:
            kept = (f"less the {copies} kept on it ({when}, which from 0.27.0 counts it"
                    + ("; an earlier release would not, the range's high end" if release is None else "") + ")")
        else:
            kept = (f"while the {copies} it keeps ({when}) are not counted by the profile up to 0.26: they take "
                    "GPU memory beyond --gpu-memory-utilization, not the pool's")
        note += (f": {worst.moved / GIB:.3f} GiB off the GPU, {kept}; {point / GIB:.3f} GiB net, priced from the "
                 f"layers' count (+-{band:.0%})")
    else:
        why = (f"{experts_replaced}: the figure moves no routed-expert bytes, the high end moves them all"
               if experts_replaced and not by_name and figures.counted else
               "--offload-params moves the parameters whose names it matches, which config.json does not size"
               if by_name else "a hybrid's layers are not counted one by one (each is taken at twice the mean)"
               if not figures.counted else "the moved layers are of two kinds (dense and routed-expert), whose "
               "staging copies share the attention's parameters, which the count does not split")
        note += (f", which the estimate does not price exactly ({why}): the figure takes {point / GIB:.3f} GiB off "
                 f"each GPU, the range's high end {high / GIB:.3f} GiB")
    return WeightOffload(
        engine="vLLM", setting=setting, flag="--offload-group-size", field="offload_group_size", note=note,
        low_bytes=_banded(low, -1, band), point_bytes=point, high_bytes=_banded(high, 1, band), priced=priced,
        basis=("with no routed-expert bytes off the GPU" if experts_replaced and not priced else
               "with the fewest weight bytes off the GPU these settings allow"),
        gpu_staging_bytes=fewest_copies * (1 - band),
        staging_outside_bytes=(outside[0] * (1 - band), outside[1] * (1 + band)),
    )


def _pool_bounds(net: _StageNet) -> tuple[float, float]:
    """(fewest, most) GPU bytes of one stage's staging pool."""
    return net.pool


def _banded(net: float, end: int, band: float) -> float:
    """A net figure at one end of the weights' band: smaller at the low end, larger at the high end."""
    return min(net * (1 - band), net * (1 + band)) if end < 0 else max(net * (1 - band), net * (1 + band))

