#!/usr/bin/env bash
# Install real SGLang 0.5.23 for CPU into DEST, for the real-engine tests (tests/engines/real/README.md):
#   DEST/venv        SGLang's wheel without its CUDA-only requirements, torch 2.14.1, the rest of its
#                    requirements, and the sgl_kernel stand-in (DEST/shim, put on the path by a .pth file)
#   DEST/tiny-llama  a tiny random Llama with a locally trained tokenizer (no weights downloaded)
#   DEST/venv also holds sglang-router (the front door test_probe_real.py puts before a server) and
#                    mooncake-transfer-engine-non-cuda (the KV transfer of disaggregated CPU roles)
#   DEST/.complete   written last: a second run that finds it (and a working import) returns at once;
#                    an install made before the router was added gets only the packages it lacks
# Needs python3 (3.10+) and the package index; ~5 minutes and ~7 GB on the 2-core CI machine.
set -euo pipefail

SGLANG_VERSION=0.5.23
TORCH_VERSION=2.14.1
ROUTER_VERSION=0.3.2
MOONCAKE_VERSION=0.3.13.post1
# Requirements of the wheel that only build or run with CUDA (or are video/audio extras SGLang's CPU
# text path never imports); the CPU kernel package (sglang-kernel) is replaced by the stand-in.
CUDA_ONLY='^(cuda-python|flash-attn-4|flashinfer_python|humming-kernels|nvidia-cutlass-dsl|nvidia-mathdx|nvshmem4py-cu13|quack-kernels|sgl-deep-ep|sgl-deep-gemm|sgl-flash-mla|sglang-kernel|tilelang|torch_memory_saver|torchaudio|torchcodec|av|decord2|deepseek-recipe|tml-renderers)'
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEST=${1:-${KVCHECK_REAL_SGLANG:-}}
if [ -z "$DEST" ]; then
  echo "usage: $0 DEST   (for example /tmp/kvcheck-real-sglang)" >&2
  exit 2
fi
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
PY=$DEST/venv/bin/python
# Two runs on one host (two CI jobs, a developer beside CI) take turns; the second finds the install made.
exec 8>"$DEST.lock"
flock -w 1800 8
CORE_STAMP="sglang==$SGLANG_VERSION torch==$TORCH_VERSION model=tiny-llama-v1"
STAMP="$CORE_STAMP sglang-router==$ROUTER_VERSION mooncake-transfer-engine-non-cuda==$MOONCAKE_VERSION"

present() {
  # Quick (well under a second): the release is installed, the stand-in is on the path, the model is there.
  "$PY" -c "import importlib.metadata as m, importlib.util as u; assert m.version('sglang') == '$SGLANG_VERSION'; assert u.find_spec('sgl_kernel')" \
    && [ -f "$DEST/tiny-llama/config.json" ] && [ -f "$DEST/tiny-llama/tokenizer.json" ]
}

extras_present() {
  # The router and the transfer engine at their pinned versions, and the router's module importable.
  "$PY" -c "import importlib.metadata as m, importlib.util as u; assert m.version('sglang-router') == '$ROUTER_VERSION'; assert m.version('mooncake-transfer-engine-non-cuda') == '$MOONCAKE_VERSION'; assert u.find_spec('sglang_router.launch_router')"
}

install_extras() {
  "$PY" -m pip install --quiet "sglang-router==$ROUTER_VERSION" "mooncake-transfer-engine-non-cuda==$MOONCAKE_VERSION"
}

smoke() {
  # The imports the server needs at boot (~10 s), the stand-in included, the model's files, the router.
  "$PY" -c "import sglang.launch_server, sgl_kernel, sglang; assert sglang.__version__ == '$SGLANG_VERSION', sglang.__version__" \
    && present && extras_present && "$PY" -m sglang_router.launch_router --help >/dev/null
}

if [ -f "$DEST/.complete" ] && [ "$(cat "$DEST/.complete")" = "$STAMP" ] && present 2>/dev/null \
    && extras_present 2>/dev/null; then
  echo "SGLang $SGLANG_VERSION already installed in $DEST"
  exit 0
fi
if [ -f "$DEST/.complete" ] && [ "$(cat "$DEST/.complete")" = "$CORE_STAMP" ] && present 2>/dev/null; then
  # An install from before the router was added: SGLang, torch and the model stand; add what it lacks.
  # The old stamp stays until the new one replaces it at once (tests running meanwhile still find an install).
  install_extras
  if ! smoke; then
    echo "install_sglang.sh: the install in $DEST does not import after adding the router (see above)" >&2
    exit 1
  fi
  echo "$STAMP" > "$DEST/.complete.new" && mv -f "$DEST/.complete.new" "$DEST/.complete"
  echo "SGLang $SGLANG_VERSION in $DEST: added sglang-router $ROUTER_VERSION and mooncake $MOONCAKE_VERSION"
  exit 0
fi
rm -f "$DEST/.complete"
start=$(date +%s)

# 1. A fresh venv (a half-made one from an interrupted run is not trusted); downloads are kept.
rm -rf "$DEST/venv"
python3 -m venv "$DEST/venv"
"$PY" -m pip install --quiet --upgrade pip
mkdir -p "$DEST/dl"
"$PY" -m pip download --quiet --no-deps "sglang==$SGLANG_VERSION" -d "$DEST/dl"
wheel=$(ls "$DEST"/dl/sglang-"$SGLANG_VERSION"-*.whl)
"$PY" - "$wheel" "$DEST/req-cpu.txt" "$CUDA_ONLY" <<'PYEOF'
import re, sys, zipfile
wheel, out, cuda_only = sys.argv[1], sys.argv[2], re.compile(sys.argv[3])
with zipfile.ZipFile(wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    lines = z.read(meta).decode().splitlines()
reqs = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Requires-Dist:")]
keep = [r for r in reqs if "extra ==" not in r and not cuda_only.match(r)]
open(out, "w").write("\n".join(keep) + "\n")
print(f"{len(keep)} of {len(reqs)} requirements kept for CPU")
PYEOF
"$PY" -m pip install --quiet "torch==$TORCH_VERSION" -r "$DEST/req-cpu.txt"
"$PY" -m pip install --quiet --no-deps "$wheel"

# 2. The stand-in for the C++ CPU kernel package (its sources are not on PyPI): every name raises if
#    called; on a CPU without AMX SGLang takes its torch-native paths and never calls it.
rm -rf "$DEST/shim" && mkdir -p "$DEST/shim/sgl_kernel"
cp "$HERE"/sgl_kernel_shim/*.py "$DEST/shim/sgl_kernel/"
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$DEST/shim" > "$site/sgl_kernel_shim.pth"

# 3. The tiny model, made here: vocabulary 8192, 8192 positions.
rm -rf "$DEST/tiny-llama"
"$PY" "$HERE/make_tiny_model.py" "$DEST/tiny-llama" --vocab 8192 --max-positions 8192

# 4. sglang-router (the front door of the router tests) and Mooncake's transfer engine without CUDA.
install_extras

if ! smoke; then
  echo "install_sglang.sh: the install in $DEST does not import (see above)" >&2
  exit 1
fi
echo "$STAMP" > "$DEST/.complete"
echo "SGLang $SGLANG_VERSION installed in $DEST in $(( $(date +%s) - start )) s ($(du -sh "$DEST" | cut -f1))"
