#!/usr/bin/env bash
# On the H200 machine, from ruler's root: `LIMIT=S bash docs/runs/h200-tune/run.sh`, called again
# back to back until the tune ends (each call resumes it). The first call (carry .gpu/src .gpu/sh
# .gpu/tok .gpu/whl .gpu/sci1) builds a CUDA llama-server (shared/gpu/build.sh) while it writes the
# random-weight 3 B model (shared/gpu/randmodel.py); scipy travels as a wheel (.gpu/sci1).
set -u
LIMIT=${LIMIT:-540}
start=$(date +%s)
mkdir -p $HOME/site $HOME/m $HOME/res
for d in .gpu/whl .gpu/sci1; do
  [ -d $d ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $HOME/site $d/*.whl
done
export PYTHONPATH=$HOME/site:$PWD PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
if [ ! -x $HOME/lb/build/bin/llama-server ]; then
  python3 .gpu/sh/randmodel.py .gpu/tok/tok.gguf $HOME/m/rand3b.gguf > $OUT/randmodel.log 2>&1 &
  bash .gpu/sh/build.sh > $OUT/build.log 2>&1
  wait
  nvidia-smi --query-gpu=name,memory.used,clocks.max.sm --format=csv >> $OUT/build.log
fi
python3 -c "import scipy.special" 2>/dev/null || { echo "no scipy"; exit 3; }
export LLAMA_SERVER=$HOME/lb/build/bin/llama-server RAND_GGUF=$HOME/m/rand3b.gguf
left=$((LIMIT - ($(date +%s) - start) - 25))
tune=$(ls -d $HOME/res/*/ 2>/dev/null | head -1)
if [ -z "$tune" ] && [ -f .gpu/tune0/tune.tgz ]; then
  # A fresh machine: the tune an earlier one brought back (carry .gpu/tune0) resumes here; its
  # paths are $HOME's, the same on every machine of the kind.
  tune=$HOME/res/$(cat .gpu/tune0/name)/
  mkdir -p "$tune" && tar -xzf .gpu/tune0/tune.tgz -C "$tune"
fi
if [ -n "$tune" ]; then
  timeout -s TERM $left python3 -m engine tune --resume "$tune" >> $OUT/tune.log 2>&1
else
  timeout -s TERM $left python3 -m engine tune campaigns/tune/h200.yaml --runtime process \
    --results-dir $HOME/res > $OUT/tune.log 2>&1
fi
echo "tune exit $?" >> $OUT/tune.log
pkill -f llama-server; sleep 1
tune=$(ls -d $HOME/res/*/ 2>/dev/null | head -1)
[ -n "$tune" ] && tar -C "$tune" --exclude='boot*.log' --exclude='reps' -czf $OUT/tune.tgz .
tail -8 $OUT/tune.log; ls -la $OUT
