#!/usr/bin/env python3
"""make_corpus.py: writes the seed corpora of test/fuzz/corpus/ (committed;
run again only to refresh them).

    make all build/fuzz/elf_sample && python3 test/fuzz/make_corpus.py [TARGET...]

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
  fuzz_unwind/        walks through the unwind tables of elf_sample and
                      lib/libsalloc.so (stacks laid out from their rules), of
                      libc's signal trampoline, and of tables made here (every
                      DW_CFA instruction, augmentations, encodings); and the
                      dictionary fuzz_unwind.dict
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
    """Empties a target's corpus but for its seeds made by hand (HAND_MADE)."""
    d = os.path.join(CORPUS, target)
    kept = {}
    for name in HAND_MADE.get(target, ()):
        path = os.path.join(d, name)
        if os.path.exists(path):
            with open(path, "rb") as f:
                kept[name] = f.read()
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, data in kept.items():
        put(d, name, data)
    return d


# Seeds written by hand, not by this script: kept as they are.
HAND_MADE = {"fuzz_mallctl": ["hooks_set_sample_dump"]}


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
         "T_SSIZE": 8, "T_UINT64": 8, "T_STR": 8, "T_FN": 8, "T_WRITER": 16}
# Written by fuzz_mallctl.c's own cases (strings[]: S_FN, S_WRITER), never
# with raw bytes: a hook set to 1 would be called.
NO_RAW_WRITE = ("T_FN", "T_WRITER")


def rec(mode, oldlen, newlen, aux, name, rest=b""):
    return bytes([mode, oldlen, newlen, aux]) + name.encode() + b"\0" + rest


def ctl_table():
    """(name, type, access) for every row of src/ctl.c's table, in order."""
    rows = []
    with open(os.path.join(ROOT, "src", "ctl.c")) as f:
        text = f.read()
    body = text[text.index("static const struct ctl_row table[]"):]
    body = body[:body.index("};")]
    for m in re.finditer(r'^\s*(FN|VAR|CONST|STR|STAT|STAT64|STATU|BINSTAT|BINSTAT64)\("([^"]+)"(.*)\),',
                         body, re.M):
        kind, name, rest = m.groups()
        args = [a.strip() for a in rest.split(",")[1:]]
        if kind == "FN":
            typ, acc = args[0], args[1]
        elif kind in ("VAR", "CONST"):
            typ, acc = args[0], "A_R"
        elif kind == "STR":
            typ, acc = "T_STR", "A_R"
        elif kind in ("STAT64", "BINSTAT64"):
            typ, acc = "T_UINT64", "A_R"
        elif kind == "STATU":
            typ, acc = "T_UNSIGNED", "A_R"
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
        # Whole names too for the hooks: the harness writes a function only
        # to a leaf it recognises by name (fuzz_mallctl.c, strings[]).
        hooks = [name for name, typ, _ in rows if typ == "T_FN"]
        for w in words + hooks + [".", ".0.", "4096", "4097", ".heap", ".pb", ".pb.gz", "J", "gab"]:
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
        if acc in ("A_RW", "A_W", "A_RX") and typ not in NO_RAW_WRITE:
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


# ---- fuzz_unwind ----
# Inputs as fuzz_unwind.c's header describes them: a made-up object (its
# code segment, its table segment: .eh_frame_hdr and .eh_frame) and a stack.
# Real tables are copied from ELF files; a stack that walks through them is
# laid out here from the rules a small CFA interpreter (below) finds, one
# written independently of src/unwind.c.

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
UNWIND_OBJECT = 0x500000000000 + (64 << 10)  # fuzz_unwind.c's REGION_AT + GUARD
SIGRETURN = bytes([0x48, 0xC7, 0xC0, 0x0F, 0, 0, 0, 0x0F, 0x05])
TRAMP, BUILD_ID, PERMANENT = 1, 2, 4


def uleb(v):
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def sleb(v):
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        if (v == 0 and not b & 0x40) or (v == -1 and b & 0x40):
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


# Words: what the walker reads, from 32 bits (fuzz_unwind.c's word()).
def S(off):   # an address on the stack
    return off & 0xFFFF


def O(vaddr):  # an address in the object
    return 0x40000000 | vaddr


def N(n):     # a small number
    return 0x80000000 | n


def unwind_input(text, table, table_bytes, hdr_off, hdr_len, pc, sp=0, rbp=N(0), words=(),
                 flags=BUILD_ID, max_frames=64, tramp=0):
    head = struct.pack("<BBHIIIIIIHHI", flags, max_frames - 1, sp, pc, rbp, text[0], text[1],
                       table, len(table_bytes), hdr_off, hdr_len, tramp)
    assert len(head) == 36
    return head + table_bytes + b"".join(struct.pack("<I", w) for w in words)


def elf_layout(path):
    """(sections by name: (vaddr, offset, size)), [(p_type, p_flags, vaddr, memsz)] and the bytes."""
    with open(path, "rb") as f:
        data = f.read()
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", data, 0x36)
    phdrs = []
    for i in range(phnum):
        p_type, p_flags, _, p_vaddr, _, _, p_memsz, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
        phdrs.append((p_type, p_flags, p_vaddr, p_memsz))
    shdrs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = shdrs[shstrndx][4]
    sections = {}
    for sh in shdrs:
        name = data[strtab + sh[0]:data.index(b"\0", strtab + sh[0])].decode()
        sections[name] = (sh[3], sh[4], sh[5])
    return sections, phdrs, data


def elf_tables(path):
    """The code segment (vaddr, size) and .eh_frame_hdr + .eh_frame as one table segment."""
    sections, phdrs, data = elf_layout(path)
    text = [(v, n) for t, fl, v, n in phdrs if t == 1 and fl & 1][0]
    hdr, eh = sections[".eh_frame_hdr"], sections[".eh_frame"]
    start = min(hdr[0], eh[0])
    end = max(hdr[0] + hdr[2], eh[0] + eh[2])
    table = data[hdr[1] - (hdr[0] - start):hdr[1] - (hdr[0] - start) + end - start]
    return text, start, table, hdr[0] - start, hdr[2]


class Cursor:
    def __init__(self, data, pos, base):
        self.data, self.pos, self.base = data, pos, base  # base: vaddr of data[0]

    def fixed(self, n, signed=False):
        v = int.from_bytes(self.data[self.pos:self.pos + n], "little", signed=signed)
        self.pos += n
        return v

    def leb(self):
        """A LEB128 number: its value as unsigned, its bit count, its last byte."""
        v = shift = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v, shift, b

    def uleb(self):
        return self.leb()[0]

    def sleb(self):
        v, shift, last = self.leb()
        return v - (1 << shift) if last & 0x40 else v

    def encoded(self, enc):
        field = self.base + self.pos
        fmt = enc & 0x0F
        v = {0x00: lambda: self.fixed(8), 0x01: self.uleb, 0x02: lambda: self.fixed(2),
             0x03: lambda: self.fixed(4), 0x04: lambda: self.fixed(8), 0x09: self.sleb,
             0x0A: lambda: self.fixed(2, True), 0x0B: lambda: self.fixed(4, True),
             0x0C: lambda: self.fixed(8, True)}[fmt]()
        if enc & 0x70 == 0x10:
            v += field
        return v


def parse_eh_frame(table, table_vaddr, hdr_off):
    """Every FDE in the table segment's .eh_frame: dicts with begin, range, cie, instrs."""
    data = bytes(table)
    cies, fdes = {}, []
    # .eh_frame starts where .eh_frame_hdr's eh_frame_ptr says (its encoding second)
    c = Cursor(data, hdr_off + 1, table_vaddr)
    ptr_enc = c.fixed(1)
    c.pos = hdr_off + 4
    pos = c.encoded(ptr_enc) - table_vaddr
    while pos + 4 <= len(data):
        length = struct.unpack_from("<I", data, pos)[0]
        if length == 0:
            break
        body = pos + 4
        end = body + length
        cid = struct.unpack_from("<I", data, body)[0]
        if cid == 0:
            c = Cursor(data, body + 4, table_vaddr)
            version = c.fixed(1)
            aug = data[c.pos:data.index(b"\0", c.pos)].decode()
            c.pos += len(aug) + 1
            cie = {"code_align": c.uleb(), "data_align": c.sleb(), "enc": 0, "aug": aug}
            cie["ra"] = c.fixed(1) if version == 1 else c.uleb()
            if aug.startswith("z"):
                alen = c.uleb()
                a = Cursor(data, c.pos, table_vaddr)
                c.pos += alen
                for ch in aug[1:]:
                    if ch == "R":
                        cie["enc"] = a.fixed(1)
                    elif ch == "P":
                        a.encoded(a.fixed(1))
                    elif ch == "L":
                        a.fixed(1)
            cie["instrs"] = data[c.pos:end]
            cies[pos] = cie
        else:
            cie = cies.get(body - cid)
            if cie:
                c = Cursor(data, body + 4, table_vaddr)
                begin = c.encoded(cie["enc"])
                rng = c.encoded(cie["enc"] & 0x0F)
                if cie["aug"].startswith("z"):
                    skip = c.uleb()
                    c.pos += skip
                fdes.append({"begin": begin, "range": rng, "cie": cie, "instrs": data[c.pos:end]})
        pos = end
    return fdes


def run_cfa(instrs, cie, loc, target, row, initial):
    """Runs DWARF call frame instructions up to `target`; the row, or None if unsupported."""
    c = Cursor(bytes(instrs), 0, 0)
    stack = []
    da, ca = cie["data_align"], cie["code_align"]

    def setreg(reg, rule):
        if reg in (6, cie["ra"]):
            row[reg] = rule
    while c.pos < len(c.data):
        op = c.fixed(1)
        hi, arg = op & 0xC0, op & 0x3F
        delta = 0
        if hi == 0x40:
            delta = arg
        elif hi == 0x80:
            setreg(arg, ("off", c.uleb() * da))
        elif hi == 0xC0:
            if arg in initial:
                row[arg] = initial[arg]
        elif op == 0x00:
            pass
        elif op in (0x02, 0x03, 0x04):
            delta = c.fixed({2: 1, 3: 2, 4: 4}[op])
        elif op == 0x05:
            r = c.uleb()
            setreg(r, ("off", c.uleb() * da))
        elif op == 0x06:
            r = c.uleb()
            if r in initial:
                row[r] = initial[r]
        elif op == 0x07:
            setreg(c.uleb(), ("undef",))
        elif op == 0x08:
            setreg(c.uleb(), ("same",))
        elif op == 0x0A:
            stack.append(dict(row))
        elif op == 0x0B:
            row.clear()
            row.update(stack.pop())
        elif op == 0x0C:
            row["cfa"] = (c.uleb(), c.uleb())
        elif op == 0x0D:
            row["cfa"] = (c.uleb(), row["cfa"][1])
        elif op == 0x0E:
            row["cfa"] = (row["cfa"][0], c.uleb())
        elif op == 0x2E:
            c.uleb()
        else:
            return None  # expressions and the rest: no seed through them
        if delta:
            loc += delta * ca
            if loc > target:
                break
    return row


def rule_at(fde, pc):
    """(cfa register, offset, rbp slot k or 0) for code address pc, 'end' or None."""
    cie = fde["cie"]
    if "S" in cie["aug"]:
        return None
    initial = run_cfa(cie["instrs"], cie, fde["begin"], pc, {"cfa": (7, 0), 6: ("same",)}, {})
    if initial is None:
        return None
    row = run_cfa(fde["instrs"], cie, fde["begin"], pc, dict(initial), initial)
    if row is None:
        return None
    ra = row.get(cie["ra"], ("same",))
    if ra == ("undef",):
        return "end"
    reg, off = row["cfa"]
    rbp = row.get(6, ("same",))
    if reg not in (6, 7) or not 8 <= off < 1 << 20 or ra != ("off", -8) or rbp[0] not in ("same", "off"):
        return None
    if rbp[0] == "off" and not (rbp[1] < -8 and rbp[1] % 8 == 0 and rbp[1] >= -8 * 255):
        return None
    return reg, off, -rbp[1] // 8 if rbp[0] == "off" else 0


def frame_pc(fde, rbp_based):
    """A return address in fde whose rule is a frame (rbp-based or not), or None."""
    n = fde["range"]
    for off in sorted({n // 2, n // 3, 2 * n // 3, n - 2, n // 4, 3 * n // 4}):
        if 0 <= off < n:
            r = rule_at(fde, fde["begin"] + off)
            if r and r != "end" and (r[0] == 6) == rbp_based:
                return fde["begin"] + off + 1, r
    return None


def lay_out_stack(frames, end_pc, base=0x400):
    """The stack words, start sp and rbp for a walk through `frames` (return
    address, rule) ending at return address end_pc."""
    words = {}
    sp = base
    rbp, rbp_slot = None, None  # rbp's value, or the word that will hold it
    start_rbp_free = True
    for i, (ra, (reg, off, slot)) in enumerate(frames):
        nxt = O(frames[i + 1][0]) if i + 1 < len(frames) else end_pc
        if reg == 7:
            cfa = sp + off
        else:
            cfa = sp + 16 * (i + 2) if rbp is None else rbp + off
            if rbp is None:
                rbp = cfa - off
                if rbp_slot is not None:
                    words[rbp_slot] = S(rbp)
                else:
                    start_rbp_free = False
                    start_rbp = S(rbp)
            if cfa <= sp:
                return None
        if cfa % 8 or (cfa - 8) // 8 in words:
            return None
        words[(cfa - 8) // 8] = nxt
        if slot:
            if slot == 1 or (cfa - 8 * slot) // 8 in words or cfa - 8 * slot < 0:
                return None
            rbp, rbp_slot = None, (cfa - 8 * slot) // 8
            words[rbp_slot] = S(0x8000)  # filled if a later frame needs it
        sp = cfa
    n = max(words) + 1
    return [words.get(i, S(0xF000 + 8 * i)) for i in range(n)], base, \
        start_rbp if not start_rbp_free else S(0x8000)


def real_walk_seeds(d, name, path, count, depth):
    """count walks, depth frames each, through the functions of an ELF file
    (every frame-pointer function it has in the first), ending alternately
    at a return address of no function and at a zero word."""
    text, table_vaddr, table, hdr_off, hdr_len = elf_tables(path)
    fdes = parse_eh_frame(table, table_vaddr, hdr_off)
    plain = [p for p in (frame_pc(f, False) for f in fdes) if p]
    framed = [p for p in (frame_pc(f, True) for f in fdes) if p]
    no_fde = next(a for a in range(text[0], text[0] + text[1])
                  if not any(f["begin"] <= a < f["begin"] + f["range"] for f in fdes))
    chains = []
    if framed:
        chains.append([x for pair in zip(framed, plain[::5]) for x in pair][:depth])
    chains += [[plain[(k * 7 + j * 13) % len(plain)] for j in range(depth)] for k in range(4 * count)]
    made = 0
    for chain in chains:
        end_pc = O(no_fde + 1) if made % 2 else N(0)
        laid = lay_out_stack(chain, end_pc)
        if not laid:
            continue
        words, sp, rbp = laid
        flags = [BUILD_ID, BUILD_ID | PERMANENT, 0][made % 3]
        put(d, "%s-walk-%02d" % (name, made),
            unwind_input(text, table_vaddr, table, hdr_off, hdr_len, O(chain[0][0]), sp, rbp,
                         words, flags=flags))
        made += 1
        if made == count:
            return
    sys.exit("make_corpus.py: no walk through %s's tables" % path)


# Tables made here: a CIE ('zR', FDE addresses pc-relative sdata4) and its
# FDEs, laid out as a linker does (.eh_frame_hdr first, then .eh_frame).
def cie_bytes(instrs, aug=b"zR", augdata=b"\x1b", code_align=1, data_align=-8, ra=16, version=1,
              long_length=False):
    body = struct.pack("<I", 0) + bytes([version]) + aug + b"\0" + uleb(code_align) + sleb(data_align)
    body += bytes([ra]) if version == 1 else uleb(ra)
    if aug.startswith(b"z"):
        body += uleb(len(augdata)) + augdata
    body += instrs
    while (len(body) + 4) % 8:
        body += b"\0"
    return (b"\xff\xff\xff\xff" + struct.pack("<Q", len(body)) if long_length
            else struct.pack("<I", len(body))) + body


def synthetic_table(table_vaddr, records, enc=0x1B, augdata_fde=b""):
    """records: ('cie', bytes) or ('fde', begin, range, instrs) using the CIE
    before it.  The table segment, with .eh_frame_hdr's length."""
    nfde = sum(1 for r in records if r[0] == "fde")
    hdr_len = 12 + 8 * nfde
    eh_at = table_vaddr + hdr_len
    out, cie_at, entries = bytearray(), None, []
    for r in records:
        at = eh_at + len(out)
        if r[0] == "cie":
            cie_at = at
            out += r[1]
            continue
        _, begin, rng, instrs = r
        body = struct.pack("<I", at + 4 - cie_at)
        field = at + 8
        if enc == 0x1B:
            body += struct.pack("<ii", begin - field, rng)
        else:  # absolute (0x00), at fuzz_unwind.c's fixed address
            body += struct.pack("<QQ", UNWIND_OBJECT + begin, rng)
        body += uleb(len(augdata_fde)) + augdata_fde + instrs
        while (len(body) + 4) % 8:
            body += b"\0"
        out += struct.pack("<I", len(body)) + body
        entries.append((begin, at))
    out += b"\0\0\0\0"
    entries.sort()
    hdr = bytes([1, 0x1B, 0x03, 0x3B]) + struct.pack("<iI", eh_at - (table_vaddr + 4), len(entries))
    for begin, at in entries:
        hdr += struct.pack("<ii", begin - table_vaddr, at - table_vaddr)
    return hdr + bytes(out), hdr_len


CFA_ALL = (  # every DW_CFA instruction unwind.c knows, once, ending in a plain frame
    b"\x41\x0e\x10\x86\x02"                   # advance_loc 1; def_cfa_offset 16; offset rbp, 2
    b"\x02\x01\x03\x01\x00\x04\x01\x00\x00\x00"  # advance_loc1/2/4
    b"\x05\x06\x02\x06\x06\x07\x05\x08\x06"   # offset_extended, restore_extended, undefined r5, same_value rbp
    b"\x09\x03\x04\x0a\x0e\x20\x0b"           # register, remember_state, def_cfa_offset 32, restore_state
    b"\x0c\x07\x10\x0d\x07\x0e\x10"           # def_cfa, def_cfa_register, def_cfa_offset
    b"\x10\x03\x01\x00\x16\x03\x01\x00"       # expression, val_expression (of r3)
    b"\x11\x06\x02\x12\x07\x7e\x13\x7e"       # offset_extended_sf, def_cfa_sf, def_cfa_offset_sf
    b"\x14\x03\x01\x15\x03\x7f\x2e\x10"       # val_offset(_sf), GNU_args_size
    b"\x2f\x03\x01\xc6\x00"                    # GNU_negative_offset_extended, restore rbp, nop
)


def synthetic_seeds(d):
    T = 0x1000  # code
    B = 0x3000  # tables
    base_cie = cie_bytes(b"\x0c\x07\x08\x90\x01")  # def_cfa rsp+8; ra at cfa-8
    frame_fp = b"\x41\x0e\x10\x86\x02\x43\x0d\x06"  # push rbp; mov rsp, rbp: cfa rbp+16, rbp at cfa-16

    def one(name, records, words, pc, sp=0, rbp=N(0), flags=BUILD_ID, enc=0x1B, text=(T, 0x1000),
            tramp=0, augdata_fde=b""):
        table, hdr_len = synthetic_table(B, records, enc, augdata_fde)
        put(d, name, unwind_input(text, B, table, 0, hdr_len, pc, sp, rbp, words, flags, tramp=tramp))

    # f (frame pointer) called from g (frame pointer) called from h (plain):
    # h's caller has no FDE, so the walk ends there.
    fns = [("cie", base_cie), ("fde", T, 0x40, frame_fp), ("fde", T + 0x40, 0x40, frame_fp),
           ("fde", T + 0x80, 0x40, b"\x41\x0e\x20")]
    # stack: f's frame: rbp at sp+0 -> g's, ra at +8 (into g); g's: rbp, ra (into h); h: ra at cfa-8
    words = [S(0x10), O(T + 0x50), S(0xF00), O(T + 0x90), N(0), N(0), N(0), O(T + 0x800)]
    one("synthetic-frame-pointers", fns, words, O(T + 0x10), rbp=S(0))
    one("synthetic-frame-pointers-unbuilt", fns, words, O(T + 0x10), rbp=S(0), flags=0)
    one("synthetic-frame-pointers-permanent", fns, words, O(T + 0x10), rbp=S(0),
        flags=BUILD_ID | PERMANENT)
    # an unused saved rbp (no frame pointers: rbp saved as any register)
    noframe = [("cie", base_cie), ("fde", T, 0x40, b"\x41\x0e\x10\x86\x02\x41\x0e\x20"),
               ("fde", T + 0x40, 0x40, b"\x41\x0e\x10")]
    one("synthetic-unused-rbp", noframe, [N(7), N(8), S(0x1234), O(T + 0x50), N(9), N(0)],
        O(T + 0x10))
    one("synthetic-remember-state", [("cie", base_cie),
        ("fde", T, 0x40, b"\x41\x0e\x10\x0a\x0e\x20\x41\x0b\x41")],
        [N(1), O(T + 0x800), N(0)], O(T + 0x4))
    one("synthetic-every-instruction", [("cie", base_cie), ("fde", T, 0x100, CFA_ALL)],
        [N(1), O(T + 0x800), N(0)], O(T + 0x80))
    one("synthetic-outermost", [("cie", base_cie), ("fde", T, 0x40, b"\x41\x07\x10")],
        [N(1)], O(T + 0x10))
    one("synthetic-cfa-expression", [("cie", base_cie), ("fde", T, 0x40, b"\x41\x0f\x02\x77\x08")],
        [N(1)], O(T + 0x10))
    one("synthetic-long-length", [("cie", cie_bytes(b"\x0c\x07\x08\x90\x01", long_length=True)),
        ("fde", T, 0x40, b"\x41\x0e\x10")], [N(1), O(T + 0x800)], O(T + 0x10))
    one("synthetic-version3-zPLR", [("cie", cie_bytes(b"\x0c\x07\x08\x90\x01", aug=b"zPLR",
        augdata=b"\x9b\x00\x00\x00\x00\x1b\x1b", version=3)), ("fde", T, 0x40, b"\x41\x0e\x10")],
        [N(1), O(T + 0x800)], O(T + 0x10), augdata_fde=b"\x00\x00\x00\x00")
    one("synthetic-absptr", [("cie", cie_bytes(b"\x0c\x07\x08\x90\x01", augdata=b"\x00")),
        ("fde", T, 0x40, b"\x41\x0e\x10")], [N(1), O(T + 0x800)], O(T + 0x10), enc=0x00)
    one("synthetic-big-frame", [("cie", base_cie), ("fde", T, 0x40, b"\x41\x0e\x80\x80\x04")],
        [N(1)], O(T + 0x10))

    # A signal frame: libc's own CIE and FDE of __restore_rt ('zRS'), moved
    # here, and a function interrupted in its body.
    _, tv, table, hdr_off, _ = elf_tables(LIBC)
    sig = [f for f in parse_eh_frame(table, tv, hdr_off) if "S" in f["cie"]["aug"]][0]
    cie = sig["cie"]
    aug = cie["aug"].encode()
    sig_cie = cie_bytes(cie["instrs"], aug=aug, augdata=b"\x1b", code_align=cie["code_align"],
                        data_align=cie["data_align"], ra=cie["ra"])
    tr = T + 0x101  # __restore_rt's FDE starts a byte before it, as glibc's does
    recs = [("cie", base_cie), ("fde", T, 0x40, b"\x41\x0e\x10"),
            ("cie", sig_cie), ("fde", tr - 1, 0x10, sig["instrs"])]
    uc = [N(0)] * 24  # the ucontext at the trampoline's cfa: rip, rsp, rbp
    uc[21] = O(T + 0x20)  # REG_RIP (gregs from offset 40, 8 bytes each)
    uc[20] = S(0x800)     # REG_RSP
    uc[15] = S(0x900)     # REG_RBP
    words = [N(1), O(tr)] + uc
    words += [N(0)] * (0x800 // 8 - len(words)) + [N(2), O(T + 0x800)]
    one("libc-signal-frame", recs, words, O(T + 0x10), tramp=tr, flags=TRAMP | BUILD_ID)


def unwind():
    d = reset("fuzz_unwind")
    real_walk_seeds(d, "elf_sample", ELF_SAMPLE, 3, 3)
    real_walk_seeds(d, "libsalloc", os.path.realpath(LIBSALLOC), 3, 12)
    synthetic_seeds(d)
    unwind_dict()


def unwind_dict():
    ops = ["nop", "set_loc", "advance_loc1", "advance_loc2", "advance_loc4", "offset_extended",
           "restore_extended", "undefined", "same_value", "register", "remember_state",
           "restore_state", "def_cfa", "def_cfa_register", "def_cfa_offset", "def_cfa_expression",
           "expression", "offset_extended_sf", "def_cfa_sf", "def_cfa_offset_sf", "val_offset",
           "val_offset_sf", "val_expression"]
    lines = ["# libFuzzer dictionary for fuzz_unwind: DWARF call frame instructions,",
             "# augmentations, pointer encodings (written by make_corpus.py)"]
    for i, op in enumerate(ops):
        lines.append('DW_CFA_%s="\\x%02x"' % (op, i))
    lines += ['DW_CFA_GNU_args_size="\\x2e"', 'DW_CFA_GNU_negative_offset_extended="\\x2f"',
              'def_cfa_rsp_8="\\x0c\\x07\\x08"', 'def_cfa_rbp_16="\\x0c\\x06\\x10"',
              'offset_ra_1="\\x90\\x01"', 'offset_rbp_2="\\x86\\x02"', 'advance_push="\\x41\\x0e\\x10"',
              'aug_zR="zR\\x00"', 'aug_zPLR="zPLR\\x00"', 'aug_zRS="zRS\\x00"', 'aug_eh="eh\\x00"',
              'hdr="\\x01\\x1b\\x03\\x3b"', 'pcrel_sdata4="\\x1b"', 'datarel_sdata4="\\x3b"',
              'long_length="\\xff\\xff\\xff\\xff"', 'sigreturn="%s"' % "".join("\\x%02x" % b for b in SIGRETURN),
              'stack_word="\\x00\\x01\\x00\\x00"', 'object_word="\\x00\\x10\\x00\\x40"',
              'small_word="\\x00\\x00\\x00\\x80"', 'top_word="\\xf8\\xff\\xff\\xff"']
    with open(os.path.join(ROOT, "test", "fuzz", "fuzz_unwind.dict"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    for p in (ELF_SAMPLE, LIBSALLOC):
        if not os.path.exists(p):
            sys.exit("make_corpus.py: build %s first (make all build/fuzz/elf_sample)" % p)
    makers = {"fuzz_conf": conf, "fuzz_mallctl": mallctl, "fuzz_dump_readers": dump_readers,
              "fuzz_unwind": unwind}
    for name in sys.argv[1:] or makers:
        makers[name]()
    total = sum(os.path.getsize(f) for f in glob.glob(CORPUS + "/*/*"))
    print("corpus: %d files, %d bytes" % (len(glob.glob(CORPUS + "/*/*")), total))
