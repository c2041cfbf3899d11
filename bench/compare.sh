#!/usr/bin/env bash
# compare.sh: run bench/bin/bench_core under salloc, glibc, jemalloc, tcmalloc
# and mimalloc (swapped in with LD_PRELOAD; glibc = nothing preloaded) and
# print one table: median ns per malloc+free for each allocator, the ratios
# salloc/X, a geometric-mean row, and each allocator's peak RSS.
#
# The machine is shared and noisy, so runs are INTERLEAVED (round 1: every
# allocator, round 2: every allocator, ...; the starting allocator rotates
# each round) and every number is a MEDIAN over rounds.  Times are google
# benchmark's cpu_time (process CPU time, so user+sys, not wall clock).
#
# usage: bench/compare.sh [-r ROUNDS] [-t MIN_TIME] [-f REGEX] [-o DIR]
#   -r N      rounds (env ROUNDS, default 5)
#   -t SEC    --benchmark_min_time per benchmark (env MIN_TIME, default 0.1)
#   -f REGEX  --benchmark_filter (env FILTER, default: all)
#   -o DIR    keep each run's JSON and peak RSS in DIR (env KEEP)
# env: BENCH_BIN (default bench/bin/bench_core), SALLOC_LIB (default
#   lib/libsalloc.so), ALLOCATORS (default "salloc glibc jemalloc tcmalloc
#   mimalloc"), JEMALLOC_LIB, TCMALLOC_LIB, MIMALLOC_LIB.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-5}
MIN_TIME=${MIN_TIME:-0.1}
FILTER=${FILTER:-}
KEEP=${KEEP:-}
BENCH_BIN=${BENCH_BIN:-$root/bench/bin/bench_core}
ALLOCATORS=${ALLOCATORS:-salloc glibc jemalloc tcmalloc mimalloc}
multiarch=/usr/lib/x86_64-linux-gnu
declare -A LIB=(
    [glibc]=""
    [salloc]=${SALLOC_LIB:-$root/lib/libsalloc.so}
    [jemalloc]=${JEMALLOC_LIB:-$multiarch/libjemalloc.so.2}
    [tcmalloc]=${TCMALLOC_LIB:-$multiarch/libtcmalloc_minimal.so.4}
    [mimalloc]=${MIMALLOC_LIB:-$multiarch/libmimalloc.so.2}
)

die() { echo "compare.sh: $*" >&2; exit 1; }
while getopts "r:t:f:o:h" opt; do
    case $opt in
        r) ROUNDS=$OPTARG ;;
        t) MIN_TIME=$OPTARG ;;
        f) FILTER=$OPTARG ;;
        o) KEEP=$OPTARG ;;
        *) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "rounds must be a positive integer, got '$ROUNDS'"
command -v python3 >/dev/null || die "python3 is required (runs the benchmark, parses its JSON)"
[[ -x $BENCH_BIN ]] || die "$BENCH_BIN not found: build it with 'make bench'"

# Keep the allocators whose library exists; say clearly which are skipped.
allocs=()
for a in $ALLOCATORS; do
    [[ -v LIB[$a] ]] || die "unknown allocator '$a' (known: ${!LIB[*]})"
    lib=${LIB[$a]}
    if [[ -n $lib && ! -e $lib ]]; then
        hint=""
        [[ $a == salloc ]] && hint=" (build it with 'make')"
        echo "compare.sh: skipping $a: $lib not found$hint" >&2
        continue
    fi
    allocs+=("$a")
done
((${#allocs[@]} > 0)) || die "no allocator left to run"

if [[ -n $KEEP ]]; then
    mkdir -p "$KEEP" && out=$KEEP
else
    out=$(mktemp -d) && trap 'rm -rf "$out"' EXIT
fi

# One run: LD_PRELOAD=lib bench --benchmark_out=json, plus the peak RSS
# (KiB) of the benchmark process, from /usr/bin/time -f %M.  Fallback without
# it: python's getrusage(RUSAGE_CHILDREN), which over-reports: Linux keeps the
# spawning process's high-water mark across exec, so python's own ~10 MiB
# shows up as a floor.  A library ld.so refuses to preload would silently
# leave glibc in place, so that warning is an error here.
TIME_BIN=/usr/bin/time
[[ -x $TIME_BIN ]] || { TIME_BIN=""; echo "compare.sh: no /usr/bin/time:" \
    "peak RSS from python's getrusage, floor ~10 MiB (python's own)" >&2; }
run_one() {  # name lib json rss
    python3 - "$@" "$TIME_BIN" "$BENCH_BIN" --benchmark_min_time="$MIN_TIME" \
        ${FILTER:+--benchmark_filter="$FILTER"} --benchmark_out="$3" \
        --benchmark_out_format=json <<'PY'
import os, resource, subprocess, sys
name, lib, json_path, rss_path, time_bin, *cmd = sys.argv[1:]
env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
if lib:   # preload into the benchmark only, not into time
    cmd = ["env", f"LD_PRELOAD={lib}", *cmd]
if time_bin:
    cmd = [time_bin, "-f", "%M", "-o", rss_path, *cmd]
p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, text=True)
if p.returncode != 0 or "cannot be preloaded" in p.stderr:
    sys.exit(f"compare.sh: {name} run failed (exit {p.returncode}):\n{p.stderr}")
if not time_bin:
    with open(rss_path, "w") as f:
        print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=f)
PY
}

n=${#allocs[@]}
for ((r = 1; r <= ROUNDS; r++)); do
    for ((i = 0; i < n; i++)); do
        a=${allocs[(i + r - 1) % n]}
        echo "compare.sh: round $r/$ROUNDS: $a" >&2
        run_one "$a" "${LIB[$a]}" "$out/$a.$r.json" "$out/$a.$r.rss"
    done
done

python3 - "$out" "$ROUNDS" "${allocs[@]}" <<'PY'
import json, math, statistics, sys
out, rounds, allocs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}

times = {}   # (alloc, bench) -> [ns per malloc+free, one per round]
order = []   # benchmark names, in the binary's order
for a in allocs:
    for r in range(1, rounds + 1):
        with open(f"{out}/{a}.{r}.json") as f:
            for b in json.load(f)["benchmarks"]:
                if b.get("run_type", "iteration") != "iteration":
                    continue
                if b["name"] not in order:
                    order.append(b["name"])
                ns = b["cpu_time"] * TO_NS[b.get("time_unit", "ns")]
                times.setdefault((a, b["name"]), []).append(ns)
med = {k: statistics.median(v) for k, v in times.items()}
def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))

base = "salloc" if "salloc" in allocs else None
others = [a for a in allocs if a != base] if base else []
head = ["benchmark"] + [f"{a} ns" for a in allocs] + [f"{base}/{o}" for o in others]
rows = []
for b in order:
    row = [b] + [f"{med[a, b]:.2f}" for a in allocs]
    row += [f"{med[base, b] / med[o, b]:.3f}" for o in others]
    rows.append(row)
g = {a: gmean([med[a, b] for b in order]) for a in allocs}
rows.append(["geomean"] + [f"{g[a]:.2f}" for a in allocs]
            + [f"{g[base] / g[o]:.3f}" for o in others])
# Noise indicator: per allocator, the median over benchmarks of the spread
# (max-min)/median across rounds.  Ratios closer to 1 than this are noise.
spread = {a: statistics.median((max(times[a, b]) - min(times[a, b])) / med[a, b]
                               for b in order) for a in allocs}
rows.append(["spread"] + [f"{100 * spread[a]:.1f}%" for a in allocs] + [""] * len(others))
rss = {}
for a in allocs:
    kib = [int(open(f"{out}/{a}.{r}.rss").read()) for r in range(1, rounds + 1)]
    rss[a] = (statistics.median(kib), max(kib))
rows.append(["peak RSS MiB"] + [f"{rss[a][0] / 1024:.1f}" for a in allocs]
            + [f"{rss[base][0] / rss[o][0]:.3f}" for o in others])

w = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
fmt = lambda r: "  ".join(c.ljust(w[0]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r))
print(f"ns per malloc+free (cpu time), median of {rounds} interleaved rounds; "
      "ratio < 1: salloc faster/smaller" if base else
      f"ns per malloc+free (cpu time), median of {rounds} interleaved rounds "
      "(salloc not run: no ratio columns)")
print(fmt(head))
print("  ".join("-" * x for x in w))
for r in rows[:len(order)]:
    print(fmt(r))
print("  ".join("-" * x for x in w))
for r in rows[len(order):]:
    print(fmt(r))
print("peak RSS: median over rounds of each run's maximum resident set "
      "(the whole benchmark process)")
PY
