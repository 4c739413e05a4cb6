#!/usr/bin/env bash
# Command 2 on the H200 machine (carry .gpu/mB .gpu/whl .gpu/sh): the accuracy bench at GPU chunk
# rates with the sliced parser, then the open-loop rate campaign; the run comes back as run.tgz.
set -u
mkdir -p $HOME/m && cp .gpu/mB/*.ab $HOME/m/ && cat $HOME/m/smol-q4_0.gguf.aa $HOME/m/smol-q4_0.gguf.ab > $HOME/m/smol-q4_0.gguf || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $HOME/site .gpu/whl/*.whl || exit 1
export PYTHONPATH=$HOME/site:$PWD PYTHONUNBUFFERED=1
export LLAMA_SERVER=$HOME/lb/build/bin/llama-server SMOL_GGUF=$HOME/m/smol-q4_0.gguf
nproc; nvidia-smi --query-gpu=name,memory.used --format=csv
timeout 170 python3 bench/accuracy_bench.py --concurrency 1 8 64 --max-tokens 64 --requests 128 \
  --server "$LLAMA_SERVER -m $SMOL_GGUF -ngl 99 -np 64 -c 65536 -fa on" 2>&1 | tee $OUT/accuracy.txt
pkill -f llama-server; sleep 1
timeout 380 python3 -m engine run campaigns/h200-rates.yaml --headless --runtime process --results-dir $HOME/res 2>&1 | tee $OUT/campaign.log
pkill -f llama-server
run=$(ls -d $HOME/res/*/ | head -1)
tar -C "$run" --exclude='boot.log' -czf $OUT/run.tgz . && ls -la $OUT
