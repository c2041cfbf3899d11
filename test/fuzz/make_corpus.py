#!/usr/bin/env python3
"""make_corpus.py: writes the seed corpora of test/fuzz/corpus/ (committed;
run again only to refresh them).

    make all build/fuzz/elf_sample && python3 test/fuzz/make_corpus.py

  fuzz_conf/          option strings: test/unit/test_conf.c's, the README's
  fuzz_mallctl/       every name of src/ctl.c's table, read, written and
                      through a MIB (the input encoding of fuzz_mallctl.c),
                      dumps of every kind, statistics, bad names; and the
                      dictionary fuzz_mallctl.dict, from the same table
  fuzz_dump_readers/  heap_v2 dumps: jemalloc's and the tools' fixtures
                      (../shared/fixtures), and salloc's own of
                      build/fuzz/elf_sample (live, fragmentation, peak) with
                      the addr2line answers for their addresses; other
                      formats the reader must refuse; elf_sample as ELF input
"""
import glob
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "test", "fuzz", "corpus")
FIXTURES = os.environ.get("FIXTURES_DIR", os.path.join(ROOT, "..", "shared", "fixtures"))
ELF_SAMPLE = os.path.join(ROOT, "build", "fuzz", "elf_sample")
LIBSALLOC = os.path.join(ROOT, "lib", "libsalloc.so")


def reset(target):
    d = os.path.join(CORPUS, target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def put(d, name, data):
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- fuzz_conf ----

CONF = [
    "prof:false,prof_active:false,prof_thread_active_init:false,lg_prof_sample:12,"
    "prof_prefix:/tmp/p x,prof_final:true,prof_accum:true,lg_prof_interval:30,prof_gdump:true,"
    "dirty_decay_ms:500,muzzy_decay_ms:0,narenas:8,tcache:true,retain:true,abort_conf:false,"
    "confirm_conf:false",
    "prof_format:pb.gz,prof_unwind:libgcc",
    "prof_unwind:check,prof_unwind:fast",
    "bogus:1,lg_prof_sample:7,prof:yes",
    "lg_prof_sample:10,bo-gus:1,lg_prof_sample:11",
    "lg_prof_sample:0x10,lg_prof_sample:010,lg_prof_sample:99",
    "lg_prof_interval:63,dirty_decay_ms:-1",
    "narenas:99999999999999999999999,narenas:0,lg_prof_interval:-2,lg_prof_interval:64",
    "prof: true,prof:1,prof:,lg_prof_sample: 5,lg_prof_sample:12k,lg_prof_sample:-1",
    "tcache:false,retain:false,prof_unwind:fastest,prof_format:pb.gzip,prof_unwind:",
    "prof-x:true",
    ":true",
    "prof:true,",
    "prof,prof:true",
    "confirm_conf:true,lg_prof_sample:9,bogus:2",
    "lg_prof_sample:6,confirm_conf:true",
    "abort_conf:true,bogus:1",
    "dirty_decay_ms:1000",
    "prof_final:true,lg_prof_sample:10,prof_prefix:/tmp/x",
    "prof_final:true,prof_final_peak:true,prof_peak_pct:1000,prof_format:pb",
    "prof_peak_pct:0,prof_peak_pct:1001,dirty_decay_ms:9223372036854",
    "prof_prefix:" + "a" * 1100,
    "prof_prefix:",
    "",
    "check:true,prof_guard:true,lg_prof_guard_every:10",
    "lg_prof_guard_every:-2,lg_prof_guard_every:64,prof_guard:1",
]


def conf():
    d = reset("fuzz_conf")
    for i, s in enumerate(CONF):
        put(d, "conf-%02d" % i, s)


# ---- fuzz_mallctl ----

MALLCTL, MIB, RAW, STATS = 0, 1, 2, 3
OLDP, OLDLENP, NEWP, NULLSTR, ALLOC = 8, 16, 32, 64, 128
CTL_MIB_NAMED = 1 << 62
SIZES = {"T_VOID": 0, "T_BOOL": 1, "T_UNSIGNED": 4, "T_UINT32": 4, "T_SIZE": 8,
         "T_SSIZE": 8, "T_UINT64": 8, "T_STR": 8}


def rec(mode, oldlen, newlen, aux, name, rest=b""):
    return bytes([mode, oldlen, newlen, aux]) + name.encode() + b"\0" + rest


def ctl_table():
    """(name, type, access) for every row of src/ctl.c's table, in order."""
    rows = []
    with open(os.path.join(ROOT, "src", "ctl.c")) as f:
        text = f.read()
    body = text[text.index("static const struct ctl_row table[]"):]
    body = body[:body.index("};")]
    for m in re.finditer(r'^\s*(FN|VAR|CONST|STR|STAT|BINSTAT)\("([^"]+)"(.*)\),\s*$', body, re.M):
        kind, name, rest = m.groups()
        args = [a.strip() for a in rest.split(",")[1:]]
        if kind == "FN":
            typ, acc = args[0], args[1]
        elif kind in ("VAR", "CONST"):
            typ, acc = args[0], "A_R"
        elif kind == "STR":
            typ, acc = "T_STR", "A_R"
        else:
            typ, acc = "T_SIZE", "A_R"
        rows.append((name, typ, acc))
    if len(rows) < 50:
        sys.exit("make_corpus.py: could not read src/ctl.c's table")
    return rows


def value(name, typ):
    if typ == "T_STR":
        if name == "prof.prefix":
            return b"seed\0"
        if name == "thread.prof.name":
            return b"worker\0"
        return name.encode().replace(b".", b"_") + b".heap\0"
    if typ == "T_BOOL":
        return b"\x01"
    if name.endswith("dirty_decay_ms"):
        return struct.pack("<q", 0)
    if name in ("prof.lg_sample", "prof.reset"):
        return struct.pack("<Q", 10)
    return struct.pack("<Q", 1)[: SIZES[typ]]


def mallctl_dict(rows):
    words = sorted({c for name, _, _ in rows for c in name.split(".") if not c.startswith("<")})
    with open(os.path.join(ROOT, "test", "fuzz", "fuzz_mallctl.dict"), "w") as f:
        f.write("# libFuzzer dictionary for fuzz_mallctl: the components of src/ctl.c's names\n"
                "# (written by make_corpus.py), special indices, dump suffixes, stats options\n")
        for w in words + [".", ".0.", "4096", "4097", ".heap", ".pb", ".pb.gz", "J", "gab"]:
            f.write('"%s"\n' % w)


def mallctl():
    d = reset("fuzz_mallctl")
    rows = ctl_table()
    mallctl_dict(rows)
    groups = {}
    for name, typ, acc in rows:
        n = name.replace("<i>", "0").replace("<j>", "3")
        size = SIZES[typ]
        calls = groups.setdefault(name.split(".")[0], [])
        if acc in ("A_R", "A_RW", "A_RX"):
            calls.append(rec(MALLCTL | OLDP | OLDLENP, size, 0, 0, n))
            calls.append(rec(MIB | OLDP | OLDLENP, size, 0, 8, n))
        if acc in ("A_RW", "A_W", "A_RX"):
            calls.append(rec(MALLCTL | NEWP, 0, size, 0, n, value(name, typ)))
        if acc == "A_NONE":
            calls.append(rec(MALLCTL, 0, 0, 0, n))
    for group, calls in sorted(groups.items()):
        for k in range(0, len(calls), 32):
            put(d, "names-%s-%d" % (group, k // 32), b"".join(calls[k:k + 32]))

    index = {name: r for r, (name, _, _) in enumerate(rows)}

    def raw_mib(pattern, ints):
        """A MIB as mallctlnametomib() makes it (ctl.c: CTL_MIB_NAMED | row << 8 | k)."""
        r = index[pattern]
        out, it = [], iter(ints)
        for k, comp in enumerate(pattern.split(".")):
            out.append(next(it) if comp.startswith("<") else CTL_MIB_NAMED | r << 8 | k)
        return b"".join(struct.pack("<Q", v) for v in out)

    put(d, "dumps", b"".join([
        rec(MALLCTL | NEWP, 0, 8, 0, "prof.lg_sample", struct.pack("<Q", 0)),
        rec(MALLCTL | ALLOC, 0, 0, 0x53, "epoch"),
        rec(MALLCTL | ALLOC, 0, 0, 0xc1, "epoch"),
        rec(MALLCTL | NEWP, 0, 8, 0, "prof.dump", b"seed.heap\0"),
        rec(MALLCTL | NEWP, 0, 8, 0, "prof.dump", b"seed.pb\0"),
        rec(MALLCTL | NEWP, 0, 8, 0, "prof.dump", b"seed.pb.gz\0"),
        rec(MALLCTL | NEWP, 0, 8, 0, "prof.dump_fragmentation", b"frag.pb.gz\0"),
        rec(MALLCTL | NEWP, 0, 8, 0, "prof.dump_peak", b"peak.heap\0"),
        rec(MALLCTL | NEWP | NULLSTR, 0, 8, 0, "prof.dump", b"\0"),
        rec(MALLCTL, 0, 0, 0, "prof.dump"),
        rec(MALLCTL | NEWP, 0, 8, 0, "prof.prefix", b"\0"),
        rec(MALLCTL, 0, 0, 0, "prof.dump"),
        rec(MALLCTL | NEWP, 0, 8, 0, "prof.reset", struct.pack("<Q", 70)),
        rec(MALLCTL | OLDP | OLDLENP, 8, 0, 0, "prof.sample_count"),
    ]))
    put(d, "gdump", b"".join([
        rec(MALLCTL | NEWP, 0, 1, 0, "prof.gdump", b"\x01"),
        rec(MALLCTL | ALLOC, 0, 0, 0xf0, "version"),
        rec(MALLCTL | ALLOC, 0, 0, 0xff, "version"),
        rec(MALLCTL | NEWP, 0, 8, 0, "arenas.dirty_decay_ms", struct.pack("<q", 0)),
        rec(MALLCTL, 0, 0, 0, "arena.4096.purge"),
        rec(MALLCTL, 0, 0, 0, "arena.0.decay"),
        rec(MALLCTL, 0, 0, 0, "thread.tcache.flush"),
    ]))
    put(d, "stats", b"".join([
        rec(STATS, 0, 0, 0, ""),
        rec(STATS, 0, 0, 0, "J"),
        rec(STATS, 0, 0, 0, "gab"),
        rec(STATS | ALLOC, 0, 0, 0x20, "Jbmdlxeh"),
    ]))
    put(d, "raw-mib", b"".join([
        rec(RAW | OLDP | OLDLENP, 8, 0, 4, "", raw_mib("arenas.bin.<i>.size", [3])),
        rec(RAW | OLDP | OLDLENP, 8, 0, 6, "",
            raw_mib("stats.arenas.<i>.bins.<j>.curregs", [4096, 7])),
        rec(RAW | OLDP | OLDLENP, 1, 8, 2, "", raw_mib("prof.active", [])),
        rec(MIB | OLDP | OLDLENP, 8, 0, 0x14, "arenas.bin.0.size", struct.pack("<Q", 9)),
        rec(MIB | OLDP | OLDLENP, 8, 0, 0x22, "arenas.bin.0.size"),
    ]))
    put(d, "bad-names", b"".join([
        rec(MALLCTL | OLDP | OLDLENP, 8, 0, 0, ""),
        rec(MALLCTL | OLDP | OLDLENP, 8, 0, 0, "a..b"),
        rec(MALLCTL | OLDP | OLDLENP, 8, 0, 0, "opt"),
        rec(MALLCTL | OLDP | OLDLENP, 1, 0, 0, "opt.prof.x"),
        rec(MALLCTL, 0, 0, 0, "arena.1.purge"),
        rec(MALLCTL | OLDP | OLDLENP, 8, 0, 0, "stats.arenas.0.bins.999.curregs"),
        rec(MALLCTL | OLDP | OLDLENP, 8, 0, 0, "arenas.bin.99999999999999999999999.size"),
        rec(MALLCTL | OLDP | OLDLENP, 4, 0, 0, "stats.allocated"),
        rec(MALLCTL | OLDP | OLDLENP, 16, 0, 0, "stats.allocated"),
        rec(MALLCTL | OLDP | NEWP, 1, 1, 0, "thread.prof.name", b"x\0"),
        rec(MALLCTL | NEWP, 0, 8, 0, "thread.prof.name", b"bad\x01name\0"),
        rec(MALLCTL | NEWP | NULLSTR, 0, 8, 0, "thread.prof.name", b"\0"),
        rec(MALLCTL | NEWP, 0, 4, 0, "thread.arena", struct.pack("<I", 1)),
        rec(MALLCTL | NEWP, 0, 8, 0, "arena.0.dirty_decay_ms", struct.pack("<q", -2)),
    ]))


# ---- fuzz_dump_readers ----

def trim_maps(text, keep_anon=3):
    """Drops most anonymous mappings (salloc's sampled pages): smaller seeds."""
    head, sep, maps = text.partition("MAPPED_LIBRARIES:\n")
    if not sep:
        return text
    out, anon = [], 0
    for line in maps.splitlines(True):
        if "/" in line or "[" in line:
            out.append(line)
        elif anon < keep_anon:
            out.append(line)
            anon += 1
    return head + sep + "".join(out)


def addr2line_answers(dump, elf):
    """What addr2line -f -i -C prints for the dump's addresses in elf, in the
    order and form symbolize.c asks (sorted, each followed by 0)."""
    head, _, maps = dump.partition("MAPPED_LIBRARIES:\n")
    spans = []
    for line in maps.splitlines():
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) \S+ ([0-9a-f]+) \S+ \d+\s+(\S+)$", line)
        if m and os.path.basename(m.group(4)) == "elf_sample":
            spans.append((int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16)))
    vaddrs = set()
    for a in re.findall(r"0x[0-9a-f]+", head):
        a = int(a, 16) - 1
        for start, end, off in spans:
            if start <= a < end:
                vaddrs.add(a - start + off)
    if not vaddrs:
        return ""
    args = []
    for v in sorted(vaddrs):
        args += ["%#x" % v, "0"]
    return subprocess.run(["addr2line", "-f", "-i", "-C", "-e", elf] + args,
                          capture_output=True, text=True, check=True).stdout


def dump_readers():
    d = reset("fuzz_dump_readers")
    for rel, name in [("jemalloc/three_sites.heap", "jemalloc-three_sites.heap"),
                      ("jemalloc/three_sites.accum.heap", "jemalloc-three_sites.accum.heap"),
                      ("tools/golden_v2.heap", "golden_v2.heap"),
                      ("tools/golden_v2.legacy.heap", "refused-legacy.heap"),
                      ("tools/golden.pb", "refused-golden.pb"),
                      ("go/go_heap.pb.gz", "refused-go_heap.pb.gz")]:
        with open(os.path.join(FIXTURES, rel), "rb") as f:
            put(d, name, f.read())
    put(d, "minimal.heap", "heap_v2/0\n  t*: 0: 0 [0: 0]\n")
    put(d, "addr2line-only.heap",
        "heap_v2/512\n  t*: 1: 64 [0: 0]\n@ 0x1001\n  t*: 1: 64 [0: 0]\n\nMAPPED_LIBRARIES:\n"
        "00001000-00002000 r-xp 00000000 00:00 0 /x/elf_sample (deleted)\n"
        "ADDR2LINE:\nmain\n/src/a.c:3\ninlined\n/src/a.h:9 (discriminator 2)\n??\n??:0\n")

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, LD_PRELOAD=LIBSALLOC,
                   SALLOC_CONF="prof_final:true,lg_prof_sample:14,prof_prefix:%s/final" % tmp)
        subprocess.run([ELF_SAMPLE, "600", tmp + "/x"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        made = sorted(glob.glob(tmp + "/final.*.f.heap")) + [tmp + "/x.frag.heap", tmp + "/x.peak.heap"]
        for path, name in zip(made, ["salloc-live.heap", "salloc-frag.heap", "salloc-peak.heap"]):
            with open(path) as f:
                text = trim_maps(f.read())
            put(d, name, text)
            put(d, name.replace(".heap", "+addr2line.heap"),
                text + "ADDR2LINE:\n" + addr2line_answers(text, ELF_SAMPLE))
        subprocess.run(["strip", "--strip-debug", "-o", tmp + "/e1", ELF_SAMPLE], check=True)
        subprocess.run(["strip", "-o", tmp + "/e2", ELF_SAMPLE], check=True)
        for src, name in [(tmp + "/e1", "elf_sample.elf"), (tmp + "/e2", "elf_sample-stripped.elf")]:
            with open(src, "rb") as f:
                put(d, name, f.read())


if __name__ == "__main__":
    for p in (ELF_SAMPLE, LIBSALLOC):
        if not os.path.exists(p):
            sys.exit("make_corpus.py: build %s first (make all build/fuzz/elf_sample)" % p)
    conf()
    mallctl()
    dump_readers()
    total = sum(os.path.getsize(f) for f in glob.glob(CORPUS + "/*/*"))
    print("corpus: %d files, %d bytes" % (len(glob.glob(CORPUS + "/*/*")), total))
