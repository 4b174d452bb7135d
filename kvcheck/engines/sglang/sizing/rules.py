"""Rules the estimate backend raises: a pool it cannot predict, a window inside its uncertainty."""

from __future__ import annotations

from kvcheck.policy.registry import define_rule

KV305 = define_rule(
    "KV305",
    "error",
    "the pool could not be estimated",
    """Estimate mode could not predict this role's KV pool: the model's architecture or
    quantization is not understood by the estimate model, its config.json could not be read, or the
    GPU has no profile. kvcheck never guesses a pool, so the role counts as not checked (exit 3).
    Fix: set `model.config` to the model's config.json, name a GPU that has a profile in
    `profiles/gpus/`, set `estimate.weights_gib_per_gpu`, or measure the role on a GPU.""",
)

KV105 = define_rule(
    "KV105",
    "warning",
    "the window lies inside the estimate's uncertainty range",
    """The predicted pool holds the window, but the low end of the estimate's range (memory
    taken before SGLang's baseline, weights, loader temporaries) does not: the role might not fit.
    For a vLLM role it also fires when the low end cannot hold one request of `max_model_len`, which
    vLLM needs to start, though it holds a smaller advertised window: vLLM might refuse to start.
    Fix: measure the role on its GPUs (`kvcheck verify` without `--mode estimate`), or give it
    headroom (a higher `mem-fraction-static`, fp8 KV cache, a larger TP).""",
)

KV108 = define_rule(
    "KV108",
    "warning",
    "the estimate cannot tell which release's pool layout applies",
    """DeepSeek-V4's pools are laid out differently by SGLang release: 0.5.12 prices the c4 and
    c128 compress states per sliding-window slot over every layer of the config, 0.5.13 over the
    pipeline stage's layers, 0.5.15 makes the c128 state request-scoped, 0.5.21 pads the rows to
    the FlashMLA page (docs/estimate.md, DeepSeek-V4 by release). When the role's release is not
    stated, is a development build, or is newer than the newest release kvcheck has read, the
    predicted pool is the newest layout's and the range spans every layout: the pool a server
    logs lies inside it, but the point figure may be a layout away (twice too large for 0.5.12).
    Fix: state the release (`engine.version`, or `--sglang-version`), or measure the role.""",
)

KV120 = define_rule(
    "KV120",
    "error",
    "the engine would refuse to start",
    """By the estimate, SGLang would stop at startup instead of serving: the loaded weights leave no
    budget for a KV pool under the memory fraction ("Loaded weights leave no GPU memory for the KV
    cache" from 0.5.14, "Not enough memory. Please try to increase --mem-fraction-static." before),
    DeepSeek-V4's request-scoped state leaves no full-token pool, or a sliding-window pool cannot hold
    one request ("SWA pool (N tokens) cannot hold even one request", from 0.5.16; older releases start
    and hang at warmup instead), or Kimi-K3's MXFP4 experts take a path that cannot load them
    (marlin or flashinfer_mxfp4 on a GPU their kernels do not support; the bf16 upcast SGLang falls
    back to, or the triton_kernel runner, which need the triton_kernels package SGLang does not
    install). The finding quotes the message the declared release prints. The
    predicted pool is 0 tokens, so the gate fails (KV101) rather than passing a deployment the engine
    will not boot, or calling it unchecked.
    Fix: raise `mem-fraction-static` above the minimum the message names, use more GPUs (a larger
    TP), a smaller-weight checkpoint, (SWA models) a larger `swa-full-tokens-ratio`, or (Kimi-K3) the
    MoE runner the hint names.""",
)

KV113 = define_rule(
    "KV113",
    "warning",
    "CPU weight offload is not priced: the pool may be larger than predicted",
    """Weight offload moves layer weights to the CPU before the engine sizes its pool, so the KV pool
    is larger than with every weight on the GPU. `--cpu-offload-gb N` (SGLang's OffloaderV1, vLLM's UVA
    offloader) moves up to N GiB of each GPU's layer weights, parameter by parameter in the model class's
    own order: which parameters depends on the model class (one that does not build its layers through
    make_layers moves none), on quantization methods that replace parameters after loading and on the
    parameters the engine keeps resident. SGLang's group offload (`--offload-group-size`, OffloaderV2)
    moves the routed experts of the last `--offload-num-in-group` layers of every group, less the
    `--offload-prefetch-step` layers it copies back, unless the quantization method re-creates them on
    the GPU. vLLM's group offload (the prefetch backend) is priced, except where the moved layers are of
    two kinds (dense and routed-expert), the model is a hybrid or `--offload-params` picks parameters by
    name. Where the offload is not priced, the predicted pool is the smallest the settings can leave
    (every weight on the GPU, or vLLM's staging copies at their largest) and the range's high end moves
    the most they can; the finding names the flags, the mode included. A role that fails in estimate
    mode may fit.
    Fix: measure the role on its GPUs (`kvcheck verify` without `--mode estimate`), or size the
    deployment without the offload.""",
)
