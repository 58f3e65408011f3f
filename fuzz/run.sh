#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer harnesses of fuzz/ with clang into build-fuzz (-DDCP_BUILD_FUZZ=ON: ASan +
# UBSan + coverage) and runs each one reproducibly (docs/fuzzing.md):
#   1. the committed seed corpus fuzz/corpus/<name>/ is replayed, each file once;
#   2. the harness fuzzes from that corpus with a fixed seed and a fixed number of runs
#      (-seed=1 -runs=N), so every run tries the same inputs. For that, the process runs without
#      address space randomization (setarch -R: libFuzzer's indirect-call features hash code
#      addresses), comparison operands are not fed back into inputs (-use_cmp=0: they include stack
#      addresses) and the corpus directory is not re-read on a timer (-reload=0).
# Each input gets at most DCP_FUZZ_TIMEOUT_S seconds (default 10) and the process at most
# DCP_FUZZ_RSS_MB MiB (default 2048). Any crash, sanitizer report, leak, timeout or out-of-memory
# fails the harness; every harness still runs, then the script exits 1 naming the failed ones.
# Inputs that failed are saved as build-fuzz/artifacts/<name>/{crash,leak,timeout,oom}-<sha1>;
# reproduce one with `build-fuzz/fuzz/<name>_fuzzer FILE`.
#
# Usage: fuzz/run.sh [NAME...]        the harnesses to run (default: all, listed below)
#   DCP_FUZZ_BUILD_DIR=DIR            build and run the harnesses of DIR, a tree configured with
#                                     -DDCP_BUILD_FUZZ=ON (CI: its sanitizer build), not build-fuzz
#   DCP_FUZZ_RUNS_SCALE=F             multiplies every run count (default 1; e.g. 0.1 for a smoke run)
#   DCP_FUZZ_BUILD_ONLY=1             build, run nothing
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

# name, runs (fixed: 7-17 s each in CI's tree on the project's 2-core machine, 76 s in all;
# docs/fuzzing.md), most bytes per input, dictionary (fuzz/dict/<dictionary>.dict, or - for none),
# and optionally seconds per input.
# mask_spec_long builds masks of up to 2^20 slices (the limit) at 2^30 tokens: 0.4 s in Release,
# about 8 s under ASan + UBSan + coverage, so its inputs get 60 s.
harnesses=(
  "mask_spec_text 100000 256 mask_spec_text"
  "mask_spec_json 60000 2048 mask_spec_json"
  "mask_spec_long 2000 256 mask_spec_text 60"
  "cluster_json 16000 2048 cluster_json"
  "plan_file 13000 16384 -"
  "megatron_idx 68000 1024 -"
  "length_list 80000 512 length_list"
)
timeout_s=${DCP_FUZZ_TIMEOUT_S:-10}
rss_mb=${DCP_FUZZ_RSS_MB:-2048}
scale=${DCP_FUZZ_RUNS_SCALE:-1}

selected=("$@")
for name in "${selected[@]}"; do
  if [[ " ${harnesses[*]} " != *" $name "* ]]; then
    echo "fuzz: unknown harness '$name'" >&2
    exit 2
  fi
done

if [[ -n ${DCP_FUZZ_BUILD_DIR:-} ]]; then
  build=$DCP_FUZZ_BUILD_DIR
  if ! grep -qx 'DCP_BUILD_FUZZ:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
    echo "fuzz: $build is not a build tree configured with -DDCP_BUILD_FUZZ=ON" >&2
    exit 2
  fi
else
  build=build-fuzz
  cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release \
    -DDCP_BUILD_FUZZ=ON -DDCP_BUILD_TESTS=OFF -DDCP_BUILD_CLI=OFF -DDCP_BUILD_BENCH=OFF \
    -DDCP_BUILD_PYTHON=OFF >/dev/null
fi
cmake --build "$build" --target dcp_fuzzers
[[ -n ${DCP_FUZZ_BUILD_ONLY:-} ]] && exit 0

no_aslr=(setarch "$(uname -m)" -R)
if ! "${no_aslr[@]}" true 2>/dev/null; then
  echo "fuzz: warning: setarch -R fails here; runs with address space randomization may differ" >&2
  no_aslr=()
fi
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=()
for entry in "${harnesses[@]}"; do
  read -r name runs max_len dict input_timeout_s <<<"$entry"
  if ((${#selected[@]} > 0)) && [[ " ${selected[*]} " != *" $name "* ]]; then continue; fi
  runs=$(awk -v r="$runs" -v s="$scale" 'BEGIN { n = int(r * s); print (n < 1 ? 1 : n) }')
  fuzzer=$build/fuzz/${name}_fuzzer
  corpus=fuzz/corpus/$name
  artifacts=$build/artifacts/$name/
  work=$build/corpus-work/$name  # what this run adds to the corpus; emptied for reproducibility
  rm -rf "$work" "$artifacts" && mkdir -p "$work" "$artifacts"
  options=(-timeout="${input_timeout_s:-$timeout_s}" -rss_limit_mb="$rss_mb" -max_len="$max_len" -use_cmp=0 -reload=0
           -artifact_prefix="$artifacts" -print_final_stats=1)
  [[ $dict != - ]] && options+=(-dict="fuzz/dict/$dict.dict")
  log=$build/fuzz-$name.log
  echo "== fuzz: $name: replaying $(find "$corpus" -type f | wc -l) corpus files, then $runs runs (-seed=1)"
  start=$SECONDS
  if "${no_aslr[@]}" "$fuzzer" "${options[@]}" "$corpus"/* >"$log" 2>&1 &&
    "${no_aslr[@]}" "$fuzzer" "${options[@]}" -seed=1 -runs="$runs" "$work" "$corpus" >>"$log" 2>&1; then
    echo "   ok in $((SECONDS - start)) s: $(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" |
      tail -1 | grep -o '[0-9]*$') executions, corpus $(find "$work" -type f | wc -l) new inputs"
  else
    echo "   FAILED after $((SECONDS - start)) s; from $log:"
    grep -E 'ERROR: |SUMMARY: |fuzz check failed|runtime error|Test unit written to' "$log" |
      head -20 | sed 's/^/   /'
    failed+=("$name")
  fi
done

if ((${#failed[@]} > 0)); then
  echo "fuzz: FAILED: ${failed[*]} (inputs under $build/artifacts/)"
  exit 1
fi
echo "fuzz: every harness passed"
