#!/usr/bin/env bash
# `tapt bench downstream` on a GPU machine: one task, the five conditions, one seed, in about
# 5-8 minutes on one H100. Needs nothing outside the repository: the index is built here from
# the bundled sample (data/sample/pool.jsonl.gz, 20,007 sentences) and the labelled task is the
# sample's quotes seeds by fortune file (benchmarks/downstream_tasks.py; seeds are held out from
# the pool by document, and the pool's quotes rows are the oracle). Writes $OUT/downstream/
# (report.json, report.md, runs/*/result.json with both loss curves), $OUT/downstream-runs.json
# (all run records in one file) and $OUT/downstream.log.
#
#   OUT=/tmp/out ./benchmarks/gpu_downstream.sh                    # the GPU setting
#   TAPT='python3 cli.py' MODEL=/tmp/m OUT=... ./benchmarks/gpu_downstream.sh
#   DEVICE=cpu SAMPLE_ROWS=3000 STEPS=5 BUDGET=60sent TRAIN_SIZE=16 TEST_SIZE=16 FT_EPOCHS=1 \
#       OUT=/tmp/o ./benchmarks/gpu_downstream.sh                  # a smoke test of the script
#
# Every setting is an environment variable (defaults below). Rerunning with the same OUT
# resumes: finished runs are not run again.
set -euo pipefail

cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder to write}"
DEVICE=${DEVICE:-cuda}
TAPT=${TAPT:-tapt}
PYTHON=${PYTHON:-python3}
MODEL=${MODEL:-}                 # the index's model (default: the packaged all-MiniLM-L6-v2)
SAMPLE_ROWS=${SAMPLE_ROWS:-0}    # index only the first N sample rows (0: all 20,007)
TASK=${TASK:-quotes}
CLASSES=${CLASSES:-4}
SEEDS=${SEEDS:-0}
CONDITIONS=${CONDITIONS:-none,random,centroid,fused,oracle}
BUDGET=${BUDGET:-2000sent}       # the sample holds 2,521 quotes sentences: the oracle fills it
STEPS=${STEPS:-500}
BATCH_SIZE=${BATCH_SIZE:-32}
MAX_LENGTH=${MAX_LENGTH:-128}
TRAIN_SIZE=${TRAIN_SIZE:-200}
TEST_SIZE=${TEST_SIZE:-300}
FT_EPOCHS=${FT_EPOCHS:-5}
WORK=${WORK:-$(mktemp -d)}

mkdir -p "$OUT" "$WORK"
log="$OUT/downstream.log"
start=$(date +%s)
{
  echo "# gpu_downstream.sh $(date -u +%FT%TZ) device=$DEVICE steps=$STEPS budget=$BUDGET"
  if [ "$DEVICE" = cuda ]; then
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
  fi
} | tee -a "$log"

pool=data/sample/pool.jsonl.gz
if [ "$SAMPLE_ROWS" != 0 ]; then
  pool="$WORK/pool.jsonl"
  [ -f "$pool" ] || "$PYTHON" - "$SAMPLE_ROWS" "$pool" <<'EOF'
import gzip, itertools, sys
with gzip.open("data/sample/pool.jsonl.gz", "rt", encoding="utf-8") as src, \
        open(sys.argv[2], "w", encoding="utf-8") as out:
    out.writelines(itertools.islice(src, int(sys.argv[1])))
EOF
fi

labelled="$WORK/$TASK-labelled.jsonl"
[ -f "$labelled" ] || "$PYTHON" benchmarks/downstream_tasks.py "$TASK" --seeds data/sample/seeds \
    --classes "$CLASSES" --out "$labelled" 2>&1 | tee -a "$log"

if [ ! -f "$WORK/index/manifest.json" ]; then
  t0=$(date +%s)
  # shellcheck disable=SC2086
  $TAPT -q index build "$pool" --out "$WORK/index" --no-split --device "$DEVICE" \
      ${MODEL:+--model "$MODEL"} 2>&1 | tee -a "$log"
  echo "index build: $(( $(date +%s) - t0 )) s" | tee -a "$log"
fi

t0=$(date +%s)
# shellcheck disable=SC2086
$TAPT -q bench downstream --index "$WORK/index" --labelled "$labelled" --group-field doc \
    --oracle-field domain --oracle-value "$TASK" --conditions "$CONDITIONS" --seeds "$SEEDS" \
    --budget "$BUDGET" --steps "$STEPS" --batch-size "$BATCH_SIZE" --max-length "$MAX_LENGTH" \
    --train-size "$TRAIN_SIZE" --test-size "$TEST_SIZE" --ft-epochs "$FT_EPOCHS" \
    --device "$DEVICE" --out "$OUT/downstream" 2>&1 | tee -a "$log"
echo "bench downstream: $(( $(date +%s) - t0 )) s; whole script: $(( $(date +%s) - start )) s" \
    | tee -a "$log"

# every run's completion record (scores and both loss curves) in one file two folders up, so a
# device tool that copies back only shallow files keeps them
"$PYTHON" - "$OUT/downstream" "$OUT/downstream-runs.json" <<'EOF2'
import json, pathlib, sys
runs = sorted(pathlib.Path(sys.argv[1], "runs").glob("*/result.json"))
pathlib.Path(sys.argv[2]).write_text(json.dumps(
    {p.parent.name: json.loads(p.read_text()) for p in runs}, indent=1) + "\n")
print(f"{len(runs)} run records -> {sys.argv[2]}")
EOF2
