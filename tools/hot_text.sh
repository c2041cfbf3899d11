#!/bin/bash
# hot_text.sh: writes src/hot_text.list afresh: the salloc functions that
# ordinary programs run, which the shared library lays out first, in the
# 64 KiB the kernel maps around the first fault in its code (Makefile,
# "Link order").  Run it after adding, renaming or splitting a function on
# a path every program takes, then `make` and `make test` (check_layout.sh
# says whether the listed code still fits in 64 KiB).
#
# The functions are those callgrind sees run, under the preloaded library,
# in:
#   - every benchmark of bench/bin/bench_core, briefly: small and large
#     sizes, realloc, calloc, aligned allocation, threads freeing each
#     other's objects, threads that come and go, sampling;
#   - its pairs again with profiling off (MALLOC_CONF=prof:false), as
#     programs that never want it run, and the option parser;
#   - bench/bin/cxx_workload: operator new and delete, sized and not;
#   - bash running a pipeline and a command substitution: fork, in the
#     parent and the child, and a real program's start-up;
#   - the work of test/bin/test_resident_text, which checks that such a
#     program keeps to the 64 KiB (realloc growth to large sizes, aligned
#     and zeroed memory, a fork whose child allocates), with profiling on
#     and off.
# Callgrind runs one thread at a time, so it never sees a lock contended:
# the names under "kept by hand" (those paths) are kept as they are.
# The functions a sample runs are also named, by hand, in
# src/sample_text.list, which lays them out first and together: a function
# new on that path belongs there too (check_layout.sh catches a name that
# is gone, not one that is missing).
#
# Needs valgrind and a built tree (make all bench test/bin/test_resident_text).
#
# usage: tools/hot_text.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
list=src/hot_text.list
lib=$root/lib/libsalloc.so
for f in "$lib" bench/bin/bench_core bench/bin/cxx_workload test/bin/test_resident_text; do
    [ -e "$f" ] || { echo "hot_text.sh: $f is missing: make all bench test/bin/test_resident_text first" >&2; exit 1; }
done
command -v valgrind >/dev/null || { echo "hot_text.sh: needs valgrind" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cg() { # NAME CMD...: callgrind of CMD, salloc preloaded, one file per process
    local name=$1
    shift
    LD_PRELOAD=$lib valgrind --tool=callgrind --trace-children=yes \
        --callgrind-out-file="$out/$name.%p.out" "$@" >/dev/null 2>&1
}
echo "hot_text.sh: callgrind runs (a few minutes)" >&2
cg bench bench/bin/bench_core --benchmark_min_time=0.001
MALLOC_CONF=prof:false cg noprof bench/bin/bench_core --benchmark_min_time=0.001 --benchmark_filter=pair
cg cxx bench/bin/cxx_workload
cg work test/bin/test_resident_text work
SALLOC_CONF=prof:false,dirty_decay_ms:5000 cg worknoprof test/bin/test_resident_text work
cg bash bash -c 'x=$(echo hot); echo "$x" | cat >/dev/null; for i in 1 2 3; do y=$(printf "%s" "$i$x"); done'

# The functions each file shows running in salloc's code.  Callgrind names
# a function once, at its first mention (fn=(ID) NAME, also as a callee:
# cfn=, cob=); later lines give the ID alone.  salloc's own code appears
# as the object "???" (its text is not in .text, where valgrind looks) or
# as the library itself.
python3 - "$lib" "$out"/*.out >"$out/generated" <<'EOF'
import re, subprocess, sys
lib, files = sys.argv[1], sys.argv[2:]
named = set()
for path in files:
    obs, fns, cur = {}, {}, None
    for line in open(path, errors="replace"):
        m = re.match(r"^(c?)(ob|fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if not m:
            continue
        callee, kind, ident, name = m.groups()
        table = obs if kind == "ob" else fns
        if name is not None:
            table[ident] = name
        if callee:
            continue
        if kind == "ob":
            cur = obs.get(ident)
        elif cur == "???" or (cur and "salloc" in cur):
            named.add(fns[ident])
# Keep the names that are salloc's functions (nm: local or global code),
# under the symbol's own spelling (C++ operators as callgrind demangles
# them map back to their mangled names).
plain = subprocess.run(["nm", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
demangled = subprocess.run(["nm", "-C", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
spelling = {}
for a, b in zip(plain.splitlines(), demangled.splitlines()):
    pa, pb = a.split(None, 2), b.split(None, 2)
    if len(pa) == 3 and pa[1] in "tT":
        spelling[pa[2]] = pa[2]
        spelling[pb[2]] = pa[2]
for name in sorted({spelling[n] for n in named if n in spelling}):
    print(name)
EOF

# Keep the hand-kept part of the old list; the rest is the new runs'.
hand=$(awk '/^# -- kept by hand --$/ {on = 1; next} /^# -- from callgrind --$/ {on = 0} on' "$list" 2>/dev/null || true)
{
    sed -n '1,/^# -- kept by hand --$/p' "$list"
    [ -n "$hand" ] && printf '%s\n' "$hand"
    echo "# -- from callgrind --"
    grep -vxF -f <(printf '%s\n' "$hand" | sed 's/#.*//; s/[[:space:]]//g' | grep .) "$out/generated" || true
} >"$list.new"
mv "$list.new" "$list"
echo "hot_text.sh: $(grep -cv '^#' "$list") names in $list" >&2
