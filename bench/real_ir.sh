#!/usr/bin/env bash
# real_ir.sh: instructions (callgrind Ir) that whole real programs execute
# under each allocator, and what salloc's sampling adds to them.
#
# Why: the suite's rows are microbenchmarks, and a real program's wall time
# on the shared 2-core VM moves 10-25% from run to run (hyperfine, one
# allocator after another), more than allocators differ in it.  Callgrind's
# count of every instruction the program runs (its children too) is the
# same in every run; it says nothing of cache misses or waiting, so read it
# beside the wall times, not instead of them.
#
# Programs (all in Debian's base and build-essential):
#   gcc      gcc -O2 -c src/prof.c: a compiler's many small allocations
#   python   python3 building a 300,000-key dict of lists and sorting it
#            (CPython keeps its own pools for small objects)
#   perl     perl building a 300,000-key hash of arrays, freed at exit
#   sort     sort -n of 400,000 lines (a few large buffers)
#
# usage: bench/real_ir.sh [PROGRAM...]     (default: all four)
# env: ALLOCATORS (default "salloc salloc-noprof glibc jemalloc tcmalloc
#      mimalloc"), SALLOC_LIB, JEMALLOC_LIB, TCMALLOC_LIB, MIMALLOC_LIB.
# Prints millions of instructions per program and allocator, salloc over
# the best of the others, and sampling on over off.  About 10 minutes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
multiarch=/usr/lib/x86_64-linux-gnu
ALLOCATORS=${ALLOCATORS:-salloc salloc-noprof glibc jemalloc tcmalloc mimalloc}
declare -A LIB=(
    [salloc]=${SALLOC_LIB:-$root/lib/libsalloc.so}
    [salloc-noprof]=${SALLOC_LIB:-$root/lib/libsalloc.so}
    [glibc]=""
    [jemalloc]=${JEMALLOC_LIB:-$multiarch/libjemalloc.so.2}
    [tcmalloc]=${TCMALLOC_LIB:-$multiarch/libtcmalloc_minimal.so.4}
    [mimalloc]=${MIMALLOC_LIB:-$multiarch/libmimalloc.so.2}
)
die() { echo "real_ir.sh: $*" >&2; exit 2; }
command -v valgrind >/dev/null || die "needs valgrind (Debian: apt-get install valgrind)"
for a in $ALLOCATORS; do
    [[ -v LIB[$a] ]] || die "unknown allocator '$a'"
    [[ -z ${LIB[$a]} || -e ${LIB[$a]} ]] || die "${LIB[$a]} not found (make, or the Debian package)"
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/dict.py" <<'EOF'
d = {str(i): [i] * 3 for i in range(300000)}
print(len(sorted(d.items())))
EOF
cat >"$tmp/hash.pl" <<'EOF'
my %h; $h{$_} = [$_] for 1..300000; print scalar(keys %h), "\n";
EOF
seq 1 400000 | awk 'BEGIN { srand(7) } { print int(rand() * 1e9) }' >"$tmp/numbers"

command_of() {
    case $1 in
        gcc) echo "gcc -O2 -c $root/src/prof.c -I$root/src -I$root/size_classes -I$root/include -o /dev/null" ;;
        python) echo "python3 $tmp/dict.py" ;;
        perl) echo "perl $tmp/hash.pl" ;;
        sort) echo "sort -n --parallel=1 $tmp/numbers -o /dev/null" ;;
        *) die "unknown program '$1' (gcc, python, perl, sort)" ;;
    esac
}

# ir ALLOCATOR CMD...: the instructions CMD and its children ran, summed
# over callgrind's files (one per process).
ir() {
    local a=$1 conf=""
    shift
    [ "$a" = salloc-noprof ] && conf=prof:false
    rm -f "$tmp"/cg.*
    env SALLOC_CONF="$conf" LD_PRELOAD="${LIB[$a]}" valgrind --tool=callgrind --trace-children=yes \
        --callgrind-out-file="$tmp/cg.%p" "$@" >/dev/null 2>&1 || die "$a: '$*' failed"
    # Each file gives its count twice (summary: and totals:); summary: once.
    cat "$tmp"/cg.* | awk '/^summary:/ { s += $2 } END { printf "%.1f", s / 1e6 }'
}

programs=("$@")
[ ${#programs[@]} -gt 0 ] || programs=(gcc python perl sort)
for p in "${programs[@]}"; do command_of "$p" >/dev/null; done
printf '%-8s' program
for a in $ALLOCATORS; do printf ' %13s' "$a"; done
printf '  %s\n' "salloc/best  on/off"
for p in "${programs[@]}"; do
    read -r -a cmd <<<"$(command_of "$p")"
    declare -A count=()
    printf '%-8s' "$p"
    for a in $ALLOCATORS; do
        count[$a]=$(ir "$a" "${cmd[@]}")
        printf ' %13s' "${count[$a]}"
    done
    best="" on="${count[salloc]:-}" off="${count[salloc-noprof]:-}"
    for a in $ALLOCATORS; do
        case $a in salloc*) continue ;; esac
        best=$(awk -v b="$best" -v x="${count[$a]}" 'BEGIN { print (b == "" || x < b) ? x : b }')
    done
    awk -v on="$on" -v best="$best" -v off="$off" 'BEGIN {
        printf "  %11s  %6s\n", (on != "" && best != "") ? sprintf("%.3f", on / best) : "-",
                                (on != "" && off != "") ? sprintf("%.4f", on / off) : "-" }'
    unset count
done
echo "(millions of instructions, callgrind --trace-children; salloc-noprof is SALLOC_CONF=prof:false)"
