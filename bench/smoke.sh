#!/usr/bin/env bash
# smoke.sh: every benchmark once, as fast as possible, under one allocator:
# a check that the suite runs, not a measurement (`make bench-smoke`).
#
# Runs bench/bin/bench_core with a tiny --benchmark_min_time (each benchmark
# does one batch or one call) and bench/bin/cxx_workload, with LIB
# preloaded, and fails if either crashes, hangs (5 minutes), if ld.so
# refuses the preload, if a benchmark reports an error or is missing from
# the output, or if cxx_workload's checksum differs from its checksum under
# glibc (the same program must compute the same result on any allocator).
# About 10 seconds.
#
# usage: bench/smoke.sh [LIB]
#   LIB  the allocator library to preload (default lib/libsalloc.so);
#        "glibc" or "" for none
# env: BENCH_BIN, CXX_WORKLOAD_BIN (defaults under bench/bin)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
lib=${1-$root/lib/libsalloc.so}
[[ $lib == glibc ]] && lib=""
BENCH_BIN=${BENCH_BIN:-$root/bench/bin/bench_core}
CXX_WORKLOAD_BIN=${CXX_WORKLOAD_BIN:-$root/bench/bin/cxx_workload}

die() { echo "smoke.sh: FAIL: $*" >&2; exit 1; }
[[ -x $BENCH_BIN && -x $CXX_WORKLOAD_BIN ]] || die "build the benchmarks first: make bench"
[[ -z $lib || -e $lib ]] || die "$lib not found"
command -v python3 >/dev/null || die "python3 is required (reads the benchmark's JSON)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run_preloaded LOG CMD...: CMD with lib preloaded (and nothing else: a
# SALLOC_CONF or LD_PRELOAD from the caller's environment is dropped).
run_preloaded() {
    local log=$1 rc=0
    shift
    env -u LD_PRELOAD -u SALLOC_CONF -u MALLOC_CONF ${lib:+LD_PRELOAD=$lib} \
        timeout 300 "$@" >"$log" 2>&1 || rc=$?
    if ((rc != 0)); then
        tail -20 "$log" >&2
        ((rc == 124)) && die "$* hung (killed after 300 s)"
        die "$* exited with status $rc"
    fi
    if grep -q "cannot be preloaded" "$log"; then
        cat "$log" >&2
        die "ld.so did not preload $lib"
    fi
}

echo "smoke.sh: every benchmark once under ${lib:-glibc}" >&2
"$BENCH_BIN" --benchmark_list_tests >"$tmp/expected"
run_preloaded "$tmp/bench.log" "$BENCH_BIN" --benchmark_min_time=0.01 \
    --benchmark_out="$tmp/out.json" --benchmark_out_format=json
python3 - "$tmp/expected" "$tmp/out.json" <<'PY'
import json, sys
expected = open(sys.argv[1]).read().split()
runs = {b["name"]: b for b in json.load(open(sys.argv[2]))["benchmarks"]}
bad = [f"{n}: missing from the output" for n in expected if n not in runs]
bad += [f"{n}: {b.get('error_message', 'error')}" for n, b in runs.items()
        if b.get("error_occurred")]
bad += [f"{n}: no time reported" for n, b in runs.items()
        if not b.get("error_occurred") and not b.get("real_time", 0) > 0]
if bad:
    sys.exit("smoke.sh: FAIL:\n  " + "\n  ".join(bad))
print(f"smoke.sh: {len(expected)} benchmarks ran", file=sys.stderr)
PY

# cxx_workload: same checksum as under glibc.
env -u LD_PRELOAD "$CXX_WORKLOAD_BIN" >"$tmp/cxx_glibc.out"
run_preloaded "$tmp/cxx.out" "$CXX_WORKLOAD_BIN"
read -r _ want _ _ <"$tmp/cxx_glibc.out"
read -r word got _ ms <"$tmp/cxx.out" || true
[[ $word == checksum && -n $ms ]] || die "cxx_workload printed '$(head -c 200 "$tmp/cxx.out")'"
[[ $got == "$want" ]] || die "cxx_workload checksum $got, under glibc $want"
echo "smoke.sh: cxx_workload ran (checksum matches glibc's, ${ms} ms)" >&2
echo "smoke.sh: OK" >&2
