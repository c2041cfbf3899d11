#!/usr/bin/env python3
"""ab.py: A/B of two or more builds of salloc (or any allocators) on
bench_core, for a change to the allocator: is the new build faster than the
old one, benchmark by benchmark?

    bench/ab.py [-r ROUNDS] [-f REGEX] [-t MIN_TIME] [-c CPU] [-b BIN] NAME=LIB[@CONF] ...

The first NAME is the base.  LIB is a library to LD_PRELOAD (copy a build
aside first: `cp -L lib/libsalloc.so /tmp/old.so`), or '-' for none (glibc);
@CONF sets SALLOC_CONF for that configuration only (SALLOC_CONF in the
environment applies to all the others; thp:never takes the VM's
huge-page luck out of phase).

Method.  Each round runs every configuration once, in an order drawn afresh
each round, each in its own process with an environment of drawn length
(the stack's place moves times by several per cent: see compare.sh).  For
each benchmark and counter it prints the base's median over rounds, then
for each other configuration its median and, in parentheses, the MEDIAN OF
THE PER-ROUND RATIOS to the base (below 1: faster than the base).  Pairing
each run with the base's run of the same round cancels the machine's drift
between rounds, which on the shared 2-core VM moves a benchmark by 30% or
more while two builds differ by a few per cent.  Even so, a ratio within
about 5% of 1 after 9 rounds is often noise there: repeat a run before
believing it, and trust callgrind's counts (bench/callgrind.sh) for the
fast paths.

-c CPU pins the single-threaded benchmarks (those bench_core times in real
time, `/real_time` in their names) to one CPU with taskset, in a process of
their own; the others (threaded, and phase, which time themselves) run
unpinned in another.  On the 2-core VM, whose vCPUs at times run at
different speeds, an unpinned run lands on either: unpinned, the bitmap
change's sizemix/live=10000 read 1.19 and 1.17 in two 9-round runs, pinned
1.01, as a standalone run under cachegrind (equal counts) said it should.

-s SIZE[,SIZE...] runs bench/bin/sample_cost SIZE instead (-p PAIRS each,
default 3,000,000), for a change to the sampled path: the keys are the
mean TSC ticks of a sampled malloc and of its free (sampled_malloc,
sampled_free), and of the unsampled calls for reference.  A sample is rare
and its cost is mostly what it waits for in caches gone cold, so it moves
more from run to run than the rows do: the layout of the sampled path's
code (src/sample_text.list) showed through only with -r 50, alternating.

Unlike compare.sh (the issue's table against the other allocators), this
measures time only, not RSS, and prints nothing but the ratios.
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Time per operation, and phase's per-part times (bodies_memory.c).
KEYS = ('real_time', 'build_ns', 'free_most_ns', 'rebuild_ns', 'free_rest_ns')
# sample_cost's (-s): mean TSC ticks a call.
SAMPLE_KEYS = ('sampled_malloc', 'sampled_free', 'unsampled_malloc', 'unsampled_free')


def parse_config(arg):
    name, sep, rest = arg.partition('=')
    if not sep or not name or not rest:
        sys.exit(f'ab.py: "{arg}" is not NAME=LIB[@CONF]')
    lib, _, conf = rest.partition('@')
    if lib != '-' and not os.path.exists(lib):
        sys.exit(f'ab.py: {lib}: no such library')
    return name, lib, conf or None


def exactly(names):
    """A google benchmark filter that matches exactly `names`."""
    return '^(' + '|'.join(re.escape(n) for n in names) + ')$'


def split_for_pinning(binary, regex):
    """(single-threaded, other) benchmark filters for -c, None where none."""
    out = subprocess.run([binary, '--benchmark_list_tests', '--benchmark_filter=' + regex],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f'ab.py: {binary} --benchmark_list_tests failed: {out.stderr[-300:]}')
    names = out.stdout.split()
    single = [n for n in names if n.endswith('/real_time')]
    other = [n for n in names if not n.endswith('/real_time')]
    return (exactly(single) if single else None, exactly(other) if other else None)


def run_under(cmd, lib, conf):
    """stdout of `cmd` run with `lib` preloaded ('-': none) and SALLOC_CONF
    `conf` (None: the environment's), in an environment of drawn length."""
    env = dict(os.environ)
    env.pop('LD_PRELOAD', None)
    if lib != '-':
        env['LD_PRELOAD'] = os.path.abspath(lib)
    if conf is not None:
        env['SALLOC_CONF'] = conf
    env['AB_PAD'] = 'x' * random.randint(0, 4096)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-500:])
    return out.stdout


def run_once(binary, regex, min_time, lib, conf, cpu=None):
    cmd = [binary, '--benchmark_filter=' + regex, '--benchmark_format=json',
           '--benchmark_min_time=' + str(min_time)]
    if cpu is not None:
        cmd = ['taskset', '-c', cpu] + cmd
    return json.loads(run_under(cmd, lib, conf))['benchmarks']


# sample_cost's report: "  malloc  median N  p90 N  mean X", first for the
# sampled calls, then for the unsampled ones ("  malloc  none" if no call
# was sampled).
SAMPLE_LINE = re.compile(r'^  (malloc|free)\s+(?:median.*mean\s+([0-9.]+)|none)')


def run_sample_cost(binary, size, pairs, lib, conf):
    """{key: mean ticks} of one sample_cost run: sampled_malloc, sampled_free,
    unsampled_malloc, unsampled_free (the sampled ones absent if none was)."""
    stdout = run_under([binary, str(size), str(pairs)], lib, conf)
    values, seen = {}, set()
    for line in stdout.splitlines():
        m = SAMPLE_LINE.match(line)
        if m:
            kind = 'unsampled' if m.group(1) in seen else 'sampled'
            seen.add(m.group(1))
            if m.group(2):
                values[f'{kind}_{m.group(1)}'] = float(m.group(2))
    if not values:
        raise RuntimeError(f'unexpected output {stdout[:200]!r}')
    return values


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('-r', '--rounds', type=int, default=9)
    ap.add_argument('-f', '--filter', default='.', help='benchmark regex (google benchmark)')
    ap.add_argument('-t', '--min-time', type=float, default=0.1)
    ap.add_argument('-c', '--cpu', help='pin the single-threaded benchmarks to this CPU')
    ap.add_argument('-b', '--binary', help='default bench/bin/bench_core, or sample_cost with -s')
    ap.add_argument('-s', '--sample-sizes', help='A/B sample_cost at these sizes (comma-separated)')
    ap.add_argument('-p', '--pairs', type=int, default=3000000, help='sample_cost pairs a run')
    ap.add_argument('configs', nargs='+', metavar='NAME=LIB[@CONF]')
    args = ap.parse_args()
    configs = [parse_config(c) for c in args.configs]
    if len({c[0] for c in configs}) != len(configs):
        sys.exit('ab.py: configuration names must differ')
    if args.cpu is not None and not args.cpu.isdigit():
        sys.exit(f'ab.py: -c wants a CPU number, got "{args.cpu}"')
    sizes = []
    if args.sample_sizes:
        try:
            sizes = [int(x) for x in args.sample_sizes.split(',')]
        except ValueError:
            sizes = []
        if not sizes or min(sizes) <= 0:
            sys.exit(f'ab.py: -s wants sizes like 1024,4096, got "{args.sample_sizes}"')
    if args.binary is None:
        args.binary = os.path.join(HERE, 'bin', 'sample_cost' if sizes else 'bench_core')
    # (filter, cpu) per process of a configuration's run.
    if sizes:
        parts = []
    elif args.cpu is None:
        parts = [(args.filter, None)]
    else:
        single, other = split_for_pinning(args.binary, args.filter)
        parts = [(f, c) for f, c in ((single, args.cpu), (other, None)) if f]
    random.seed(1)
    # results[name][benchmark][key] = [value per round]; a failed run
    # leaves its round out of every ratio that would use it.
    results = {name: {} for name, _, _ in configs}
    for r in range(args.rounds):
        print(f'ab.py: round {r + 1}/{args.rounds}', file=sys.stderr)
        order = configs[:]
        random.shuffle(order)
        for name, lib, conf in order:
            try:
                benchmarks = [b for f, cpu in parts
                              for b in run_once(args.binary, f, args.min_time, lib, conf, cpu)]
                benchmarks += [{'name': f'sample_cost/{size}',
                                **run_sample_cost(args.binary, size, args.pairs, lib, conf)}
                               for size in sizes]
            except (RuntimeError, ValueError) as e:
                print(f'ab.py: {name} failed in round {r + 1}: {e}', file=sys.stderr)
                continue
            for b in benchmarks:
                per_key = results[name].setdefault(b['name'], {})
                for k in KEYS + SAMPLE_KEYS:
                    if k in b:
                        per_key.setdefault(k, {})[r] = b[k]
    base = configs[0][0]
    for bench, per_key in results[base].items():
        for k, base_runs in per_key.items():
            line = f'{bench:48s} {k:12s} {base}={statistics.median(base_runs.values()):9.1f}'
            for name, _, _ in configs[1:]:
                runs = results[name].get(bench, {}).get(k, {})
                paired = [runs[r] / base_runs[r] for r in runs if r in base_runs and base_runs[r]]
                if paired:
                    line += (f'  {name}={statistics.median(runs.values()):9.1f}'
                             f' ({statistics.median(paired):.3f})')
            print(line)


if __name__ == '__main__':
    main()
