#!/usr/bin/env bash
# callgrind.sh: instructions (callgrind Ir) spent in malloc and free on their
# fast paths, for salloc, glibc, jemalloc, tcmalloc and mimalloc; and the
# golden file that pins salloc's figures (bench/fastpath.golden).
#
# Method.  bench/bin/callgrind_pair runs N malloc(SIZE)+free pairs in
# pair_loop() under `valgrind --tool=callgrind` with the allocator in
# LD_PRELOAD (callgrind does not replace malloc).  From callgrind_annotate:
#   pair   = pair_loop's inclusive cost minus its self cost: every
#            instruction in its callees (PLT stubs included, the loop and
#            the byte write excluded); works for any allocator;
#   malloc, free = the inclusive cost of salloc's own malloc and free
#            (and free(NULL) alone: callgrind_pair N null).
# One-time costs (lazy binding, set-up) cancel by running N and 2N pairs and
# dividing the difference by N; amortised slow paths (refills, flushes,
# sampling) stay in.  Counts are deterministic for given binaries, N and
# environment to within 0.01 per call, so they make a golden file.
#
# usage: bench/callgrind.sh [N]            table for every allocator, 16 bytes
#        bench/callgrind.sh --write [FILE]  salloc at each golden size -> FILE
#        bench/callgrind.sh --check [FILE]  recompute; exit 1 if it differs
#   FILE defaults to bench/fastpath.golden; N to 100000 (env N too).
# env: CALLGRIND_BIN (default bench/bin/callgrind_pair), SALLOC_LIB,
#   JEMALLOC_LIB, TCMALLOC_LIB, MIMALLOC_LIB, ALLOCATORS (default
#   "salloc glibc jemalloc tcmalloc mimalloc").
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mode=table
golden=$root/bench/fastpath.golden
case ${1:-} in
    --write|--check) mode=${1#--}; golden=${2:-$golden}; set -- ;;
esac
N=${1:-${N:-100000}}
BIN=${CALLGRIND_BIN:-$root/bench/bin/callgrind_pair}
ALLOCATORS=${ALLOCATORS:-salloc glibc jemalloc tcmalloc mimalloc}
GOLDEN_SIZES="16 64 256 1024 4096"
multiarch=/usr/lib/x86_64-linux-gnu
declare -A LIB=(
    [glibc]=""
    [salloc]=${SALLOC_LIB:-$root/lib/libsalloc.so}
    [jemalloc]=${JEMALLOC_LIB:-$multiarch/libjemalloc.so.2}
    [tcmalloc]=${TCMALLOC_LIB:-$multiarch/libtcmalloc_minimal.so.4}
    [mimalloc]=${MIMALLOC_LIB:-$multiarch/libmimalloc.so.2}
)

die() { echo "callgrind.sh: $*" >&2; exit 2; }
[[ $N =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$N'"
for tool in valgrind callgrind_annotate python3; do
    command -v $tool >/dev/null || die "$tool not found (Debian: apt-get install valgrind python3)"
done
[[ -x $BIN ]] || die "$BIN not found: build it with 'make bench'"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ir OUTFILE FUNCTION MODE: a function's inclusive Ir (MODE incl), or
# pair_loop's callees (MODE callees = inclusive - self).
ir() {
    local incl self
    incl=$(function_ir "$1" "$2" yes) || return 1
    if [[ $3 == callees ]]; then
        self=$(function_ir "$1" "$2" no) || return 1
        echo $((incl - self))
    else
        echo "$incl"
    fi
}
function_ir() {  # OUTFILE FUNCTION yes|no
    callgrind_annotate --inclusive="$3" --threshold=100 --auto=no "$1" |
        python3 -c '
import re, sys
name = sys.argv[1]
# read everything (an early exit would SIGPIPE callgrind_annotate)
# salloc code lives in its own section (salloc_text), which callgrind
# cannot attribute to an object ("???"): take the function of that name
# that is in neither the C library nor the dynamic loader.
hits = [m.group(1) for m in (re.match(r"\s*([\d,]+)\s+\(.*?\)\s+\S*:(\S+) \[(.*)\]", l)
                             for l in sys.stdin) if m and m.group(2) == name and
        ("pair_loop" == name or not re.search(r"/libc\.so|/ld-linux", m.group(3)))]
if len(hits) != 1:
    sys.exit(f"callgrind.sh: {name} found {len(hits)} times in callgrind_annotate output")
print(hits[0].replace(",", ""))' "$2"
}

# run ALLOCATOR N SIZE: one valgrind run; prints the output file's path.
run() {
    local a=$1 n=$2 size=$3 lib=${LIB[$1]} out=$tmp/$1.$2.$3.out
    if ! env -u LD_PRELOAD ${lib:+LD_PRELOAD=$lib} valgrind --tool=callgrind \
            --callgrind-out-file="$out" "$BIN" "$n" "$size" >"$tmp/log" 2>&1 ||
            grep -q "cannot be preloaded" "$tmp/log"; then
        cat "$tmp/log" >&2
        die "$a: valgrind run failed"
    fi
    # The preloaded library must be among the objects that ran code (else
    # ld.so ignored it and this would be glibc's count under another name).
    if [[ -n $lib ]]; then
        local stem
        stem=$(basename "$(readlink -f "$lib")"); stem=${stem%%.so*}
        grep -Eq "^c?ob=\([0-9]+\) .*/$stem\.so" "$out" ||
            die "$a: no code of $stem.so ran: the preload did not take"
    fi
    echo "$out"
}

# per_call ALLOCATOR SIZE FUNCTION MODE: (Ir at 2N - Ir at N) / N.  Env
# SALLOC_CONF reaches the program (the golden figures set prof:false).
per_call() {
    local a b
    a=$(ir "$(run "$1" "$N" "$2")" "$3" "$4") && b=$(ir "$(run "$1" "$((2 * N))" "$2")" "$3" "$4") ||
        die "$1: cannot read callgrind's output"
    python3 -c 'import sys; a, b, n = map(int, sys.argv[1:]); print(f"{(b - a) / n:.2f}")' "$a" "$b" "$N"
}

# salloc's figures at every golden size, in the golden file's format.
salloc_figures() {
    echo "# bench/fastpath.golden: callgrind Ir per call of salloc's malloc and free"
    echo "# (inclusive: amortised slow paths stay in) and per malloc+free pair (PLT"
    echo "# stubs included), N=$N pairs after a warm-up.  With SALLOC_CONF=prof:false:"
    echo "# samples fall at random, which would make the counts vary by run; the"
    echo "# fast path is the same code (the counter is charged either way).  With"
    echo "# profiling off for good a thread never checks in with the sampler, so"
    echo "# malloc(SIZE) here is the fast path alone: a check-in every 1 MiB would"
    echo "# show as 0.20 at 1024 and 0.78 at 4096.  free(NULL): N calls of it alone"
    echo "# (callgrind_pair N null), free's way through its slow path's entry."
    echo "# Regenerate with 'bench/callgrind.sh --write' in the same commit as any"
    echo "# fast-path change; 'make test' runs --check when valgrind is installed."
    local m f p
    for size in $GOLDEN_SIZES; do
        m=$(per_call salloc "$size" malloc incl) && f=$(per_call salloc "$size" free incl) &&
            p=$(per_call salloc "$size" pair_loop callees) || exit 2
        printf 'malloc(%s) %s\nfree(%s) %s\npair(%s) %s\n' "$size" "$m" "$size" "$f" "$size" "$p"
    done
    f=$(per_call salloc null free incl) || exit 2
    printf 'free(NULL) %s\n' "$f"
}

case $mode in
write)
    SALLOC_CONF=prof:false salloc_figures >"$tmp/golden" || exit 2
    mv "$tmp/golden" "$golden"
    cat "$golden"
    ;;
check)
    [[ -f $golden ]] || die "$golden not found: create it with --write"
    SALLOC_CONF=prof:false salloc_figures >"$tmp/now" || exit 2
    # Equal, or off by at most 0.01 (a thousand instructions over N pairs):
    # the amortised slow paths move that much between runs of one build
    # (pair(16) came out 48.00 and 48.01 in two clones of one commit),
    # while a fast-path change moves a figure by a whole instruction.
    if ! python3 - "$golden" "$tmp/now" <<'PY'
import sys
def figures(path):
    return [l.split() for l in open(path) if l.strip() and not l.startswith('#')]
old, new = figures(sys.argv[1]), figures(sys.argv[2])
same = len(old) == len(new) and all(
    a[0] == b[0] and abs(float(a[1]) - float(b[1])) <= 0.0101 for a, b in zip(old, new))
sys.exit(0 if same else 1)
PY
    then
        diff -u <(grep -v '^#' "$golden") <(grep -v '^#' "$tmp/now") >"$tmp/diff" || true
        echo "callgrind.sh: salloc's fast-path instruction counts changed (- golden, + now):"
        sed -n '3,$p' "$tmp/diff"
        echo "If the change is intended, run 'bench/callgrind.sh --write' and commit $golden."
        exit 1
    fi
    echo "callgrind.sh: fast-path instruction counts match $golden"
    ;;
table)
    printf '%-10s %s\n' allocator "Ir per malloc(16)+free pair"
    for a in $ALLOCATORS; do
        [[ -v LIB[$a] ]] || die "unknown allocator '$a' (known: ${!LIB[*]})"
        lib=${LIB[$a]}
        if [[ -n $lib && ! -e $lib ]]; then
            echo "callgrind.sh: skipping $a: $lib not found" >&2
            printf '%-10s %s\n' "$a" "skipped (library missing)"
            continue
        fi
        printf '%-10s %s\n' "$a" "$(per_call "$a" 16 pair_loop callees)"
    done
    ;;
esac
