#!/usr/bin/env bash
# The GPU checks in one command, for a machine with one CUDA GPU and mrbench's dependencies:
#   1. the memory plan against the measured peak of a paper cell at full size (random weights):
#      Qwen2.5-Coder-0.5B, then 1.5B, code generation (benchmarks/gpu_memory_plan.py);
#   2. mrbench's cell path against plain TRL GRPOTrainer, tokens/s and peak memory of training
#      (benchmarks/gpu_smoke.py, ~100 M random model, tool calling, 8 steps, no vLLM).
# Each check is time-boxed (its seconds below) so the whole ends within ~8 minutes on an H100;
# a check that fails or runs out of time says so and the next one runs.
#
#   benchmarks/gpu_checks.sh OUT_DIR        # figures and logs in OUT_DIR (at most 8 small files)
set -u
out=${1:?usage: benchmarks/gpu_checks.sh OUT_DIR}
mkdir -p "$out"
work=$(mktemp -d)
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $py -c "import sys, torch, transformers, trl, accelerate, mlflow, datasets, lm_eval
print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda', torch.version.cuda,
      '| bf16', torch.cuda.is_bf16_supported(including_emulation=False))
print('transformers', transformers.__version__, '| trl', trl.__version__, '| accelerate', accelerate.__version__,
      '| mlflow', mlflow.__version__, '| datasets', datasets.__version__, '| lm_eval', lm_eval.__version__)"
} > "$out/environment.txt" 2>&1
cat "$out/environment.txt"

check() {  # check NAME SECONDS COMMAND...: run it time-boxed, log to OUT/NAME.log, keep going
  local name=$1 seconds=$2
  shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$seconds" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s (limit $seconds s)" | tee -a "$out/$name.log"
  if [ $rc -ne 0 ]; then  # the libraries' output of a failed cell is in its cell.log
    find "$work/$name" -name cell.log -exec tail -n 40 {} \; >> "$out/$name.log" 2>/dev/null
  fi
  grep -E "^(plan|  without|measured|train |model |path|plain TRL|mrbench|vllm=)" "$out/$name.log" | tail -n 12
}

check plan-0.5b 220 $py benchmarks/gpu_memory_plan.py --model Qwen/Qwen2.5-Coder-0.5B-Instruct --out "$work/plan-0.5b"
check smoke 150 $py benchmarks/gpu_smoke.py --steps 8 --methods grpo --vllm off --out "$work/smoke"
check plan-1.5b 120 $py benchmarks/gpu_memory_plan.py --model Qwen/Qwen2.5-Coder-1.5B-Instruct --out "$work/plan-1.5b"
cp "$work"/plan-*/memory_plan-*.json "$work"/smoke/gpu_smoke.json "$out"/ 2>/dev/null
ls -la "$out"
