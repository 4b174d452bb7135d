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

The estimate stops on the settings SGLang stops on (refusals.check_group_offload); what moves is not priced
yet: the estimate ignores the flags otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvcheck.engines.offload import selected_layers

# The architectures whose SGLang model builds its layers through DeepseekV2Model, the one model that passes
# offloader_kwargs to make_pp_layers (models/deepseek_v2.py:2973-2996 in 0.5.23; the only one in every release read)
DEEPSEEK_V2_MODEL = frozenset({
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM",
    "MistralLarge3ForCausalLM", "KimiK25ForConditionalGeneration", "KimiVLForConditionalGeneration",
    "DeepseekVL2ForCausalLM", "DotsVLMForCausalLM",
})  # fmt: skip
MODES = ("cpu", "meta", "shm_cpu", "sharded_gpu")  # _BaseParamOffloader.create (:387-393)
SHARED_MODES = frozenset({"shm_cpu", "sharded_gpu"})  # OffloaderV2.__init__ asserts tp_size == 1 (:216-217)


def _int(args: Mapping[str, Any], name: str, default: int) -> int:
    value = args.get(name)
    try:
        return default if value is None else int(value)
    except (TypeError, ValueError):
        return default


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
    group = _int(args, "offload_group_size", -1)
    gib = args.get("cpu_offload_gb") or 0
    if group <= 0 or (isinstance(gib, int | float) and gib > 0):
        return None
    return GroupSettings(group, _int(args, "offload_num_in_group", 1), _int(args, "offload_prefetch_step", 1),
                         str(args.get("offload_mode") or "cpu"))
