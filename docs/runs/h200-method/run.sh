#!/usr/bin/env bash
# Command 2 on the H200 machine (carry .gpu/mB .gpu/whl), after shared/gpu/build.sh built
# llama-server in $HOME/lb and left model part A in $HOME/m: the method's campaign
# (campaigns/h200-smollm2.yaml with reps to a precision over steady windows), then a leak on cue
# (leak.py), then the client bench on the host's 16 cores. Run from ruler's root.
set -u
mkdir -p $HOME/m && cp .gpu/mB/*.ab $HOME/m/ && cat $HOME/m/smol-q4_0.gguf.aa $HOME/m/smol-q4_0.gguf.ab > $HOME/m/smol-q4_0.gguf || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $HOME/site .gpu/whl/*.whl || exit 1
export PYTHONPATH=$HOME/site:$PWD PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
export LLAMA_SERVER=$HOME/lb/build/bin/llama-server SMOL_GGUF=$HOME/m/smol-q4_0.gguf
nproc; nvidia-smi --query-gpu=name,memory.used --format=csv
timeout -s TERM 330 python3 -m engine run campaigns/h200-smollm2.yaml --headless --runtime process \
  --results-dir $HOME/res > $OUT/campaign.log 2>&1; echo "campaign exit $?" >> $OUT/campaign.log
pkill -f llama-server; sleep 1
timeout -s TERM 120 python3 docs/runs/h200-method/leak.py $HOME/leak/res > $OUT/leak.log 2>&1; echo "leak exit $?" >> $OUT/leak.log
pkill -f llama-server
timeout 90 python3 bench/client_bench.py --seconds 3 --rounds 1 --concurrency 1 8 64 --paced 64 256 > $OUT/client.txt 2>&1
run=$(ls -d $HOME/res/*/ | head -1); leak=$(ls -d $HOME/leak/res/*/ | head -1)
tar -C "$run" --exclude='boot.log' -czf $OUT/run.tgz . ; tar -C "$leak" --exclude='boot.log' -czf $OUT/leak.tgz .
ls -la $OUT
