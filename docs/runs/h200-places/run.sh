#!/usr/bin/env bash
# Issue 30 on the one GPU lent (nvidia-h200), after shared/gpu/build.sh built llama-server in
# $HOME/lb and left model part A in $HOME/m; carry .gpu/mB .gpu/whl. From ruler's root:
#   bash docs/runs/h200-places/run.sh one    # campaigns/h200x2-places.yaml with one place (gpu0)
#   bash docs/runs/h200-places/run.sh two    # two places that both hold GPU 0, kill -9 + --resume
#   KILL_AFTER=0 bash docs/runs/h200-places/run.sh two   # the same, run through (its wall time)
#   KILL_AFTER=0 bash docs/runs/h200-places/run.sh x2    # two GPUs: the file's own places gpu0, gpu1
#   KILL_AFTER=45 bash docs/runs/h200-places/run.sh x2   # two GPUs, kill -9 + --resume
# What comes back under $OUT: each run directory less reps/ and boot logs, the progress lines,
# and NVML samples (which GPU ran which pid, each GPU's memory) taken every second.
set -u
mode=$1
if [ ! -f $HOME/m/smol-q4_0.gguf ]; then
  mkdir -p $HOME/m && cp .gpu/mB/*.ab $HOME/m/ && cat $HOME/m/smol-q4_0.gguf.aa $HOME/m/smol-q4_0.gguf.ab > $HOME/m/smol-q4_0.gguf || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $HOME/site .gpu/whl/*.whl || exit 1
fi
export PYTHONPATH=$HOME/site:$PWD PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
export LLAMA_SERVER=$HOME/lb/build/bin/llama-server SMOL_GGUF=$HOME/m/smol-q4_0.gguf
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.used --format=csv
python3 - "$mode" <<'PY'
import sys, yaml
c = yaml.safe_load(open("campaigns/h200x2-places.yaml"))
if sys.argv[1] == "one":
    c["places"] = [c["places"][0]]
elif sys.argv[1] == "two":  # the one GPU held by two places: the queueing and resume paths, GPUs contending
    c["places"] = [{"name": "gpu0a", "gpus": [0]}, {"name": "gpu0b", "gpus": [0]}]
c["name"] = f"h200-places-{sys.argv[1]}"
yaml.safe_dump(c, open(f"campaigns/h200-places-{sys.argv[1]}.yaml", "w"), sort_keys=False)
PY
( while :; do nvidia-smi --query-compute-apps=gpu_bus_id,pid,used_memory --format=csv,noheader; \
    nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader; echo "t $(date +%s)"; sleep 1; done ) > $OUT/nvml-$mode.txt 2>&1 &
watch=$!
res=$HOME/res-$mode${KILL_AFTER:+-k$KILL_AFTER}; f=campaigns/h200-places-$mode.yaml
start=$(date +%s.%N)
if [ "$mode" = one ] || [ "${KILL_AFTER:-45}" = 0 ]; then
  timeout -s TERM 500 python3 -m engine run $f --headless --runtime process --results-dir $res > $OUT/$mode.log 2>&1
  echo "exit $?" >> $OUT/$mode.log
else
  python3 -m engine run $f --headless --runtime process --results-dir $res > $OUT/$mode.log 2>&1 &
  eng=$!; sleep ${KILL_AFTER:-45}; kill -9 $eng; echo "kill -9 at $(date +%s.%N)" >> $OUT/$mode.log
  sleep 1; ps -eo pid,args | grep [l]lama-server >> $OUT/$mode.log
  run=$(ls -d $res/*/ | head -1)
  timeout -s TERM 400 python3 -m engine run --resume "$run" --headless --runtime process > $OUT/$mode-resume.log 2>&1
  echo "exit $?" >> $OUT/$mode-resume.log
fi
end=$(date +%s.%N); echo "wall $(python3 -c "print(round($end-$start,1))") s" >> $OUT/$mode.log
kill $watch; pkill -f llama-server
run=$(ls -d $res/*/ | head -1)
tar -C "$run" --exclude='boot.log' --exclude='reps' -czf $OUT/run-$mode.tgz .
ls -la $OUT
