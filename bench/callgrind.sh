#!/usr/bin/env bash
# callgrind.sh: instructions (callgrind Ir) per 16-byte malloc+free pair, for
# salloc, glibc, jemalloc, tcmalloc and mimalloc.  Runs
# bench/bin/callgrind_pair under `valgrind --tool=callgrind` with each
# allocator in LD_PRELOAD (callgrind, unlike memcheck, does not replace
# malloc, so the preloaded allocator is what runs) and prints a small table
# on stdout, meant to be stable enough for a golden file (progress: stderr).
#
# Method.  pair_loop() does every pair (warm-up and measured); per run we
# take, from callgrind_annotate, its inclusive cost minus its self cost =
# the instructions spent in its callees, i.e. in malloc and free (PLT stubs
# included, the loop's own instructions and the byte write excluded).  One
# run also contains one-time costs (lazy symbol binding, allocator and
# thread-cache set-up), so we run twice, with N and 2N measured pairs, and
# take the difference divided by N: fixed costs cancel exactly, amortised
# periodic work (cache refills, GC) stays in.  Counts are deterministic, so
# the output is the same on every run with the same binaries.
#
# usage: bench/callgrind.sh [N]      (env N too; default 100000)
# env: CALLGRIND_BIN (default bench/bin/callgrind_pair), SALLOC_LIB,
#   JEMALLOC_LIB, TCMALLOC_LIB, MIMALLOC_LIB, ALLOCATORS (default
#   "salloc glibc jemalloc tcmalloc mimalloc").
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-${N:-100000}}
BIN=${CALLGRIND_BIN:-$root/bench/bin/callgrind_pair}
ALLOCATORS=${ALLOCATORS:-salloc glibc jemalloc tcmalloc mimalloc}
multiarch=/usr/lib/x86_64-linux-gnu
declare -A LIB=(
    [glibc]=""
    [salloc]=${SALLOC_LIB:-$root/lib/libsalloc.so}
    [jemalloc]=${JEMALLOC_LIB:-$multiarch/libjemalloc.so.2}
    [tcmalloc]=${TCMALLOC_LIB:-$multiarch/libtcmalloc_minimal.so.4}
    [mimalloc]=${MIMALLOC_LIB:-$multiarch/libmimalloc.so.2}
)

die() { echo "callgrind.sh: $*" >&2; exit 1; }
[[ $N =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$N'"
for tool in valgrind callgrind_annotate python3; do
    command -v $tool >/dev/null || die "$tool not found (Debian: apt-get install valgrind python3)"
done
[[ -x $BIN ]] || die "$BIN not found: build it with 'make bench'"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# callees_of_pair_loop OUTFILE: inclusive - self Ir of pair_loop.
callees_of_pair_loop() {
    local incl self
    incl=$(pair_loop_ir "$1" --inclusive=yes) && self=$(pair_loop_ir "$1" --inclusive=no) &&
        echo $((incl - self))
}
pair_loop_ir() {  # OUTFILE --inclusive=yes|no
    callgrind_annotate "$2" --threshold=100 --auto=no "$1" |
        python3 -c '
import re, sys
# read everything (an early exit would SIGPIPE callgrind_annotate)
hits = [m.group(1) for m in (re.match(r"\s*([\d,]+)\s+\(.*?\)\s+\S*:pair_loop \[", l)
                             for l in sys.stdin) if m]
if len(hits) != 1:
    sys.exit("callgrind.sh: pair_loop not found once in callgrind_annotate output")
print(hits[0].replace(",", ""))'
}

printf '%-10s %s\n' allocator "Ir per malloc(16)+free pair"
for a in $ALLOCATORS; do
    [[ -v LIB[$a] ]] || die "unknown allocator '$a' (known: ${!LIB[*]})"
    lib=${LIB[$a]}
    if [[ -n $lib && ! -e $lib ]]; then
        echo "callgrind.sh: skipping $a: $lib not found" >&2
        printf '%-10s %s\n' "$a" "skipped (library missing)"
        continue
    fi
    cost=()
    for n in "$N" "$((2 * N))"; do
        echo "callgrind.sh: $a, $n pairs" >&2
        out=$tmp/$a.$n.out
        if ! env -u LD_PRELOAD ${lib:+LD_PRELOAD=$lib} valgrind --tool=callgrind \
                --callgrind-out-file="$out" "$BIN" "$n" >"$tmp/log" 2>&1 ||
                grep -q "cannot be preloaded" "$tmp/log"; then
            cat "$tmp/log" >&2
            die "$a: valgrind run failed"
        fi
        # The preloaded library must be among the objects that ran code
        # (else ld.so ignored it and this would be glibc's count under
        # another name).  Callgrind names an object in full once, on an
        # ob= or cob= line.
        if [[ -n $lib ]]; then
            stem=$(basename "$(readlink -f "$lib")"); stem=${stem%%.so*}
            grep -Eq "^c?ob=\([0-9]+\) .*/$stem\.so" "$out" ||
                die "$a: no code of $stem.so ran: the preload did not take"
        fi
        c=$(callees_of_pair_loop "$out") || die "$a: cannot read $out"
        cost+=("$c")
    done
    # (callees with 2N pairs - callees with N pairs) / N, to 2 decimals.
    printf '%-10s %s\n' "$a" "$(python3 -c 'import sys
a, b, n = map(int, sys.argv[1:])
print(f"{(b - a) / n:.2f}")' "${cost[0]}" "${cost[1]}" "$N")"
done
