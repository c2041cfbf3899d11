#!/usr/bin/env python3
"""real_time.py: wall, user and system time and peak resident memory of
whole real programs under each allocator, and what salloc's sampling adds
to them.

real_ir.sh counts the instructions these programs run, the same in every
run, but not the system calls' time: salloc's stack walker reads the
unwind tables of code it has no rule for with pread() (src/unwind_file.h),
so sampling's cost in a program without frame pointers is partly system
time, which only a clock sees.  This runs the same four programs (gcc,
python, perl, sort; real_ir.sh says what each does) under every
configuration, ROUNDS times, each round in a new shuffled order (seeded),
and prints the medians: wall time (a monotonic clock around fork, exec and
wait) and the user and system time the kernel charged the program and its
children (wait4's rusage).  On the shared 2-core VM wall times move 10-25%
between runs; the system time of a program moves least, so read the
`sys on-off` column for the walker's reads.

A second table gives the median peak resident memory of each program: the
largest of its processes' (wait4's ru_maxrss counts the children it
waited for: gcc's cc1 and as).  The microbenchmarks' peak RSS (compare.sh)
is mostly the process's own libraries; these programs hold tens of MiB of
heap, so their ratios say how lean an allocator keeps a real heap.

usage: bench/real_time.py [-r ROUNDS] [PROGRAM...]   (default 15 rounds, all four)
env: ALLOCATORS, SALLOC_LIB, JEMALLOC_LIB, TCMALLOC_LIB, MIMALLOC_LIB (as real_ir.sh).
About 3 minutes at 15 rounds.
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MULTIARCH = "/usr/lib/x86_64-linux-gnu"
LIBS = {
    "salloc": os.environ.get("SALLOC_LIB", f"{ROOT}/lib/libsalloc.so"),
    "salloc-noprof": os.environ.get("SALLOC_LIB", f"{ROOT}/lib/libsalloc.so"),
    "glibc": "",
    "jemalloc": os.environ.get("JEMALLOC_LIB", f"{MULTIARCH}/libjemalloc.so.2"),
    "tcmalloc": os.environ.get("TCMALLOC_LIB", f"{MULTIARCH}/libtcmalloc_minimal.so.4"),
    "mimalloc": os.environ.get("MIMALLOC_LIB", f"{MULTIARCH}/libmimalloc.so.2"),
}
OTHERS = ("glibc", "jemalloc", "tcmalloc", "mimalloc")


def die(msg):
    print(f"real_time.py: {msg}", file=sys.stderr)
    sys.exit(2)


def write_inputs(tmp):
    """The inputs real_ir.sh gives the same programs."""
    with open(f"{tmp}/dict.py", "w") as f:
        f.write("d = {str(i): [i] * 3 for i in range(300000)}\nprint(len(sorted(d.items())))\n")
    with open(f"{tmp}/hash.pl", "w") as f:
        f.write('my %h; $h{$_} = [$_] for 1..300000; print scalar(keys %h), "\\n";\n')
    rng = random.Random(7)
    with open(f"{tmp}/numbers", "w") as f:
        f.writelines(f"{rng.randrange(10**9)}\n" for _ in range(400000))


def command_of(program, tmp):
    return {
        "gcc": ["gcc", "-O2", "-c", f"{ROOT}/src/prof.c", f"-I{ROOT}/src",
                f"-I{ROOT}/size_classes", f"-I{ROOT}/include", "-o", "/dev/null"],
        "python": ["python3", f"{tmp}/dict.py"],
        "perl": ["perl", f"{tmp}/hash.pl"],
        "sort": ["sort", "-n", "--parallel=1", f"{tmp}/numbers", "-o", "/dev/null"],
    }.get(program) or die(f"unknown program '{program}' (gcc, python, perl, sort)")


def run(cmd, allocator):
    """(wall, user, sys) seconds and peak RSS (KiB) of one run of cmd under
    allocator."""
    env = dict(os.environ, LD_PRELOAD=LIBS[allocator],
               SALLOC_CONF="prof:false" if allocator == "salloc-noprof" else "")
    with open(os.devnull, "w") as null:
        t0 = time.perf_counter()
        child = subprocess.Popen(cmd, env=env, stdout=null)
        _, status, ru = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        die(f"{allocator}: '{' '.join(cmd)}' exited {child.returncode}")
    return wall, ru.ru_utime, ru.ru_stime, ru.ru_maxrss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-r", "--rounds", type=int, default=15)
    ap.add_argument("programs", nargs="*", default=["gcc", "python", "perl", "sort"])
    args = ap.parse_args()
    allocators = os.environ.get("ALLOCATORS", " ".join(LIBS)).split()
    for a in allocators:
        if a not in LIBS:
            die(f"unknown allocator '{a}'")
        if LIBS[a] and not os.path.exists(LIBS[a]):
            die(f"{LIBS[a]} not found (make, or the Debian package)")
    with tempfile.TemporaryDirectory() as tmp:
        write_inputs(tmp)
        cmds = {p: command_of(p, tmp) for p in args.programs}
        times = {(p, a): [] for p in cmds for a in allocators}
        rng = random.Random(1)
        for r in range(args.rounds):
            print(f"real_time.py: round {r + 1}/{args.rounds}", file=sys.stderr)
            order = list(times)
            rng.shuffle(order)
            for p, a in order:
                times[(p, a)].append(run(cmds[p], a))
    med = {k: [1000 * statistics.median(x[i] for x in v) for i in range(3)]
           for k, v in times.items()}
    print(f"medians of {args.rounds} runs, ms: wall / user / sys")
    print(f"{'program':<8}" + "".join(f"{a:>22}" for a in allocators)
          + "  salloc/best  on/off  sys on-off")
    for p in cmds:
        row = "".join("{:>22}".format("%.0f / %.0f / %.1f" % tuple(med[(p, a)])) for a in allocators)
        extra = ""
        if "salloc" in allocators:
            best = [med[(p, a)][0] for a in OTHERS if a in allocators]
            extra += "  %11s" % ("%.3f" % (med[(p, "salloc")][0] / min(best)) if best else "-")
            if "salloc-noprof" in allocators:
                on, off = med[(p, "salloc")], med[(p, "salloc-noprof")]
                extra += "  %6.3f  %+9.1f" % (on[0] / off[0], on[2] - off[2])
        print(f"{p:<8}{row}{extra}")
    print_rss(times, cmds, allocators, args.rounds)


def print_rss(times, cmds, allocators, rounds):
    """The peak RSS table: medians in MiB, salloc over the leanest other
    allocator and over mimalloc (compare.sh's memory ratio)."""
    rss = {k: statistics.median(x[3] for x in v) / 1024 for k, v in times.items()}
    print(f"\nmedians of {rounds} runs: peak RSS, MiB")
    print(f"{'program':<8}" + "".join(f"{a:>14}" for a in allocators)
          + "  salloc/leanest  salloc/mimalloc")
    for p in cmds:
        row = "".join(f"{rss[(p, a)]:>14.1f}" for a in allocators)
        extra = ""
        if "salloc" in allocators:
            others = [rss[(p, a)] for a in OTHERS if a in allocators]
            extra += "  %14s" % ("%.3f" % (rss[(p, "salloc")] / min(others)) if others else "-")
            extra += "  %15s" % ("%.3f" % (rss[(p, "salloc")] / rss[(p, "mimalloc")])
                                 if "mimalloc" in allocators else "-")
        print(f"{p:<8}{row}{extra}")


if __name__ == "__main__":
    main()
