"""How vLLM's fused-MoE layers place the routed experts on a GPU under data and expert parallelism.

vllm/model_executor/layers/fused_moe/config.py `FusedMoEParallelConfig.make` (in layer.py for 0.9.0-0.11.0,
inlined in `FusedMoE.__init__` for 0.8.x): a MoE layer flattens TP across DP, its group is
`data_parallel_size x tensor_parallel_size` GPUs. Without `--enable-expert-parallel` every routed expert is
split over that group (`intermediate_size // (dp x tp)`, which `FusedMoE` asserts divides); with it each GPU
holds whole experts, the routed experts plus EPLB's redundant ones dealt over the group by
`determine_expert_map`. Everything else (attention, dense MLPs, shared experts, the router, embedding and
lm_head) is a full replica per DP rank split over that rank's own TP group, except the DeepSeek-family and
NemotronH shared experts under sequence-parallel MoE, which are replicated on every GPU (`disable_tp`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvcheck.engines.vllm.sizing.jsonargs import json_arg
from kvcheck.errors import EstimateError

Release = tuple[int, ...]

# 0.8.0-0.8.3 FusedMoE.__init__: use_ep = enable_expert_parallel and tp_size > 1 (TP alone): at TP 1 the
# flag is ignored and the experts are split over DP as TP; from 0.8.4 use_ep needs tp_size x dp_size > 1.
EP_OVER_DP_FROM: Release = (0, 8, 4)
# determine_expert_map (fused_moe/layer.py; expert_map_manager.py from 0.22.0): up to 0.10.0 every EP rank
# but the last holds experts // ep and the last the remainder; from 0.10.1 the first experts % ep ranks hold
# one more (ceil).
EVEN_REMAINDER_FROM: Release = (0, 10, 1)
# --enable-eplb / --num-redundant-experts from 0.9.2 (ParallelConfig); eplb_config.num_redundant_experts
# from 0.10.2 (the top-level flag is forwarded to it up to 0.11.x, removed in 0.12.0).
EPLB_FROM: Release = (0, 9, 2)
# Shared experts replicated per GPU (DeepseekV2MLP / NemotronHMLP disable_tp=is_sequence_parallel):
# deepseek_v2.py DeepseekV2MoE from 0.10.2 (0.10.2: VLLM_ALL2ALL_BACKEND deepep_* with EP and TP > 1;
# from 0.11.0 ParallelConfig.use_sequence_parallel_moe), nemotron_h.py NemotronHMoE from 0.11.1.
DEEPSEEK_SP_SHARED_FROM: Release = (0, 10, 2)
SEQUENCE_PARALLEL_FROM: Release = (0, 11, 0)
NEMOTRON_SP_SHARED_FROM: Release = (0, 11, 1)
DEEPSEEK_SHARED_ARCHITECTURES = frozenset({
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration",
})  # fmt: skip
NEMOTRON_SHARED_ARCHITECTURES = frozenset({"NemotronHForCausalLM"})
# qwen3_next.py Qwen3NextSparseMoeBlock passes is_sequence_parallel to its shared expert from 0.20.0
# (Qwen2MoeMLP disable_tp); Qwen3.5-MoE builds that block (qwen3_5.py). Qwen2-MoE's own block does not.
QWEN_NEXT_SP_SHARED_FROM: Release = (0, 20, 0)
QWEN_NEXT_SHARED_ARCHITECTURES = frozenset({
    "Qwen3NextForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration",
})  # fmt: skip
# ParallelConfig.__post_init__ from 0.19.0: "The 'pplx'/'naive' all2all backend has been removed. Falling
# back to 'allgather_reducescatter'."
REMOVED_BACKENDS_FALL_BACK_FROM: Release = (0, 19, 0)
# fused_moe/layer.py (0.10.2 on): "EPLB currently only supports even distribution of experts across ranks"
EPLB_EVEN_FROM: Release = (0, 10, 2)
# ParallelConfig (0.11.0 on) refuses --enable-eplb without --enable-expert-parallel
EPLB_NEEDS_EP_FROM: Release = (0, 11, 0)
_DEEPEP = ("deepep_high_throughput", "deepep_low_latency")
# ParallelConfig.use_sequence_parallel_moe's all2all backends (vllm/config/parallel.py), by the release that
# changed the list
_SP_BACKENDS: tuple[tuple[Release, frozenset[str]], ...] = (
    ((0, 11, 0), frozenset({"allgather_reducescatter", "naive", *_DEEPEP})),
    ((0, 15, 0), frozenset({"allgather_reducescatter", "naive", *_DEEPEP, "mori"})),
    ((0, 18, 0), frozenset({"allgather_reducescatter", "naive", *_DEEPEP, "mori", "nixl_ep"})),
    ((0, 19, 0), frozenset({"allgather_reducescatter", *_DEEPEP, "mori", "nixl_ep"})),
    ((0, 23, 0), frozenset({"allgather_reducescatter", *_DEEPEP, "mori_high_throughput", "mori_low_latency",
                            "nixl_ep"})),
    ((0, 29, 0), frozenset({"allgather_reducescatter", *_DEEPEP, "flashinfer_nvlink_one_sided",
                            "mori_high_throughput", "mori_low_latency", "nixl_ep"})),
    ((0, 31, 0), frozenset({"allgather_reducescatter", *_DEEPEP, "deepep_v2", "flashinfer_nvlink_one_sided",
                            "mori_high_throughput", "mori_low_latency", "nixl_ep"})),
    ((0, 32, 0), frozenset({"allgather_reducescatter", *_DEEPEP, "deepep_v2", "flashinfer_nvlink_one_sided",
                            "passthrough", "mori_high_throughput", "mori_low_latency", "nixl_ep"})),
)
DEFAULT_ALL2ALL = "allgather_reducescatter"  # VLLM_ALL2ALL_BACKEND's default from 0.11.0 ("naive" before)
FLAG_ALL2ALL_FROM: Release = (0, 11, 1)  # --all2all-backend (None: the env var, up to 0.13.x)
ENV_OVERRIDES_FROM: Release = (0, 14, 0)  # the flag defaults to allgather_reducescatter; a set env var wins
ENV_ALL2ALL_UNTIL: Release = (0, 15, 99)  # VLLM_ALL2ALL_BACKEND no longer read from 0.16.0


@dataclass(frozen=True)
class MoeSplit:
    """The routed experts one GPU holds. `ep` False: every expert split `dp x tp` ways; True: whole experts,
    `experts + redundant` dealt over the `dp x tp` GPUs, the most loaded GPU's share priced."""

    tp: int
    dp: int = 1
    ep: bool = False
    redundant: int = 0
    last_takes_remainder: bool = False
    replicate_shared: bool = False
    all2all: str | None = None
    eplb_even: bool = False  # EPLB on a release that refuses an uneven deal of the experts

    @property
    def group(self) -> int:
        return self.tp * self.dp

    def local_experts(self, experts: int) -> int:
        """Whole experts on the most loaded GPU under EP (determine_expert_map)."""
        physical, group = experts + self.redundant, self.group
        if self.last_takes_remainder:
            return physical - (group - 1) * (physical // group)
        return -(-physical // group)

    def routed(self, experts: int, expert_params: int) -> float:
        """Parameters of the routed experts on the most loaded GPU: `expert_params` is one expert's."""
        if self.ep:
            return float(self.local_experts(experts) * expert_params)
        return experts * expert_params / self.group

    def shared_tp(self) -> int:
        return 1 if self.replicate_shared else self.tp

    def check_split(self, experts: int, intermediate: int) -> None:
        """FusedMoE asserts `intermediate_size % tp_size == 0` on its flattened TP (fused_moe/layer.py
        FusedMoE.__init__; FusedMoEConfig in config.py from 0.32.0): vLLM does not start otherwise."""
        if experts and self.ep and self.eplb_even and (experts + self.redundant) % self.group:
            raise EstimateError(
                f"EPLB over {self.group} expert-parallel GPUs with {experts} experts + {self.redundant} redundant: "
                "vLLM refuses it ('EPLB currently only supports even distribution of experts across ranks', "
                "fused_moe/layer.py)",
                hint="pick --num-redundant-experts / eplb_config.num_redundant_experts so that the experts divide "
                "evenly over data x tensor parallel")
        if experts and intermediate and not self.ep and intermediate % self.group:
            raise EstimateError(
                f"vLLM's fused MoE splits each expert over data x tensor parallel = {self.dp} x {self.tp} = "
                f"{self.group} GPUs and asserts its moe_intermediate_size {intermediate} divides by {self.group}: "
                "the start fails",
                hint="add --enable-expert-parallel (whole experts per GPU), or pick a data/tensor parallel size "
                "that divides the expert width")

    def differs_from_tp(self, experts: int) -> bool:
        """Whether this split puts other than experts / tp of the routed experts on the most loaded GPU."""
        if self.replicate_shared or self.redundant:
            return True
        if not self.ep:
            return self.dp > 1
        return self.dp > 1 or self.local_experts(experts) * self.tp != experts

    def describe(self, experts: int) -> str:
        if self.ep:
            extra = f" incl. {self.redundant} redundant (EPLB)" if self.redundant else ""
            text = (f"MoE: expert parallel over dp x tp = {self.group} GPUs, {self.local_experts(experts)} of "
                    f"{experts + self.redundant} experts{extra} on the most loaded GPU")
        else:
            text = f"MoE: each routed expert split over dp x tp = {self.group} GPUs (FusedMoE flattens TP across DP)"
        if self.replicate_shared:
            text += f"; sequence-parallel MoE (all2all {self.all2all}): shared experts replicated on every GPU"
        return text


def _on(value: Any) -> bool:
    if value is None or value is False:
        return False
    if value is True:
        return True
    return str(value).strip().lower() not in ("", "false", "0", "no", "off", "none")


def _count(value: Any, flag: str) -> int:
    try:
        count = int(value)
    except (TypeError, ValueError) as exc:
        raise EstimateError(f"{flag} {value!r} is not a whole number") from exc
    if count < 0:
        raise EstimateError(f"{flag} {count} is negative: vLLM refuses it")
    return count


def redundant_experts(args: Mapping[str, Any]) -> int:
    """--num-redundant-experts (0.9.2-0.11.x; it wins, forwarded into eplb_config) or --eplb-config's."""
    if args.get("num_redundant_experts") is not None:
        return _count(args["num_redundant_experts"], "--num-redundant-experts")
    value = json_arg(args.get("eplb_config"), "--eplb-config").get("num_redundant_experts")
    return 0 if value is None else _count(value, "--eplb-config num_redundant_experts")


def _all2all(args: Mapping[str, Any], env: Mapping[str, str], release: Release) -> str:
    """The all2all backend ParallelConfig resolves (vllm/config/parallel.py __post_init__, envs.py)."""
    flag = args.get("all2all_backend") if release >= FLAG_ALL2ALL_FROM else None
    env_value = (env.get("VLLM_ALL2ALL_BACKEND") or "").strip() if release <= ENV_ALL2ALL_UNTIL else ""
    default = DEFAULT_ALL2ALL if release >= SEQUENCE_PARALLEL_FROM else "naive"
    if release >= ENV_OVERRIDES_FROM:
        backend = env_value or str(flag or default)
    else:
        backend = str(flag or env_value or default)  # flag None -> env -> default
    if release >= REMOVED_BACKENDS_FALL_BACK_FROM and backend in ("pplx", "naive"):
        return "allgather_reducescatter"
    return backend


def _sequence_parallel(args: Mapping[str, Any], env: Mapping[str, str], release: Release, *, tp: int, dp: int,
                       ep: bool) -> tuple[bool, str]:
    """ParallelConfig.use_sequence_parallel_moe (0.11.0+): EP, TP > 1, DP > 1 and an all2all backend of
    the release's list."""
    backend = _all2all(args, env, release)
    if release < SEQUENCE_PARALLEL_FROM or not (ep and tp > 1 and dp > 1):
        return False, backend
    backends = _SP_BACKENDS[0][1]
    for since, names in _SP_BACKENDS:
        if release >= since:
            backends = names
    return backend in backends, backend


def moe_split(args: Mapping[str, Any], env: Mapping[str, str], release: Release | None, *, tp: int, dp: int,
              architecture: str) -> MoeSplit:
    """How vLLM `release` (None: the newest rules) places a MoE model's experts for these arguments."""
    rel: Release = release if release is not None else (99,)
    flag = _on(args.get("enable_expert_parallel"))
    ep = flag and (tp * dp > 1 if rel >= EP_OVER_DP_FROM else tp > 1)
    eplb = _on(args.get("enable_eplb")) and rel >= EPLB_FROM
    redundant = redundant_experts(args) if rel >= EPLB_FROM else 0
    if redundant and not eplb:
        raise EstimateError(f"--num-redundant-experts {redundant} without --enable-eplb: vLLM refuses it "
                            "(ParallelConfig: num_redundant_experts should be used with EPLB)")
    if eplb and not ep and rel >= EPLB_NEEDS_EP_FROM:
        raise EstimateError("--enable-eplb without --enable-expert-parallel: vLLM refuses it (ParallelConfig: "
                            "EPLB places experts on expert-parallel ranks)",
                            hint="add --enable-expert-parallel, or drop --enable-eplb")
    if redundant and not ep:
        raise EstimateError(f"{redundant} redundant experts without expert parallelism over more than one GPU: "
                            "EPLB places them on EP ranks (vLLM from 0.11 refuses EPLB without "
                            "--enable-expert-parallel); the vLLM estimate does not price them otherwise",
                            hint="add --enable-expert-parallel, or drop the redundant experts")
    sp, backend = _sequence_parallel(args, env, rel, tp=tp, dp=dp, ep=ep)
    replicate = False
    if architecture in DEEPSEEK_SHARED_ARCHITECTURES and rel >= DEEPSEEK_SP_SHARED_FROM:
        if rel < SEQUENCE_PARALLEL_FROM:  # 0.10.2 DeepseekV2MoE: deepep backends with EP and TP > 1
            replicate = backend in _DEEPEP and ep and tp > 1
        else:
            replicate = sp
    elif architecture in NEMOTRON_SHARED_ARCHITECTURES and rel >= NEMOTRON_SP_SHARED_FROM:
        replicate = sp
    elif architecture in QWEN_NEXT_SHARED_ARCHITECTURES and rel >= QWEN_NEXT_SP_SHARED_FROM:
        replicate = sp
    return MoeSplit(tp=tp, dp=dp, ep=ep, redundant=redundant, last_takes_remainder=rel < EVEN_REMAINDER_FROM,
                    replicate_shared=replicate, all2all=backend if replicate else None,
                    eplb_even=eplb and rel >= EPLB_EVEN_FROM)
