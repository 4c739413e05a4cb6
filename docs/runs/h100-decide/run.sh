#!/usr/bin/env bash
# On the GPU machine, from ruler's root: `LIMIT=S bash docs/runs/h100-decide/run.sh`, called again
# back to back until the campaign ends (each call resumes it). The first call (carry .gpu/src
# .gpu/sh .gpu/tok .gpu/whl .gpu/sci1) builds a CUDA llama-server (shared/gpu/build.sh) while it
# writes the random-weight 3 B model (shared/gpu/randmodel.py); scipy travels as a wheel. Each call
# ends the servers it started and brings the run back in 15 MB parts; the last also the report and
# `ruler plan` from the run.
set -u
LIMIT=${LIMIT:-560}
start=$(date +%s)
mkdir -p $HOME/site $HOME/m
if [ ! -f $HOME/site/.done ]; then
  for d in .gpu/whl .gpu/sci1; do
    [ -d $d ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $HOME/site $d/*.whl
  done
  touch $HOME/site/.done
fi
export PYTHONPATH=$HOME/site:$PWD PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
if [ ! -x $HOME/lb/build/bin/llama-server ]; then
  python3 .gpu/sh/randmodel.py .gpu/tok/tok.gguf $HOME/m/rand3b.gguf > $OUT/randmodel.log 2>&1 &
  bash .gpu/sh/build.sh > $OUT/build.log 2>&1
  wait
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv >> $OUT/build.log
fi
python3 -c "import scipy.special, numpy, pydantic, textual" || { echo "python packages missing"; exit 3; }
export LLAMA_SERVER=$HOME/lb/build/bin/llama-server RAND_GGUF=$HOME/m/rand3b.gguf
left=$((LIMIT - ($(date +%s) - start) - 25))
run=$(ls -d $HOME/res/*/ 2>/dev/null | head -1)
if [ -n "$run" ]; then
  timeout -s TERM $left python3 -m engine run --resume "$run" --headless >> $OUT/campaign.log 2>&1
else
  timeout -s TERM $left python3 -m engine run ${CAMPAIGN:-campaigns/h100-decide.yaml} --headless --runtime process \
    --results-dir $HOME/res > $OUT/campaign.log 2>&1
fi
echo "campaign exit $?" >> $OUT/campaign.log
pkill -f llama-server; sleep 1
run=$(ls -d $HOME/res/*/ 2>/dev/null | head -1)
if [ -n "$run" ]; then
  grep -q '"kind":"run_finished"' "$run/journal.jsonl" && timeout 60 python3 -m engine report "$run" > $OUT/report.log 2>&1
  timeout 60 python3 -m engine plan campaigns/h100-decide.yaml --from "$run" > $OUT/plan.txt 2>&1
  tar -C "$run" --exclude='boot*.log' -czf - . | split -b 15000000 - $OUT/run.tgz.
fi
tail -4 $OUT/campaign.log; ls -la $OUT
