#!/usr/bin/env bash
# The downstream benchmark on one GPU, sized for about 8 minutes (not yet run on one): one task,
# every condition, the `gpu` general model (tapt pretrain --preset gpu) and more continued-
# pretraining steps than the CPU run, written as the CPU run's report
# (benchmarks/downstream_proxy.py: $OUT/gpu.json with one record per condition, $OUT/gpu.md,
# $OUT/gpu-gains.png) plus $OUT/gpu.log.
#
# The index is built here from POOL (default: the bundled 20,007-sentence sample; give the
# multi-domain corpus's pool.jsonl.gz, copied into an ignored folder of the checkout, for the
# real run) and the labelled task from SEEDS_DIR's seed files (held out from the pool by
# document; the pool's rows of the domain are the oracle).
#
#   OUT=/tmp/out POOL=.bench/pool.jsonl.gz SEEDS_DIR=.bench/seeds ./benchmarks/gpu_downstream.sh
#   DEVICE=cpu PRESET=tiny MAX_LENGTH=64 STEPS=5 BUDGET=300sent SAMPLE_ROWS=3000 RUN_SEEDS=0 \
#       FT_MODE=probe OUT=/tmp/o ./benchmarks/gpu_downstream.sh   # a dry run on a CPU
#
# Every setting is an environment variable (defaults below). Rerunning with the same OUT and
# WORK resumes: finished runs and the cached general model are not made again.
set -euo pipefail

cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder to write}"
DEVICE=${DEVICE:-cuda}
TAPT=${TAPT:-tapt}
PYTHON=${PYTHON:-python3}
POOL=${POOL:-data/sample/pool.jsonl.gz}
SEEDS_DIR=${SEEDS_DIR:-data/sample/seeds}
SAMPLE_ROWS=${SAMPLE_ROWS:-0}    # index only the first N rows of POOL (0: all)
TASK=${TASK:-quotes}
RUN_SEEDS=${RUN_SEEDS:-0,1,2}
CONDITIONS=${CONDITIONS:-none,random,task,centroid,knn,fused,oracle}
PRESET=${PRESET:-gpu}            # the general model's size
BUDGET=${BUDGET:-10000sent}
STEPS=${STEPS:-1000}
BATCH_SIZE=${BATCH_SIZE:-64}
MAX_LENGTH=${MAX_LENGTH:-128}
LR=${LR:-2e-4}
FT_MODE=${FT_MODE:-full}
FT_EPOCHS=${FT_EPOCHS:-3}
WORK=${WORK:-$(mktemp -d)}
export TAPT_CACHE_DIR=${TAPT_CACHE_DIR:-$WORK/cache}

mkdir -p "$OUT" "$WORK"
log="$OUT/gpu.log"
start=$(date +%s)
{
  echo "# gpu_downstream.sh $(date -u +%FT%TZ) device=$DEVICE preset=$PRESET steps=$STEPS budget=$BUDGET task=$TASK"
  if [ "$DEVICE" = cuda ]; then
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
  fi
} | tee -a "$log"

pool="$POOL"
if [ "$SAMPLE_ROWS" != 0 ]; then
  pool="$WORK/pool.jsonl"
  [ -f "$pool" ] || "$PYTHON" - "$POOL" "$SAMPLE_ROWS" "$pool" <<'EOF'
import gzip, itertools, sys
with gzip.open(sys.argv[1], "rt", encoding="utf-8") as src, \
        open(sys.argv[3], "w", encoding="utf-8") as out:
    out.writelines(itertools.islice(src, int(sys.argv[2])))
EOF
fi

if [ ! -f "$WORK/index/manifest.json" ]; then
  t0=$(date +%s)
  $TAPT -q index build "$pool" --out "$WORK/index" --no-split --device "$DEVICE" 2>&1 \
      | tee -a "$log"
  echo "index build: $(( $(date +%s) - t0 )) s" | tee -a "$log"
fi

t0=$(date +%s)
"$PYTHON" -m benchmarks.downstream_proxy --index "$WORK/index" --seeds "$SEEDS_DIR" \
    --tasks "$TASK" --work "$WORK/runs" --out "$OUT" --name gpu --run-seeds "$RUN_SEEDS" \
    --conditions "$CONDITIONS" --preset "$PRESET" --budget "$BUDGET" --steps "$STEPS" \
    --batch-size "$BATCH_SIZE" --max-length "$MAX_LENGTH" --lr "$LR" --ft-mode "$FT_MODE" \
    --ft-epochs "$FT_EPOCHS" --device "$DEVICE" 2>&1 | tee -a "$log"
echo "downstream: $(( $(date +%s) - t0 )) s; whole script: $(( $(date +%s) - start )) s" \
    | tee -a "$log"
