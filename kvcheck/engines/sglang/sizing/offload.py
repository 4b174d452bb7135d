"""SGLang's group weight offload (OffloaderV2: `--offload-group-size`, `--offload-num-in-group`,
`--offload-prefetch-step`, `--offload-mode`; flags from 0.5.1, srt/offloader.py up to 0.5.2, srt/utils/offloader.py
from 0.5.3, read in 0.5.1 to 0.5.4, 0.5.9, 0.5.13 to 0.5.23).

create_offloader (utils/offloader.py:68-83 in 0.5.23, the same order in every release read) builds OffloaderV1 when
`--cpu-offload-gb` is above 0 and OffloaderV2 only otherwise, so its assertion that cpu_offload_gb is 0 never fails:
with both set the group flags are ignored. OffloaderV2.wrap_modules (:234-276) takes the last
`--offload-num-in-group` of every `--offload-group-size` layers of the stage's make_layers stack
(`module_index % group_size >= group_size - num_in_group`) and asks the model class which submodule and parameters
to move: only the DeepSeek-V2 model (models/deepseek_v2.py, behind DeepSeek-V2/V3/V3.2, Kimi-K2.5, GLM-5, Mistral
Large 3) says, naming its routed experts' `w13_weight` and `w2_weight` (and NVFP4's swizzled block scales); a dense
layer's MLP names none. `--offload-mode cpu` (and `meta`, `shm_cpu`) moves them to host memory as the model is
built; post_init (model_runner.py:1330, before the free memory is read at :1364 and the pool sized) copies the
first `--offload-prefetch-step` offloaded layers' experts back for the first forward, and from then on each layer's
forward fetches the one prefetch_step ahead and drops its own. `sharded_gpu` keeps a 1/DP shard of each on every GPU.

What moves is not priced: a quantization method that re-creates the expert tensors on the GPU after loading leaves
them there, and from 0.5.21 tensors cached beside the parameters keep them resident. The figure keeps every weight
on the GPU (what moves, less the copies post_init brings back, is never negative), and the range's high end moves
the experts, as config.json counts them, of the offloaded layers after the first prefetch_step: KV113.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvcheck.engines.offload import GIB, WeightOffload, ignored, int_arg, selected_layers
from kvcheck.errors import EstimateError

SOURCE = "srt/utils/offloader.py"
# The architectures whose SGLang model builds its layers through DeepseekV2Model, the one model that passes
# offloader_kwargs to make_pp_layers (models/deepseek_v2.py:2973-2996 in 0.5.23; the only one in every release read)
DEEPSEEK_V2_MODEL = frozenset({
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM",
    "MistralLarge3ForCausalLM", "KimiK25ForConditionalGeneration", "KimiVLForConditionalGeneration",
    "DeepseekVL2ForCausalLM", "DotsVLMForCausalLM",
})  # fmt: skip
MODES = ("cpu", "meta", "shm_cpu", "sharded_gpu")  # _BaseParamOffloader.create (:387-393)
SHARED_MODES = frozenset({"shm_cpu", "sharded_gpu"})  # OffloaderV2.__init__ asserts tp_size == 1 (:216-217)


@dataclass(frozen=True)
class GroupSettings:
    """OffloaderV2's settings, as ServerArgs defaults them (-1, 1, 1, "cpu")."""

    group_size: int
    num_in_group: int
    prefetch_step: int
    mode: str

    @property
    def text(self) -> str:
        return (f"--offload-group-size {self.group_size} --offload-num-in-group {self.num_in_group} "
                f"--offload-prefetch-step {self.prefetch_step} --offload-mode {self.mode}")

    def by_stage(self, stage_ranges: Sequence[range]) -> list[list[int]]:
        """The layers (global indices) each pipeline stage's OffloaderV2 offloads, in its order."""
        return [[r[i] for i in selected_layers(len(r), self.group_size, self.num_in_group)] for r in stage_ranges]


def group_settings(args: Mapping[str, Any]) -> GroupSettings | None:
    """The settings when SGLang builds OffloaderV2: --offload-group-size above 0 and no --cpu-offload-gb."""
    group = int_arg(args, "offload_group_size", -1)
    gib = args.get("cpu_offload_gb") or 0
    if group <= 0 or (isinstance(gib, int | float) and gib > 0):
        return None
    return GroupSettings(group, int_arg(args, "offload_num_in_group", 1), int_arg(args, "offload_prefetch_step", 1),
                         str(args.get("offload_mode") or "cpu"))


def group_offload(settings: GroupSettings, architecture: str, stage_ranges: Sequence[range],
                  expert_bytes: Sequence[float]) -> WeightOffload:
    """The experts OffloaderV2 may take off each rank's GPU, as a bound per stage (kvcheck.engines.offload), once
    refusals.check_group_offload has passed the settings. A model class SGLang does not offload through, at a
    prefetch step that does not stop its start: nothing moves if it builds no layer through make_layers, a
    TypeError stops it if it does, which the estimate cannot tell (EstimateError)."""
    picked = settings.by_stage(stage_ranges)
    if architecture not in DEEPSEEK_V2_MODEL:
        if any(picked):
            raise EstimateError(
                f"{settings.text}: {architecture}'s SGLang model does not name the submodule OffloaderV2 offloads; "
                "with --offload-prefetch-step 0 it moves nothing if the class builds its layers without make_layers, "
                "and stops loading with a TypeError (OffloaderV2.wrap_modules) if it builds them with it, which the "
                "estimate does not know", hint="drop the group offload flags, or measure the role")
        return ignored("SGLang", f"{settings.text}: no layer falls in a group's last {settings.num_in_group}, so "
                       "OffloaderV2 moves nothing")
    if settings.mode == "sharded_gpu":
        raise EstimateError(
            f"{settings.text}: OffloaderV2's sharded_gpu mode keeps a 1/DP shard of every offloaded expert tensor on "
            "each GPU and shares it over CUDA IPC, with the full tensors of the prefetched layers beside it, which "
            "the estimate does not price", hint="measure the role, or use --offload-mode cpu")
    stage_high = []
    for layers in picked:
        # post_init brings back the first prefetch_step layers' experts: what stays off is the rest's
        stage_high.append(sum(expert_bytes[i] for i in layers[max(0, settings.prefetch_step):]))
    if not any(stage_high):
        return ignored("SGLang", f"{settings.text}: the layers OffloaderV2 offloads beyond the first "
                       f"{settings.prefetch_step}, which post_init copies back, have no routed experts, the only "
                       "weights it moves: nothing leaves the GPU")
    high = max(stage_high)
    moved = max(len(layers) for layers in picked)
    note = (f"{settings.text}: SGLang's OffloaderV2 moves the routed experts (w13_weight, w2_weight) of the MoE "
            f"layers among the last {settings.num_in_group} of every {settings.group_size} of each rank's layers "
            f"({moved} offloaded a rank) to host memory as the model is built, and copies the first "
            f"{settings.prefetch_step} back before the pool is sized ({SOURCE}); which expert tensors stay moved "
            "depends on the quantization method (one that re-creates them after loading keeps them on the GPU), so "
            "the estimate does not price it: the figure keeps every weight on the GPU, the range's high end moves "
            f"up to {high / GIB:.2f} GiB per GPU (the experts of the offloaded layers after the first "
            f"{settings.prefetch_step}, as config.json counts them)"
            + ("; meta mode discards the moved weights (a debugging mode: the server's answers are not the model's)"
               if settings.mode == "meta" else ""))
    return WeightOffload(engine="SGLang", setting=settings.text, flag="--offload-group-size",
                         field="offload_group_size", note=note, high_bytes=high, stage_high_bytes=tuple(stage_high))
