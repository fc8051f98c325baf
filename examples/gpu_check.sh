#!/usr/bin/env bash
# One batched GPU session: install, then the GPU measurements recorded in docs/LOG.md.
# Usage: OUT=/some/dir bash examples/gpu_check.sh [step ...]     (no step: all of them)
# Steps: facts pytest sweep share-sweep graph share-graph propagation engine bench
#        attention steps steps-compile engine-eager draft autotune pytest-engine hf overhead kimi engine-8b (engine speed, issues 5 and 6)
#        overhead-parts engine-small gemv blas pdl cdt pytest-compiled synthetic (third round of issue 6)
#        splitkv attention-splitkv attention-16k chain16 chain-small steps-8b pytest-prefill (fourth round of issue 6)
#        stash-a build-tests pcie profiles pytest-new smol agreement custom-ar lint (issues 15-22; see below)
# Each step has its own time limit so one failure does not cost the others; everything is logged
# to $OUT/log.txt. NVLink multicast stays off in every environment started here.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ncclprobe-gpu}; mkdir -p "$OUT"; LOG="$OUT/log.txt"
STEPS=" ${*:-facts pytest sweep share-sweep graph share-graph propagation engine bench} "
step() {
  local name=$1 limit=$2; shift 2
  [[ $STEPS == *" $name "* ]] || return 0
  echo "=== $name ($(date -u +%T), limit ${limit}s): $*" >>"$LOG"
  local t0=$SECONDS; timeout -k 5 "$limit" "$@" >>"$LOG" 2>&1
  echo "=== $name rc=$? wall=$((SECONDS - t0))s" >>"$LOG"
}
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >>"$LOG" 2>&1
nvidia-smi topo -m >>"$LOG" 2>&1
step facts 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_nccl_facts_gpu.py
step pytest 300 python3 -m pytest -q -m gpu -p no:cacheprovider
step sweep 120 ncclprobe sweep --sizes 4K..256M:4 --output "$OUT/sweep.jsonl"
step share-sweep 120 ncclprobe sweep --share-gpu 2 --proto default,LL,Simple --algo default,Ring,Tree --sizes 4K,1M --output "$OUT/share-sweep.jsonl"
step graph 90 ncclprobe probe graph-capture --sizes 4K,64K,1M,16M
step share-graph 90 ncclprobe probe graph-capture --share-gpu 2 --sizes 64K --iters 20 --graph-ops 2 --replays 3
step propagation 150 ncclprobe probe env-propagation --nccl
step engine 120 ncclprobe run-engine --preset small --graphs decode --new-tokens 48 --single-rank-collectives --trace "$OUT/seed-graphs-decode.json"
step engine 120 ncclprobe run-engine --preset small --graphs all --new-tokens 48 --single-rank-collectives --trace "$OUT/graphs-all.json"
step bench 120 python3 examples/bench_allreduce_gpu.py
step attention 150 python3 examples/engine_bench.py attention
step steps 90 python3 examples/engine_bench.py steps --preset llama-16l --verify-tokens 4
step steps-compile 200 python3 examples/engine_bench.py steps --preset llama-16l --verify-tokens 4 --compile
step steps-compile 200 python3 examples/engine_bench.py steps --preset llama3-8b --verify-tokens 4 --compile
step engine-eager 100 ncclprobe run-engine --preset small --graphs none --new-tokens 64 --trace "$OUT/small-eager.json"
step engine-eager 150 ncclprobe run-engine --preset llama3-8b --graphs none --new-tokens 32 --trace "$OUT/llama3-8b-eager.json"
DRAFT=/tmp/ncclprobe-small-draft.safetensors; rm -f "$DRAFT"
step draft 150 ncclprobe train-draft --preset small --output "$DRAFT" --sequences 1024 --steps 1500
step draft 240 ncclprobe run-engine --preset small --draft "$DRAFT" --graphs all --compile --new-tokens 256 --trace "$OUT/small-trained-graphs.json"
step autotune 240 python3 examples/engine_bench.py steps --preset llama-16l --verify-tokens 4 --compile --compile-mode max-autotune
step pytest-engine 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_engine_gpu.py tests/test_diagnose_gpu.py
step hf 200 python3 examples/engine_bench.py hf --preset llama-16l --compile
step overhead 200 python3 examples/engine_bench.py overhead --preset small --compile
step kimi 200 python3 examples/engine_bench.py kimi
step engine-8b 240 ncclprobe run-engine --preset llama3-8b --graphs all --compile --new-tokens 128 --trace "$OUT/llama3-8b-graphs-compiled.json"
step overhead-parts 300 python3 examples/engine_bench.py overhead --preset small --compile --parts
step engine-small 240 ncclprobe run-engine --preset small --graphs all --compile --new-tokens 256 --trace "$OUT/small-compiled.json"
step gemv 240 python3 examples/gemv_bench.py
step blas 200 python3 examples/engine_bench.py steps --preset llama-16l --verify-tokens 4 --compile --blas cublaslt
step pdl 200 python3 examples/engine_bench.py steps --preset llama-16l --verify-tokens 4 --compile --inductor triton.enable_pdl=1
step cdt 300 python3 examples/engine_bench.py steps --preset llama-16l --verify-tokens 4 --compile --inductor coordinate_descent_tuning=1
step pytest-compiled 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_engine_gpu.py -k compiled
SYN=/tmp/ncclprobe-small-chain SYN_DRAFT=/tmp/ncclprobe-small-chain-draft.safetensors; rm -rf "$SYN" "$SYN_DRAFT"
step synthetic 200 ncclprobe train-target --preset small --output "$SYN" --device cuda
step synthetic 200 ncclprobe train-draft --checkpoint "$SYN" --output "$SYN_DRAFT"
step synthetic 150 ncclprobe run-engine --checkpoint "$SYN" --draft "$SYN_DRAFT" --graphs all --compile --new-tokens 256 --trace "$OUT/small-chain-trained.json"
step synthetic 150 ncclprobe run-engine --checkpoint "$SYN" --draft "$SYN_DRAFT" --graphs all --compile --new-tokens 64 --trace "$OUT/small-chain-trained-64.json"
step splitkv 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_engine_split_kv.py
step splitkv 240 python3 examples/engine_bench.py steps --preset llama-16l --verify-tokens 4 --compile
step splitkv 240 python3 examples/engine_bench.py steps --preset llama-16l --verify-tokens 4 --compile --attention torch
step attention-splitkv 150 python3 examples/engine_bench.py attention --only "split-KV Triton" --only "enable_gqa, compiled" --only "matmul-softmax, compiled"
step splitkv 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_engine_gpu.py tests/test_diagnose_gpu.py
step attention-16k 150 python3 examples/engine_bench.py attention --slots 16384 --only "split-KV Triton" --only "enable_gqa, compiled" --only "matmul-softmax, compiled"
C16=/tmp/ncclprobe-l16-chain C16_DRAFT=/tmp/ncclprobe-l16-chain-draft.safetensors
step chain16 300 ncclprobe train-target --preset llama-16l --batch 16 --output "$C16" --device cuda
step chain16 300 ncclprobe train-draft --checkpoint "$C16" --output "$C16_DRAFT" --sequences 256 --gen-len 272 --batch 8 --steps 800 --draft-vocab 8000
step chain16 300 ncclprobe run-engine --checkpoint "$C16" --draft "$C16_DRAFT" --graphs all --compile --new-tokens 256 --trace "$OUT/l16-chain-trained.json"
SYN_DRAFT2=/tmp/ncclprobe-small-chain-draft-272.safetensors; rm -f "$SYN_DRAFT2"
step chain-small 200 ncclprobe train-target --preset small --output "$SYN" --device cuda --force
step chain-small 200 ncclprobe train-draft --checkpoint "$SYN" --output "$SYN_DRAFT2" --sequences 256 --gen-len 272 --batch 8 --steps 800 --draft-vocab 8000
step chain-small 200 ncclprobe run-engine --checkpoint "$SYN" --draft "$SYN_DRAFT2" --graphs all --compile --new-tokens 256 --trace "$OUT/small-chain-trained-272.json"
step steps-8b 200 python3 examples/engine_bench.py steps --preset llama3-8b --verify-tokens 4 --compile
step pytest-prefill 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_engine_gpu.py
# Issues 15-22 (2026-12-01). The device returns at most 8 files from $OUT, so these steps write under $W and
# `pack` tars each step's folder into $OUT. The gguf wheel and the nccl-tests source travel as carried folders
# (.whl, .devtools/tools); the 98 MB SmolLM2 file travels in two parts in two calls (.smol1, .smol2) and
# is reassembled in /tmp/smol, which lives as long as the machine stays warm between the calls.
W=/tmp/ncclprobe-gpu-work; mkdir -p "$W"
[[ $STEPS == *" smol "* || $STEPS == *" profiles "* ]] && python3 -m pip install -q --no-deps --no-index .whl/gguf-*.whl >>"$LOG" 2>&1
step stash-a 30 sh -c "mkdir -p /tmp/smol && cp .smol1/part_aa /tmp/smol/"
[[ $STEPS == *" build-tests "* ]] && { python3 examples/agreement_nccl_tests.py .devtools/tools "$W/build-log" --build-dir /tmp/nt --build-only >>"$LOG" 2>&1 & }
step pcie 150 python3 examples/pcie_check_gpu.py "$W/pcie"
step profiles 360 python3 examples/record_profiles.py "$W/profiles"
step pytest-new 300 python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 150 tests/test_profile_gpu.py tests/test_pcie_gpu.py tests/test_custom_allreduce.py tests/test_sweep_gpu.py tests/test_diagnose_gpu.py
step smol 560 sh -c "cat /tmp/smol/part_aa .smol2/part_ab > /tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf && md5sum /tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf && python3 examples/smollm_bench.py /tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf $W/smol --deadline-s ${SMOL_DEADLINE:-500}"
step agreement 400 python3 examples/agreement_nccl_tests.py .devtools/tools "$W/agreement" --build-dir /tmp/nt
step custom-ar 200 python3 examples/custom_allreduce_gpu.py "$W/custom-ar" --dtype ${CAR_DTYPES:-bfloat16,float32}
step lint 90 sh -c "mkdir -p $W/lint; NCCL_PROTO=^LL ncclprobe knobs --lint --format json > $W/lint/lint.json; echo lint rc=\$?; ncclprobe -q sweep --share-gpu 2 --proto default,LL128 --algo default --sizes 64K --mode eager --output $W/lint/ll128.jsonl; echo ll128 rc=\$?; ncclprobe run-engine --preset tiny --new-tokens 4 --env NCCL_PROTO=LL129; echo ll129 rc=\$?"
wait
for d in "$W"/*/; do [ -d "$d" ] && tar czf "$OUT/$(basename "$d").tgz" --exclude='*.safetensors' -C "$W" "$(basename "$d")" && rm -rf "$d"; done
exit 0
