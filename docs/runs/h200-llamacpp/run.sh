#!/usr/bin/env bash
# The run in this directory, on the H200 machine, after shared/gpu/build.sh built llama-server in
# $HOME/lb and left model part A in $HOME/m. Argument: the folder holding mB/ (part B) and whl/
# (wheels the machine's Python lacks). Run from ruler's root; writes what comes back into $OUT.
set -u
G=$1
cp "$G"/mB/*.ab "$HOME/m/" && cat "$HOME"/m/smol-q4_0.gguf.aa "$HOME"/m/smol-q4_0.gguf.ab > "$HOME/m/smol-q4_0.gguf"
(cd "$HOME/m" && sha256sum -c "$G/mB/sha256.txt") || exit 1
python3 -m pip install -q --no-index --no-deps --target "$HOME/site" "$G"/whl/*.whl || exit 1
export PYTHONPATH="$HOME/site:$PWD" PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
export LLAMA_SERVER="$HOME/lb/build/bin/llama-server" SMOL_GGUF="$HOME/m/smol-q4_0.gguf"
timeout -s TERM 370 python3 -m engine run campaigns/h200-smollm2.yaml --headless --runtime process \
    --results-dir "$HOME/res" > "$OUT/campaign.log" 2>&1
echo "campaign exit $?" >> "$OUT/campaign.log"
timeout -s TERM 130 python3 bench/accuracy_bench.py --campaign campaigns/h200-smollm2.yaml \
    --concurrency 1 8 64 --max-tokens 128 > "$OUT/accuracy.txt" 2>&1
echo "bench exit $?" >> "$OUT/accuracy.txt"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
run=$(ls -d "$HOME"/res/*/ | head -n1)
find "$run" -name 'boot*.log' -exec ls -l {} + > "$OUT/boot-logs.txt"
tar -C "$run/.." -cJf - "$(basename "$run")" | split -b 15M - "$OUT/run.tar.xz."
ls -l "$OUT"
