#!/usr/bin/env bash
# compare.sh: salloc against glibc, jemalloc, tcmalloc and mimalloc, on every
# benchmark of bench/bin/bench_core and on bench/bin/cxx_workload, and what
# salloc's sampling costs (salloc vs salloc-noprof).  `make bench-compare`.
#
# Method.  Each benchmark runs in its OWN process (--benchmark_filter of its
# exact name), under each configuration (LD_PRELOAD, plus its options), so
# every run has its own peak RSS (/usr/bin/time -f %M of that process).  The
# machine is shared and noisy, so runs are INTERLEAVED: round r runs every
# benchmark under every configuration, in an order drawn afresh for each
# benchmark and round (seeded: the same every time); every number printed
# is a MEDIAN over the rounds.  Times are wall-clock (real) time per
# operation, as bench_core reports them.
#
# Why drawn: a run can pay for the one before it.  On the 2-core VM, a
# process that exits holding 550 MB (mimalloc after phase/heap=256MiB)
# makes the next run's page faults slow for seconds (the kernel zeroing
# pages the host has to back afresh): salloc's phase ran 583-917 ns right
# after mimalloc's and 331-379 ns after its own.  A rotating order keeps
# every configuration behind the same one in every round, so that cost
# fell on salloc, always after mimalloc, in every round.  Likewise each run
# gets an environment variable of a drawn length (see run()): the stack's
# place, which the environment's size sets, moves the time by several per
# cent, and each configuration's own preload path would otherwise fix it.
#
# Output (stdout): a header (machine, library versions), then
#   1. per benchmark, median ns per operation for each configuration;
#      salloc/best = salloc / min(jemalloc, tcmalloc, mimalloc) (below 1:
#      salloc is faster than all three); prof on/off = salloc /
#      salloc-noprof (the cost of sampling); rss salloc/mimalloc = peak RSS
#      ratio; then a geomean row (each column, over all benchmarks) and a
#      spread row (per configuration, the median over benchmarks of
#      (max-min)/median across rounds: differences smaller than this are
#      noise);
#   2. peak RSS (MiB) per benchmark and configuration;
#   3. the benchmarks' own counters (shared_lines, rss_peak_mib, ...).
# A run that crashes or fails shows as FAIL, is listed at the end, and makes
# the exit status 1 (the tables are still printed).
#
# usage: bench/compare.sh [-r ROUNDS] [-t MIN_TIME] [-f REGEX] [-c CPU] [-o DIR] [-m FILE]
#   -r N      rounds (env ROUNDS, default 5)
#   -t SEC    --benchmark_min_time per run (env MIN_TIME, default 0.1)
#   -f REGEX  only benchmarks whose name (pair/16, cxx_workload, ...) matches
#             (python re.search; env FILTER, default: all)
#   -c CPU    run each single-threaded benchmark pinned to CPU (taskset; env
#             PIN_CPU, default: unpinned).  On a VM whose vCPUs run at
#             different speeds (one shared with a busy neighbour) an unpinned
#             process lands on either and its time is bimodal; pinned, every
#             configuration runs on the same CPU.  Single-threaded: bench_core
#             registers it with real time (RegisterSingleThread), and
#             cxx_workload; the self-timed ones (threaded, and phase) run
#             unpinned
#   -o DIR    keep every run's JSON, stdout/stderr and peak RSS in DIR (env KEEP)
#   -m FILE   also write the tables as markdown to FILE (env MARKDOWN)
# env: CONFIGS (default "salloc salloc-noprof glibc jemalloc tcmalloc
#   mimalloc"; also known: jemalloc-prof = jemalloc with MALLOC_CONF=prof:true,
#   which adds a "jemalloc prof on/off" column), SALLOC_LIB (default
#   lib/libsalloc.so), JEMALLOC_LIB, TCMALLOC_LIB, MIMALLOC_LIB, BENCH_BIN,
#   CXX_WORKLOAD_BIN.  A configuration whose library is missing is skipped
#   with a message.
#
# Time: 6 configurations x 39 benchmarks x ROUNDS runs; the defaults take
# about 6 minutes on a 2-core machine (about 70 s per round).  ROUNDS=1
# MIN_TIME=0.02, a smoke test of the whole pipeline, about 40 seconds.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-5}
MIN_TIME=${MIN_TIME:-0.1}
FILTER=${FILTER:-}
KEEP=${KEEP:-}
MARKDOWN=${MARKDOWN:-}
PIN_CPU=${PIN_CPU:-}

die() { echo "compare.sh: $*" >&2; exit 2; }
while getopts "r:t:f:c:o:m:h" opt; do
    case $opt in
        r) ROUNDS=$OPTARG ;;
        t) MIN_TIME=$OPTARG ;;
        f) FILTER=$OPTARG ;;
        c) PIN_CPU=$OPTARG ;;
        o) KEEP=$OPTARG ;;
        m) MARKDOWN=$OPTARG ;;
        *) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
(($# == 0)) || die "unexpected argument '$1' (see -h)"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "rounds must be a positive integer, got '$ROUNDS'"
[[ $MIN_TIME =~ ^[0-9]*\.?[0-9]+$ ]] || die "min time must be a number of seconds, got '$MIN_TIME'"
[[ -z $PIN_CPU || $PIN_CPU =~ ^[0-9]+$ ]] || die "cpu must be a CPU number, got '$PIN_CPU'"
[[ -z $PIN_CPU ]] || command -v taskset >/dev/null || die "-c needs taskset (util-linux)"
command -v python3 >/dev/null || die "python3 is required (runs the benchmarks, parses their JSON)"

export ROOT=$root ROUNDS MIN_TIME FILTER KEEP MARKDOWN PIN_CPU
export BENCH_BIN=${BENCH_BIN:-$root/bench/bin/bench_core}
export CXX_WORKLOAD_BIN=${CXX_WORKLOAD_BIN:-$root/bench/bin/cxx_workload}
export CONFIGS=${CONFIGS:-salloc salloc-noprof glibc jemalloc tcmalloc mimalloc}
multiarch=/usr/lib/x86_64-linux-gnu
export SALLOC_LIB=${SALLOC_LIB:-$root/lib/libsalloc.so}
export JEMALLOC_LIB=${JEMALLOC_LIB:-$multiarch/libjemalloc.so.2}
export TCMALLOC_LIB=${TCMALLOC_LIB:-$multiarch/libtcmalloc_minimal.so.4}
export MIMALLOC_LIB=${MIMALLOC_LIB:-$multiarch/libmimalloc.so.2}
[[ -x $BENCH_BIN ]] || die "$BENCH_BIN not found: build it with 'make bench'"
[[ -x $CXX_WORKLOAD_BIN ]] || die "$CXX_WORKLOAD_BIN not found: build it with 'make bench'"

exec python3 - <<'PY'
import json, math, os, random, re, shutil, statistics, subprocess, sys, tempfile, time

E = os.environ
ROOT, ROUNDS, MIN_TIME = E["ROOT"], int(E["ROUNDS"]), E["MIN_TIME"]
FILTER, KEEP, MARKDOWN = E["FILTER"], E["KEEP"], E["MARKDOWN"]
PIN_CPU = E["PIN_CPU"]
BENCH_BIN, CXX_BIN = E["BENCH_BIN"], E["CXX_WORKLOAD_BIN"]
CXX_ROW = "cxx_workload"
RUN_TIMEOUT = 600    # seconds; a hung run counts as a failure
TIME_BIN = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None

def say(msg):
    print(f"compare.sh: {msg}", file=sys.stderr, flush=True)

# ---- configurations: name -> library to preload, extra environment ----
KNOWN = {
    "salloc":        (E["SALLOC_LIB"], {}),
    "salloc-noprof": (E["SALLOC_LIB"], {"SALLOC_CONF": "prof:false"}),
    "glibc":         ("", {}),
    "jemalloc":      (E["JEMALLOC_LIB"], {}),
    "jemalloc-prof": (E["JEMALLOC_LIB"], {"MALLOC_CONF": "prof:true"}),
    "tcmalloc":      (E["TCMALLOC_LIB"], {}),
    "mimalloc":      (E["MIMALLOC_LIB"], {}),
}
configs = []
for c in E["CONFIGS"].split():
    if c not in KNOWN:
        sys.exit(f"compare.sh: unknown configuration '{c}' (known: {' '.join(KNOWN)})")
    lib = KNOWN[c][0]
    if lib and not os.path.exists(lib):
        hint = " (build it with 'make')" if c.startswith("salloc") else ""
        say(f"skipping {c}: {lib} not found{hint}")
        continue
    configs.append(c)
if not configs:
    sys.exit("compare.sh: no configuration left to run")

# ---- the benchmarks: names as bench_core lists them, shown without the
# suffixes google benchmark appends ----
SUFFIX = re.compile(r"(/(real_time|manual_time|process_time|iterations:\d+|"
                    r"min_time:[0-9.]+|repeats:\d+|threads:\d+))+$")
listed = subprocess.run([BENCH_BIN, "--benchmark_list_tests"], check=True,
                        capture_output=True, text=True).stdout.split()
full_name = {SUFFIX.sub("", n): n for n in listed}
# What -c pins: bench_core times its single-threaded benchmarks in real time
# (UseRealTime); the self-timed ones (every threaded one, and phase) time
# themselves and stay unpinned.
single_threaded = {b for b, n in full_name.items() if n.endswith("/real_time")}
single_threaded.add(CXX_ROW)
# scale_harness is the scaling loop with no malloc or free (scaling.sh's
# baseline row): it compares no allocators, so it stays out of the table.
benches = [b for b in list(full_name) + [CXX_ROW]
           if re.search(FILTER, b) and not b.startswith("scale_harness/")]
if not benches:
    sys.exit(f"compare.sh: no benchmark matches '{FILTER}'")

def ere_escape(name):   # google benchmark's filter is a POSIX extended regex
    return re.sub(r"([.\[\]{}()\\*+?^$|])", r"\\\1", name)

out = KEEP or tempfile.mkdtemp(prefix="salloc-compare.")
os.makedirs(out, exist_ok=True)

# ---- one run: returns (ns per op, peak RSS KiB, counters) or an error ----
def env_for(config):
    lib, extra = KNOWN[config]
    env = {k: v for k, v in E.items()
           if k not in ("LD_PRELOAD", "SALLOC_CONF", "MALLOC_CONF")}
    return lib, {**env, **extra}

def run(config, bench, r):
    lib, env = env_for(config)
    # The environment's size moves the initial stack, and with it which of
    # the program's stack addresses share their low 12 bits with heap and
    # cache addresses (loads then wait on unrelated stores): the one
    # salloc file took 12.8 to 14.0 ns on pair/65536 at seven path lengths.
    # Each configuration's path and options would fix its own offset for
    # every round, so each run gets padding of a drawn length (seeded), and
    # the median over rounds is over stack layouts too.
    pad = random.Random(f"pad/{r}/{bench}/{config}").randrange(0, 4096, 16)
    env["SALLOC_COMPARE_PAD"] = "x" * pad
    stem = os.path.join(out, f"{bench.replace('/', '_')}.{config}.{r}")
    if bench == CXX_ROW:
        cmd = [CXX_BIN]
    else:
        cmd = [BENCH_BIN, f"--benchmark_filter=^{ere_escape(full_name[bench])}$",
               f"--benchmark_min_time={MIN_TIME}", f"--benchmark_out={stem}.json",
               "--benchmark_out_format=json"]
    if lib:   # preloaded into the measured program only, not into time
        cmd = ["env", f"LD_PRELOAD={lib}", *cmd]
    if PIN_CPU and bench in single_threaded:
        cmd = ["taskset", "-c", PIN_CPU, *cmd]
    if TIME_BIN:
        cmd = [TIME_BIN, "-f", "%M", "-o", f"{stem}.rss", *cmd]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                           timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"hung (killed after {RUN_TIMEOUT} s)"
    with open(f"{stem}.log", "w") as f:
        f.write(p.stdout + p.stderr)
    if p.returncode != 0:
        return f"exit status {p.returncode}: {p.stderr.strip()[-300:]}"
    if "cannot be preloaded" in p.stderr:
        return "ld.so refused the preload"
    rss = None
    if TIME_BIN:
        rss = int(open(f"{stem}.rss").read().split()[-1])
    if bench == CXX_ROW:
        m = re.match(r"checksum (\d+) elapsed_ms ([0-9.]+)", p.stdout)
        if not m:
            return f"unexpected output {p.stdout[:100]!r}"
        return float(m.group(2)) * 1e6, rss, {"checksum": int(m.group(1))}
    with open(f"{stem}.json") as f:
        rows = [b for b in json.load(f)["benchmarks"]
                if b.get("run_type", "iteration") == "iteration"]
    if len(rows) != 1:
        return f"{len(rows)} results in the JSON (expected 1)"
    b = rows[0]
    if b.get("error_occurred"):
        return f"error: {b.get('error_message')}"
    to_ns = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
    standard = {"name", "family_index", "per_family_instance_index", "run_name",
                "run_type", "repetitions", "repetition_index", "threads",
                "iterations", "real_time", "cpu_time", "time_unit", "label",
                "error_occurred", "error_message", "bytes_per_second",
                "items_per_second", "aggregate_name", "aggregate_unit"}
    counters = {k: v for k, v in b.items()
                if k not in standard and isinstance(v, (int, float))}
    return b["real_time"] * to_ns, rss, counters

# ---- the interleaved runs ----
times, rss, counters, failures = {}, {}, {}, []
started = time.monotonic()
n = len(configs)
for r in range(1, ROUNDS + 1):
    say(f"round {r}/{ROUNDS} ({len(benches)} benchmarks x {n} configurations, "
        f"{time.monotonic() - started:.0f} s so far)")
    for bench in benches:
        order = list(configs)
        random.Random(f"{r}/{bench}").shuffle(order)
        for config in order:
            res = run(config, bench, r)
            if isinstance(res, str):
                failures.append((bench, config, r, res))
                say(f"FAIL {bench} under {config} (round {r}): {res}")
                continue
            ns, kib, ctr = res
            times.setdefault((bench, config), []).append(ns)
            if kib is not None:
                rss.setdefault((bench, config), []).append(kib)
            for k, v in ctr.items():
                counters.setdefault((bench, k), {}).setdefault(config, []).append(v)
elapsed = time.monotonic() - started

# cxx_workload computes the same checksum on every allocator, or one is wrong.
sums = {c: set(counters.pop((CXX_ROW, "checksum"), {}).get(c, [])) for c in configs}
if len(set().union(*sums.values())) > 1:
    failures.append((CXX_ROW, "-", "-", f"checksums differ: {sums}"))

# ---- the tables ----
def med(d, key):
    v = d.get(key)
    return statistics.median(v) if v else None

def gmean(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None

def ratio(a, b):
    return a / b if a is not None and b else None

t = {(b, c): med(times, (b, c)) for b in benches for c in configs}
m = {(b, c): med(rss, (b, c)) for b in benches for c in configs}
rivals = [c for c in ("jemalloc", "tcmalloc", "mimalloc") if c in configs]
ratio_cols = []   # (title, function of benchmark -> value)
if "salloc" in configs and rivals:
    def best(b):
        v = [t[b, c] for c in rivals if t[b, c] is not None]
        return ratio(t[b, "salloc"], min(v)) if v else None
    ratio_cols.append(("salloc/best", best))
if "salloc" in configs and "salloc-noprof" in configs:
    ratio_cols.append(("prof on/off", lambda b: ratio(t[b, "salloc"], t[b, "salloc-noprof"])))
if "jemalloc" in configs and "jemalloc-prof" in configs:
    ratio_cols.append(("jemalloc prof on/off",
                       lambda b: ratio(t[b, "jemalloc-prof"], t[b, "jemalloc"])))
if "salloc" in configs and "mimalloc" in configs and TIME_BIN:
    ratio_cols.append(("rss salloc/mimalloc", lambda b: ratio(m[b, "salloc"], m[b, "mimalloc"])))

def fmt_time(b, ns):
    if ns is None:
        return "FAIL"
    v = ns / 1e6 if b == CXX_ROW else ns
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"

def fmt_ratio(x):
    return "-" if x is None else f"{x:.3f}"

def label(b):
    return f"{b} (ms)" if b == CXX_ROW else b

time_head = ["benchmark"] + configs + [title for title, _ in ratio_cols]
time_rows = [[label(b)] + [fmt_time(b, t[b, c]) for c in configs]
             + [fmt_ratio(f(b)) for _, f in ratio_cols] for b in benches]
time_foot = [["geomean"] + [fmt_time(None, gmean([t[b, c] for b in benches])) for c in configs]
             + [fmt_ratio(gmean([f(b) for b in benches])) for _, f in ratio_cols]]
def spread(c):
    s = [(max(times[b, c]) - min(times[b, c])) / statistics.median(times[b, c])
         for b in benches if times.get((b, c))]
    return f"{100 * statistics.median(s):.1f}%" if s else "-"
time_foot.append(["spread"] + [spread(c) for c in configs] + [""] * len(ratio_cols))

rss_head = ["benchmark"] + configs
rss_rows = [[b] + ["FAIL" if m[b, c] is None else f"{m[b, c] / 1024:.1f}" for c in configs]
            for b in benches] if TIME_BIN else []

ctr_head = ["benchmark: counter"] + configs
ctr_rows = []
for (b, k), per in sorted(counters.items(), key=lambda kv: (benches.index(kv[0][0]), kv[0][1])):
    cells = [f"{statistics.median(per[c]):.4g}" if per.get(c) else "-" for c in configs]
    ctr_rows.append([f"{b}: {k}"] + cells)

def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""

def version(config):
    lib = KNOWN[config][0]
    if config.startswith("salloc"):
        v = sh(["git", "-C", ROOT, "describe", "--always", "--dirty"]) or "unknown"
        return f"salloc {v} ({lib})"
    if not lib:
        v = sh(["dpkg-query", "-W", "-f", "${Version}", "libc6"])
        return f"glibc {v or (sh(['ldd', '--version']).splitlines() or ['(version unknown)'])[0]}"
    owner = sh(["dpkg", "-S", os.path.realpath(lib)]).split(":")[0]
    if owner:
        return f"{owner} {sh(['dpkg-query', '-W', '-f', '${Version}', owner])} ({lib})"
    return f"{lib} (not from a Debian package)"

cpu = "unknown CPU"
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
except OSError:
    pass
header = [
    f"machine: {sh(['nproc']) or os.cpu_count()} cores (nproc), {cpu}, Linux {os.uname().release}",
    f"runs: {ROUNDS} interleaved round(s) in orders drawn per benchmark and round, --benchmark_min_time={MIN_TIME}, each benchmark "
    f"in its own process; {elapsed:.0f} s in all"
    + (f"; single-threaded benchmarks pinned to CPU {PIN_CPU}" if PIN_CPU else ""),
    "versions: " + "; ".join(dict.fromkeys(version(c) for c in configs)),
]
configs_line = "configurations: " + ", ".join(
    f"{c} ({' '.join(f'{k}={v}' for k, v in KNOWN[c][1].items())})" if KNOWN[c][1] else c
    for c in configs)
header.append(configs_line)
time_title = ("median wall time per operation, ns (cxx_workload: ms for the whole "
              "program); ratios below 1: salloc faster / smaller")
rss_title = "peak RSS of the benchmark's process, MiB (median over rounds)"
ctr_title = "the benchmarks' own counters (median over rounds)"

def text_table(head, rows, foot=()):
    w = [max(len(r[i]) for r in [head, *rows, *foot]) for i in range(len(head))]
    line = lambda r: "  ".join(c.ljust(w[0]) if i == 0 else c.rjust(w[i])
                               for i, c in enumerate(r)).rstrip()
    rule = "  ".join("-" * x for x in w)
    body = [line(head), rule, *map(line, rows)]
    if foot:
        body += [rule, *map(line, foot)]
    return "\n".join(body)

def md_table(head, rows, foot=()):
    esc = lambda c: c.replace("|", "\\|")
    lines = ["| " + " | ".join(map(esc, head)) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    lines += ["| " + " | ".join(map(esc, r)) + " |" for r in [*rows, *foot]]
    return "\n".join(lines)

print("\n".join(header))
print()
print(time_title)
print(text_table(time_head, time_rows, time_foot))
if rss_rows:
    print()
    print(rss_title)
    print(text_table(rss_head, rss_rows))
if ctr_rows:
    print()
    print(ctr_title)
    print(text_table(ctr_head, ctr_rows))
if not TIME_BIN:
    print("\n(no /usr/bin/time: no peak RSS)")

if MARKDOWN:
    with open(MARKDOWN, "w") as f:
        f.write("\n".join(f"- {h}" for h in header) + "\n\n")
        f.write(f"{time_title}\n\n{md_table(time_head, time_rows, time_foot)}\n")
        if rss_rows:
            f.write(f"\n{rss_title}\n\n{md_table(rss_head, rss_rows)}\n")
        if ctr_rows:
            f.write(f"\n{ctr_title}\n\n{md_table(ctr_head, ctr_rows)}\n")
    say(f"markdown written to {MARKDOWN}")

if not KEEP:
    shutil.rmtree(out, ignore_errors=True)
if failures:
    print(f"\n{len(failures)} failed run(s):")
    for bench, config, r, why in failures:
        print(f"  {bench} under {config} (round {r}): {why}")
    sys.exit(1)
PY
