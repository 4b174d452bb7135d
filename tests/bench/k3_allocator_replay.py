"""Replay one Kimi-K3 rank's load through a model of PyTorch's caching allocator, to check the segments the
estimate counts as pinned after the MoE-front merge (sizing/allocator.py pinned_segment, sizing/weights.py).

Usage: python tests/bench/k3_allocator_replay.py

SGLang's "Load weight end ... mem usage" is the device memory reserved once the weights are loaded and the
cache emptied. The estimate prices each tensor's own rounding and, where Kimi-K3's w13 bias takes the router
gate's split tail, the gate's segment that stays reserved once _merge_front_weights frees the gate. This
script replays the whole allocation sequence instead: construction in module order (models/kimi_k3.py,
kimi_k3_vl.py and layers/quantization/mxfp4.py create_weights, 0.5.19), post_load_weights (the MLA w_kc/w_vc
copies, the attention-residual weight caches, the front and [f_a | b] merges, the fused-decode stashes), then
process_weights_after_loading as the layout's path runs it (the deep_gemm runner's scale re-layout, or marlin's
re-made biases; the other paths' weight re-layouts are not replayed), through the allocator's rules (c10/cuda/CUDACachingAllocator.cpp:
512 B rounding; 2 MiB segments for requests up to 1 MiB, 20 MiB for those under 10 MiB, the request rounded
to 2 MiB beyond; best fit per pool; a block split where more than 1 MiB (large pool) or 512 B (small pool)
is left; neighbours coalesced on free; empty_cache releasing only wholly free segments).

It prints, per layout, the reserved bytes beyond the live tensors with and without the merges, and what the
estimate prices as pinned. A model, not a measurement: a GPU run comparing torch.cuda.mem_get_info with the
allocator's reserved bytes around load_model would settle it.
"""

from __future__ import annotations

import bisect
import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path

MIB = 1 << 20
GIB = float(1 << 30)
SMALL_SIZE, SMALL_BUFFER, LARGE_BUFFER, MIN_LARGE_ALLOC, ROUND_LARGE = MIB, 2 * MIB, 20 * MIB, 10 * MIB, 2 * MIB
BF16, FP32 = 2, 4

# Kimi-K3 (tests/data/models/moonshotai--Kimi-K3.json)
HIDDEN, LATENT, INTER, EXPERTS, SHARED_INTER, DENSE_INTER = 7168, 3584, 3072, 896, 6144, 33792
HEADS, HEAD_DIM, VOCAB, LAYERS = 96, 128, 163840, 93
MLA_LAYERS = frozenset(range(3, 92, 4)) | {92}  # 24 full-attention layers; the other 69 are KDA


@dataclass(eq=False)
class Block:
    segment: int
    addr: int
    size: int
    pool: str
    free: bool = True
    prev: Block | None = None
    next: Block | None = None


@dataclass
class Allocator:
    pools: dict[str, list[tuple[int, int, Block]]] = field(default_factory=lambda: {"small": [], "large": []})
    segments: list[int] = field(default_factory=list)  # segment sizes
    live: dict[int, tuple[Block, int]] = field(default_factory=dict)
    reserved: int = 0
    allocated: int = 0
    _ids: itertools.count = field(default_factory=itertools.count)
    _next_addr: int = 0

    def _insert(self, block: Block) -> None:
        bisect.insort(self.pools[block.pool], (block.size, block.addr, block), key=lambda t: (t[0], t[1]))

    def _remove(self, block: Block) -> None:
        entries = self.pools[block.pool]
        i = bisect.bisect_left(entries, (block.size, block.addr), key=lambda t: (t[0], t[1]))
        assert entries[i][2] is block
        del entries[i]

    def malloc(self, nbytes: int) -> int:
        size = max(512, (nbytes + 511) // 512 * 512)
        pool = "small" if size <= SMALL_SIZE else "large"
        entries = self.pools[pool]
        i = bisect.bisect_left(entries, (size, -1), key=lambda t: (t[0], t[1]))
        if i < len(entries):
            block = entries[i][2]
            self._remove(block)
        else:
            seg = (SMALL_BUFFER if size <= SMALL_SIZE else LARGE_BUFFER if size < MIN_LARGE_ALLOC
                   else (size + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE)
            block = Block(len(self.segments), self._next_addr, seg, pool)
            self._next_addr += seg + (1 << 40)  # segments never touch
            self.segments.append(seg)
            self.reserved += seg
        rest = block.size - size
        if rest >= 512 if pool == "small" else rest > SMALL_SIZE:
            tail = Block(block.segment, block.addr + size, rest, pool, prev=block, next=block.next)
            if block.next:
                block.next.prev = tail
            block.next, block.size = tail, size
            self._insert(tail)
        block.free = False
        handle = next(self._ids)
        self.live[handle] = (block, nbytes)
        self.allocated += nbytes
        return handle

    def free(self, handle: int) -> None:
        block, nbytes = self.live.pop(handle)
        self.allocated -= nbytes
        block.free = True
        for neighbour in (block.prev, block.next):
            if neighbour is not None and neighbour.free:
                self._remove(neighbour)
                first, second = (neighbour, block) if neighbour is block.prev else (block, neighbour)
                first.size += second.size
                first.next = second.next
                if second.next:
                    second.next.prev = first
                block = first
        self._insert(block)

    def empty_cache(self) -> None:
        for entries in self.pools.values():
            whole = [t for t in entries if t[2].prev is None and t[2].next is None]
            for t in whole:
                self.reserved -= self.segments[t[2].segment]
            entries[:] = [t for t in entries if t[2].prev is not None or t[2].next is not None]


@dataclass(frozen=True)
class Layout:
    name: str
    tp: int
    ep: int
    shared_tp: int  # 1 under an MoE all-to-all (the shared experts replicated)
    front: int  # _merge_front_weights: 3 [shared gate_up | gate | latent down], 2 [gate | latent down], 0 none
    bias: bool  # Mxfp4MoEMethod's zero bf16 biases (off ROCm)
    deep_gemm: bool  # the deep_gemm runner's scale re-layout in process_weights_after_loading
    bias_remade: bool = False  # process_weights_after_loading re-makes the biases (marlin: bf16, new tensors)


class Replay:
    """One rank's load, phase by phase, as SGLang 0.5.19 makes its tensors."""

    def __init__(self, layout: Layout) -> None:
        self.layout, self.alloc, self.held = layout, Allocator(), {}
        self.local, self.inter = EXPERTS // layout.ep, INTER // (layout.tp // layout.ep)
        self.heads, self.width = HEADS // layout.tp, HEADS * HEAD_DIM // layout.tp

    def new(self, name: str, nbytes: float) -> None:
        self.held[name] = self.alloc.malloc(int(nbytes))

    def drop(self, name: str) -> None:
        self.alloc.free(self.held.pop(name))

    def construct(self) -> None:
        """The vision tower and projector (replicated), then the language model in module order."""
        tp = self.layout.tp
        self.new("v.patch", 1024 * 3 * 14 * 14 * BF16)
        self.new("v.pos", 64 * 64 * 1024 * BF16)
        for i in range(27):
            for name, nbytes in (("n0", 1024 * FP32), ("wqkv", 4608 * 1024 * BF16), ("wo", 1024 * 1536 * BF16),
                                 ("n1", 1024 * FP32), ("fc0", 4096 * 1024 * BF16), ("fc1", 1024 * 4096 * BF16)):
                self.new(f"v{i}.{name}", nbytes)
        for name, nbytes in (("v.norm", 1024 * FP32), ("proj0", 4096 * 4096 * BF16),
                             ("proj2", HIDDEN * 4096 * BF16), ("proj.norm", HIDDEN * FP32),
                             ("embed", VOCAB // tp * HIDDEN * BF16)):
            self.new(name, nbytes)
        for i in range(LAYERS):
            self._attention(f"L{i}.", i in MLA_LAYERS)
            self._mlp(f"L{i}.", i)
            for name in ("ln1", "ln2", "attn_res_norm", "mlp_res_norm", "attn_res_proj", "mlp_res_proj"):
                self.new(f"L{i}.{name}", HIDDEN * BF16)
        for name in ("norm", "out_res_norm", "out_res_proj"):
            self.new(name, HIDDEN * BF16)
        self.new("lm_head", VOCAB // tp * HIDDEN * BF16)

    def _attention(self, p: str, mla: bool) -> None:
        heads, width = self.heads, self.width
        tensors = ((("qkv_a", 2112 * HIDDEN * BF16), ("q_a_ln", 1536 * BF16), ("q_b", heads * 192 * 1536 * BF16),
                    ("kv_a_ln", 512 * BF16), ("kv_b", heads * 256 * 512 * BF16), ("o", HIDDEN * heads * 128 * BF16),
                    ("g", heads * 128 * HIDDEN * BF16)) if mla else
                   (("qkvg", 4 * width * HIDDEN * BF16), ("b", heads * HIDDEN * BF16),
                    ("f_a", HEAD_DIM * HIDDEN * BF16), ("f_b", width * HEAD_DIM * BF16), ("dt", width * FP32),
                    ("conv", 3 * width * 4 * FP32), ("A", heads * FP32), ("o_norm", HEAD_DIM * FP32),
                    ("o", HIDDEN * width * BF16)))
        for name, nbytes in tensors:
            self.new(p + name, nbytes)

    def _mlp(self, p: str, i: int) -> None:
        if i == 0:
            self.new(p + "gate_up", 2 * DENSE_INTER // self.layout.tp * HIDDEN * BF16)
            self.new(p + "down", HIDDEN * DENSE_INTER // self.layout.tp * BF16)
            return
        local, inter, bias = self.local, self.inter, self.layout.bias
        self.new(p + "gate", EXPERTS * HIDDEN * BF16)
        self.new(p + "e_bias", EXPERTS * FP32)
        self.new(p + "w13", local * 2 * inter * LATENT // 2)
        self.new(p + "w13_scale", local * 2 * inter * LATENT // 32)
        if bias:
            self.new(p + "w13_bias", local * 2 * inter * BF16)
        self.new(p + "w2", local * LATENT * inter // 2)
        self.new(p + "w2_scale", local * LATENT * inter // 32)
        if bias:
            self.new(p + "w2_bias", local * LATENT * BF16)
        shared = SHARED_INTER // self.layout.shared_tp
        self.new(p + "shared_gate_up", 2 * shared * HIDDEN * BF16)
        self.new(p + "shared_down", HIDDEN * shared * BF16)
        self.new(p + "latent_down", LATENT * HIDDEN * BF16)
        self.new(p + "latent_norm", LATENT * BF16)
        self.new(p + "latent_up", HIDDEN * LATENT * BF16)

    def post_load(self, merges: bool) -> None:
        """post_load_weights: the MLA w_kc/w_vc copies, the attention-residual weight caches, the merges."""
        for i in sorted(MLA_LAYERS):
            self.new(f"L{i}.w_kc", self.heads * 128 * 512 * BF16)
            self.new(f"L{i}.w_vc", self.heads * 128 * 512 * BF16)
        for i in range(LAYERS):  # get_cw: fp32 and bf16 caches, two a layer
            for k in ("attn", "mlp"):
                self.new("tmp1", HIDDEN * FP32)
                self.new("tmp2", HIDDEN * FP32)
                self.new(f"L{i}.cw32{k}", HIDDEN * FP32)
                self.drop("tmp1")
                self.drop("tmp2")
                self.new(f"L{i}.cw16{k}", HIDDEN * BF16)
        if not merges:
            return
        front = self.layout.front
        for i in range(LAYERS):
            p = f"L{i}."
            if i > 0 and front:
                rows = EXPERTS + LATENT + (2 * SHARED_INTER // self.layout.shared_tp if front == 3 else 0)
                self.new(p + "front", rows * HIDDEN * BF16)
                for name in ("gate", "latent_down") + (("shared_gate_up",) if front == 3 else ()):
                    self.drop(p + name)
            if i not in MLA_LAYERS:
                self._merge_bfa(p)

    def _merge_bfa(self, p: str) -> None:
        """_merge_bfa_weights: [f_a | b], padded to a multiple of 8 rows; on CUDA the fused-decode stashes."""
        pad = -(HEAD_DIM + self.heads) % 8
        if pad:
            self.new("pad", pad * HIDDEN * BF16)
        self.new(p + "bfa", (HEAD_DIM + self.heads + pad) * HIDDEN * BF16)
        if pad:
            self.drop("pad")
        self.drop(p + "f_a")
        self.drop(p + "b")
        if self.layout.bias:  # CUDA: _prepare_fused_decode
            self.new("stash", 4 * 3 * self.width * FP32)
            for s in range(3):
                self.new(f"{p}stash{s}", 4 * self.width * FP32)
            self.drop("stash")
            self.new(p + "conv_bias", 3 * self.width * FP32)
            self.new(p + "o_norm32", HEAD_DIM * FP32)

    def deep_gemm_scales(self) -> None:
        """The deep_gemm runner's scales, through float32 to packed UE8M0 int32: the same bytes."""
        for i in range(1, LAYERS):
            previous = None
            for scale, rows, k in (("w13_scale", 2 * self.inter, LATENT), ("w2_scale", LATENT, self.inter)):
                self.new("f32_" + scale, self.local * rows * (k // 32) * FP32)
                if previous:
                    self.drop(previous)
                self.new(f"L{i}.{scale}.packed", self.local * rows * (k // 32))
                self.drop(f"L{i}.{scale}")
                previous = "f32_" + scale
            if previous:
                self.drop(previous)


    def remade_biases(self) -> None:
        """A path that re-makes the zero biases after the merges (marlin's _permute_bias: a new bf16 tensor each,
        made while the old one is alive, which the assignment then frees), layer by layer."""
        for i in range(1, LAYERS):
            for name, nbytes in (("w13_bias", self.local * 2 * self.inter * BF16), ("w2_bias", self.local * LATENT * BF16)):
                self.new(f"L{i}.{name}.new", nbytes)
                self.drop(f"L{i}.{name}")


def replay(layout: Layout, *, merges: bool = True) -> Allocator:
    load = Replay(layout)
    load.construct()
    load.post_load(merges)
    if layout.deep_gemm:
        load.deep_gemm_scales()
    if layout.bias_remade:
        load.remade_biases()
    load.alloc.empty_cache()
    return load.alloc


def estimated_overhead(layout: Layout) -> float:
    """The estimate's allocator overhead for the same rank: each tensor's rounding and the pinned segments."""
    from kvcheck.engines.sglang.sizing import model as sizing_model
    from kvcheck.engines.sglang.sizing.allocator import SLACK
    from kvcheck.engines.sglang.sizing.weights import Mxfp4ExpertLayout, Parallel, config_weights
    from tests.estimate.helpers import role

    target = role("moonshotai--Kimi-K3", gpu="H200", tp_size=layout.tp)
    model = sizing_model._model(target, target.args, offline=True)
    if layout.deep_gemm:  # the biases live on as made; the scales packed (no padding at these shapes)
        experts = Mxfp4ExpertLayout(scale_k_align=4, bias_bytes=BF16, bias_as_made=True)
    elif layout.bias_remade:  # marlin (no padding at TP8)
        experts = Mxfp4ExpertLayout(inter_align=128, hidden_align=256, bias_bytes=BF16)
    else:  # ROCm: no biases (aiter's padding and re-layout not replayed)
        experts = Mxfp4ExpertLayout()
    par = Parallel(tp=layout.tp, ep=layout.ep, shared_tp=layout.shared_tp, k3_front=layout.front,
                   mxfp4_experts=experts)
    stage = config_weights(model.shape, model.source.text, model.scheme, par, tied=False).stages[0]
    return stage.components.get(SLACK, 0.0) / GIB


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    layouts = (
        Layout("B300 TP8 EP8, deepep + deep_gemm (the whn09 case)", 8, 8, 1, 2, True, True),
        Layout("CUDA TP8, no all-to-all, deep_gemm runner", 8, 1, 8, 3, True, True),
        Layout("Hopper TP8, no all-to-all, marlin (biases re-made after the merge)", 8, 1, 8, 3, True, False, True),
        Layout("H200 TP16 EP16, no all-to-all, marlin (the llm-jp case)", 16, 16, 16, 3, True, False, True),
        Layout("CUDA TP16 EP16, deepep + deep_gemm", 16, 16, 1, 2, True, True),
        Layout("ROCm TP8 (no biases; aiter's re-layout not replayed)", 8, 1, 8, 3, False, False),
    )
    print("| layout | replay: overhead without the merges, GiB | with them | the estimate's overhead | difference |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for layout in layouts:
        merged, unmerged = replay(layout), replay(layout, merges=False)
        over = [(a.reserved - a.allocated) / GIB for a in (unmerged, merged)]
        estimated = estimated_overhead(layout)
        print(f"| {layout.name} | {over[0]:.3f} | {over[1]:.3f} | {estimated:.3f} | {estimated - over[1]:+.3f} |")


if __name__ == "__main__":
    main()
