#!/usr/bin/env bash
# prof_overhead.sh: what sampling costs.  Runs bench/bin/bench_core under
# salloc with sampling at its default rate and with SALLOC_CONF=prof:false,
# and under jemalloc with MALLOC_CONF=prof:true and without, interleaved for
# ROUNDS rounds (default 5), and prints the median ns per malloc+free of each
# benchmark and the ratios on/off.
# usage: bench/prof_overhead.sh [ROUNDS]     env: MIN_TIME (default 0.1)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-5}
bin=$root/bench/bin/bench_core
salloc=$root/lib/libsalloc.so
jemalloc=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
[[ -x $bin && -e $salloc ]] || { echo "prof_overhead.sh: run make bench first" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
configs=("salloc_on|$salloc|" "salloc_off|$salloc|SALLOC_CONF=prof:false")
[[ -e $jemalloc ]] && configs+=("jemalloc_prof|$jemalloc|MALLOC_CONF=prof:true" "jemalloc_noprof|$jemalloc|")
for r in $(seq "$rounds"); do
    for c in "${configs[@]}"; do
        IFS='|' read -r name lib conf <<<"$c"
        echo "prof_overhead.sh: round $r/$rounds: $name" >&2
        env ${conf:+"$conf"} LD_PRELOAD="$lib" "$bin" --benchmark_min_time="${MIN_TIME:-0.1}" \
            --benchmark_format=json >"$out/$name.$r.json" 2>/dev/null
    done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys, glob, os
d, rounds = sys.argv[1], int(sys.argv[2])
res = {}
for f in glob.glob(os.path.join(d, "*.json")):
    name = os.path.basename(f).rsplit(".", 2)[0]
    for b in json.load(open(f))["benchmarks"]:
        res.setdefault(b["name"], {}).setdefault(name, []).append(b["cpu_time"])
cols = ["salloc_on", "salloc_off", "jemalloc_prof", "jemalloc_noprof"]
print(f"{'benchmark':22}" + "".join(f"{c:>16}" for c in cols) + f"{'salloc on/off':>15}{'jemalloc on/off':>17}")
ratios = {"s": [], "j": []}
for name in res:
    med = {c: statistics.median(res[name][c]) for c in cols if c in res[name]}
    s = med["salloc_on"] / med["salloc_off"]
    ratios["s"].append(s)
    line = f"{name:22}" + "".join(f"{med.get(c, float('nan')):16.2f}" for c in cols) + f"{s:15.3f}"
    if "jemalloc_prof" in med:
        j = med["jemalloc_prof"] / med["jemalloc_noprof"]
        ratios["j"].append(j)
        line += f"{j:17.3f}"
    print(line)
g = lambda v: statistics.geometric_mean(v) if v else float("nan")
print(f"{'geomean':22}" + " " * 64 + f"{g(ratios['s']):15.3f}{g(ratios['j']):17.3f}")
PY
