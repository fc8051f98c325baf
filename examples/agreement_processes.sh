#!/usr/bin/env bash
# One-rank eager agreement over processes (issue 32; docs/LOG.md 2026-12-02): nccl-tests all_reduce_perf
# and the sweep's raw path alternated, each run in a new process, six rounds: on the H200 VM every
# process draws a host speed, so one process per tool decides nothing at host-bound sizes.
# On the GPU machine, with shared/tools copied into .tools/ (git-ignored) and OUT set:
#   OUT=/tmp/agree bash examples/agreement_processes.sh
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > $OUT/pip.log 2>&1
nh=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])")
t0=$SECONDS; bash .tools/build-nccl-tests.sh /tmp/nt > $OUT/build.log 2>&1; echo "build rc=$? $((SECONDS-t0))s"
for i in 1 2 3 4 5 6; do
  LD_LIBRARY_PATH=$nh/lib timeout 60 /tmp/nt/all_reduce_perf -b 8 -e 256K -f 8 -g 1 -w 20 -n 100 -c 0 > $OUT/nt_$i.txt 2>&1
  timeout 90 ncclprobe sweep --path nccl --no-iter-events --no-cost-split --collective all_reduce --sizes 8,64,512,4K,32K,256K --placement out --mode eager --warmup 20 --iters 100 --trials 5 --output $OUT/sw_$i.jsonl --format csv > $OUT/sw_$i.csv 2>/dev/null
  echo "round $i: nt rc=$? $((SECONDS-t0))s"
done
grep -h "^ *8 \| 262144 " $OUT/nt_*.txt | head -12
cut -d, -f1,9 $OUT/sw_*.csv | grep -v size | head -12
