# salloc: one non-recursive Makefile, no configure step.
#
#   make run             the demo under the profiler: salloc run, salloc top, a flame graph
#   make                 lib/libsalloc.so (+ soname links), lib/libsalloc.a, build/bin/salloc
#   make test            every test (unit, stress, integration), the fast path's
#                        instruction counts against bench/fastpath.golden, and
#                        a short fuzz run (fuzz-smoke) when clang has libFuzzer
#   make test-tsan       the unit tests and the stress test built with -fsanitize=thread
#   make test-ubsan      the unit tests, and the stress tests preloading a
#                        libsalloc.so, built with -fsanitize=undefined
#   make fuzz            each libFuzzer target for FUZZ_SECONDS (test/fuzz/)
#   make bench           bench/bin/bench_core (google benchmark)
#   make bench-compare   salloc vs glibc, jemalloc, tcmalloc, mimalloc
#   make bench-callgrind instructions per malloc+free pair, per allocator
#   make bench-smoke     every benchmark once under salloc (fails on a crash)
#   make size-classes    regenerate size_classes/size_classes.h
#   make install         PREFIX=/usr/local DESTDIR=
#   make SA_DEBUG=1      library with deep invariant checks on slow paths

VERSION      := 0.1.0
SOMAJOR      := 0
PREFIX       ?= /usr/local
DESTDIR      ?=
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
MANDIR       ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

CC      ?= cc
CXX     ?= c++
SA_DEBUG ?= 0

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
# -fno-builtin-*: the compiler must not turn our own code into calls to
# malloc/calloc (e.g. malloc + memset -> calloc), which would recurse.
NO_BUILTIN_MALLOC := -fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc -fno-builtin-free
# -fno-tree-slp-vectorize: GCC's -O2 copies neighbouring fields of a struct
# just filled in (a sample's description, prof.c) with 16-byte loads, each
# of which waits for the two 8-byte stores it spans to reach the cache
# instead of taking their data from the store buffer: 2.5 ns of a sample
# (64-byte pairs, every one sampled: 58.3 -> 55.7 ns, medians of 12 runs
# with the environment's size varied).  Loops are still vectorised;
# malloc's and free's fast paths compile to the same instructions.
LIBFLAGS := -std=gnu11 -O2 -g $(WARN) -fPIC -pthread -fvisibility=hidden \
            -ftls-model=initial-exec -fno-plt -fno-tree-slp-vectorize $(NO_BUILTIN_MALLOC)
TESTFLAGS := -std=gnu11 -O2 -g -Wall -Wextra -Werror -pthread -Iinclude -Isrc

SRCS := $(wildcard src/*.c)
# Link order is the layout of salloc_text (below).  The kernel maps a
# library's cached file pages up to 64 KiB around each page fault, so the
# code every process runs (malloc, the caches, the page heap, the sampler)
# comes first and the code only mallctl, dumps, errors and guarded sampling
# reach comes last, in pages a program that never uses them does not map.
# And no DT_FINI (-fini= naming no symbol): the dynamic linker would call
# _fini, the empty function crti.o puts at the very end of the text, at
# exit, mapping the cold pages around it.  Constructors and destructors run
# from .init_array and .fini_array, untouched.  test/check_layout.sh holds
# the library to all this.
COLD_SRCS := src/ctl.c src/dump.c src/glibc_compat.c src/guard.c src/log.c src/pprof.c \
             src/procmaps.c src/prof_recent.c src/residency.c src/stats.c src/xallocx.c
LIB_OBJS  := $(patsubst src/%.c,build/lib/%.o,$(filter-out $(COLD_SRCS),$(SRCS)) $(COLD_SRCS))
# Within that order, function by function: the functions src/hot_text.list
# names (what a program runs that never calls mallctl, dumps or errs:
# malloc and free and their slow paths, the caches, the page heap, the
# sampler, fork and thread exit) come first, all of them in the 64 KiB the
# kernel maps around the first fault, from a 64 KiB boundary
# (max-page-size, which ld.so honours when it picks the load address).
# The objects are built with -ffunction-sections; tools/text_sections.awk
# names each function's section salloc_sample, salloc_hot or salloc_text,
# and src/salloc_text.ld lays them out in that order: first, together, what
# a sample runs (src/sample_text.list: a sample is rare, its code cold, and
# in four pages rather than twelve a sampled free cost 7-16% less at 1 and
# 4 KiB, a sampled malloc up to 5%), then the rest of the hot code.  A
# program that allocates, threads, forks and is sampled maps 64 KiB of the
# 124 KiB of code, where the object order alone left it all mapped
# (test_resident_text).  The list grew out of date?  tools/hot_text.sh
# writes it afresh from callgrind runs.
HOT_TEXT  := src/hot_text.list
SAMPLE_TEXT := src/sample_text.list
TEXT_LD   := src/salloc_text.ld
# The library's relative relocations (pointers in its tables, 532 of them)
# packed as DT_RELR (binutils 2.38, glibc 2.36) where the toolchain has it:
# .rela.dyn, which the loader reads in every process, 15.3 -> 2.7 KB, and
# the first segment 6 -> 3 resident pages.
PACK_RELOCS := $(shell $(CC) -shared -Wl,-z,pack-relative-relocs -x c /dev/null -o /dev/null 2>/dev/null \
                   && echo -Wl,-z,pack-relative-relocs)
TEST_OBJS := $(SRCS:src/%.c=build/test/%.o)

SONAME := libsalloc.so.$(SOMAJOR)
SHLIB  := lib/libsalloc.so.$(VERSION)

all: $(SHLIB) lib/libsalloc.so lib/libsalloc.a build/bin/salloc

# Every salloc function goes into one section, salloc_text, whose bounds the
# linker exports (__start_/__stop_salloc_text): the profiler cuts salloc's
# own frames off captured stacks with them (src/stack.h), in the shared
# library and in a static link alike.
TEXT_SECTIONS := .text .text.unlikely .text.hot .text.startup .text.exit
TO_SALLOC_TEXT = objcopy $(foreach t,$(TEXT_SECTIONS),--rename-section $(t)=salloc_text) $@.tmp $@ && rm -f $@.tmp

# build/lib/debug-mode holds the SA_DEBUG the objects were built with; it
# changes (and so rebuilds them) only when SA_DEBUG does.
DEBUG_MODE := build/lib/debug-mode
$(shell mkdir -p build/lib && (echo $(SA_DEBUG) | cmp -s - $(DEBUG_MODE) || echo $(SA_DEBUG) > $(DEBUG_MODE)))

build/lib/%.o: src/%.c $(wildcard src/*.h) size_classes/size_classes.h $(DEBUG_MODE) $(HOT_TEXT) \
               $(SAMPLE_TEXT) tools/text_sections.awk | build/lib
	$(CC) $(LIBFLAGS) -ffunction-sections -DSA_DEBUG_BUILD=$(SA_DEBUG) $(CFLAGS) -c $< -o $@.tmp
	objcopy $$(objdump -h $@.tmp | awk -v hot=$(HOT_TEXT) -v sample=$(SAMPLE_TEXT) -f tools/text_sections.awk) \
	    $@.tmp $@ && rm -f $@.tmp

# The static library's objects: one code section, salloc_text, as the
# profiler's bounds (__start_/__stop_salloc_text) need in a program's own
# link, where no script joins salloc_sample and salloc_hot to it.
build/lib/static/%.o: build/lib/%.o | build/lib/static
	objcopy --rename-section salloc_sample=salloc_text --rename-section salloc_hot=salloc_text $< $@

# Test builds: the same sources with the OS seam writable (SA_TESTING) and
# invariant checks on, archived so unit tests reach internals.
build/test/%.o: src/%.c $(wildcard src/*.h) size_classes/size_classes.h | build/test
	$(CC) $(LIBFLAGS) -DSA_TESTING -DSA_DEBUG_BUILD=1 -c $< -o $@.tmp
	$(TO_SALLOC_TEXT)

$(SHLIB): $(LIB_OBJS) $(TEXT_LD) | lib
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,-z,now -Wl,-z,nodelete -Wl,--no-undefined -Wl,-z,start-stop-visibility=hidden -pthread \
	    -Wl,-fini=sa_no_dt_fini -Wl,-z,max-page-size=0x10000 -Wl,-T,$(TEXT_LD) $(PACK_RELOCS) -Wl,-Map=build/lib/libsalloc.map \
	    $(LDFLAGS) -o $@ $(LIB_OBJS)

lib/libsalloc.so: $(SHLIB)
	ln -sf libsalloc.so.$(VERSION) lib/$(SONAME)
	ln -sf $(SONAME) $@

lib/libsalloc.a: $(LIB_OBJS:build/lib/%=build/lib/static/%) | lib
	rm -f $@ && ar rcs $@ $^

build/libsalloc_test.a: $(TEST_OBJS)
	rm -f $@ && ar rcs $@ $(TEST_OBJS)

build/lib build/lib/static build/test build/tsan build/tsan-test build/ubsan/test build/ubsan/lib build/bin build/bench lib test/bin test/bin/tsan test/bin/ubsan bench/bin:
	mkdir -p $@

# ---- size classes ----
build/bin/gen_size_classes: size_classes/gen_size_classes.c | build/bin
	$(CC) -std=gnu11 -O2 $(WARN) -o $@ $<

size-classes: build/bin/gen_size_classes
	$< > size_classes/size_classes.h.new && mv size_classes/size_classes.h.new size_classes/size_classes.h
	$< --markdown > build/table.md
	awk -v table=build/table.md '/^<!-- table:/ {print; while ((getline l < table) > 0) print l; skip=1; next} \
	    /^<!-- end of table -->/ {skip=0} !skip' size_classes/README.md > build/README.md.new
	mv build/README.md.new size_classes/README.md

# ---- tests ----
UNIT_TESTS  := $(patsubst test/unit/%.c,test/bin/%,$(wildcard test/unit/test_*.c))
STRESS_TESTS := $(patsubst test/stress/%.c,test/bin/%,$(wildcard test/stress/test_*.c))
INTEG_TESTS := $(patsubst test/integration/%.c,test/bin/%,$(wildcard test/integration/test_*.c))

# Unit tests link the test archive: salloc is their malloc, internals included.
# They set salloc's variables around calls to malloc, so the compiler must
# not take malloc for the builtin that reads no program memory.
$(UNIT_TESTS): test/bin/%: test/unit/%.c test/unit/unit.h test/unit/sites.h build/libsalloc_test.a | test/bin
	$(CC) $(TESTFLAGS) $(NO_BUILTIN_MALLOC) -DSA_TESTING -o $@ $< build/libsalloc_test.a -lcmocka -lm

# The stack walker's test loads two builds of one library, with different
# frame sizes, one after the other (test/unit/unwind_lib.c).
test/bin/test_unwind: test/bin/libunwind_a.so test/bin/libunwind_b.so test/bin/libunwind_big_a.so test/bin/libunwind_big_b.so
test/bin/libunwind_a.so test/bin/libunwind_b.so: test/bin/libunwind_%.so: test/unit/unwind_lib.c | test/bin
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Werror -fPIC -shared \
	    -DFRAME_BYTES=$(if $(filter a,$*),4096,65536) -o $@ $<
# ...and two builds (other code, other build IDs) of a library of more
# functions than unwind.c indexes tables from, each searched by one test.
test/bin/libunwind_big_a.so test/bin/libunwind_big_b.so: test/bin/libunwind_big_%.so: test/unit/unwind_big.c | test/bin
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Werror -fPIC -shared \
	    -DUNWIND_BIG_SALT=$(if $(filter a,$*),0x5a5a,0x3c3c) -o $@ $<

# Stress and integration tests use only the public API; they run with salloc
# preloaded, so the same binary can be compared against other allocators.
$(STRESS_TESTS): test/bin/%: test/stress/%.c test/stress/stress_common.h | test/bin
	$(CC) $(TESTFLAGS) -o $@ $< -lcmocka

$(INTEG_TESTS): test/bin/%: test/integration/%.c test/integration/child_run.h | test/bin
	$(CC) $(TESTFLAGS) -o $@ $< -lcmocka -ldl -lm

# test_check and test_guard_faults read their own function names in
# salloc's messages (dladdr).
test/bin/test_check test/bin/test_guard_faults: TESTFLAGS += -rdynamic

# Programs the integration tests run (plain executables, no salloc linked).
test/bin/prof_sites: test/integration/prof_sites.c | test/bin
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Werror -o $@ $< -ldl

test/bin/prof_leaks: test/integration/prof_leaks.c | test/bin
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Werror -pthread -o $@ $< -ldl

test/bin/prof_sites_nopie: test/integration/prof_sites.c | test/bin
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Werror -fno-pie -no-pie -o $@ $< -ldl

test/bin/static_sampling: test/integration/static_sampling.c lib/libsalloc.a | test/bin
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Werror -static -o $@ $< lib/libsalloc.a -pthread

test/bin/secure_env: test/integration/secure_env.c lib/libsalloc.a | test/bin
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Werror -o $@ $< lib/libsalloc.a -pthread

test/bin/small_stack_coroutine: test/integration/small_stack_coroutine.c | test/bin
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Werror -o $@ $<

# Linked with jemalloc, where its header is (libjemalloc-dev): else not
# built, and test_real_programs says it skipped it.
JEMALLOC_HEADER := $(wildcard /usr/include/jemalloc/jemalloc.h)
test/bin/jemalloc_linked: test/integration/jemalloc_linked.c | test/bin
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Werror -o $@ $< -ljemalloc

test/bin/fork_handlers: test/integration/fork_handlers.c | test/bin
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Werror -pthread -o $@ $< -ldl

test/bin/prof_small_stack: test/integration/prof_small_stack.c | test/bin
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Werror -pthread -o $@ $<

test/bin/prof_reentrancy: test/integration/prof_reentrancy.cc | test/bin
	$(CXX) -std=c++17 -O2 -g -Wall -Wextra -Werror -pthread -o $@ $< -ldl

test/bin/cxx_threads: test/integration/cxx_threads.cc | test/bin
	$(CXX) -std=c++17 -O2 -g -Wall -Wextra -Werror -pthread -o $@ $<

test/bin/cxx_new_check: test/integration/cxx_new_check.cc | test/bin
	$(CXX) -std=c++17 -O2 -g -Wall -Wextra -Werror -pthread -o $@ $< -ldl

# ThreadSanitizer: tsan replaces the process's malloc, so salloc is built
# into the test under other names (sa_tsan_malloc, ...) and the stress test's
# calls are renamed to match: tsan then watches salloc's own code and locks.
# Its deadlock detector is off: it tracks at most 64 held locks, and fork's
# prepare handler holds every class lock (lock order is checked by salloc's
# own debug lock ranks instead, lock.h).
TSAN_API    := malloc free calloc realloc reallocarray posix_memalign aligned_alloc memalign \
               valloc pvalloc malloc_usable_size free_sized free_aligned_sized malloc_trim \
               mallinfo mallinfo2 malloc_stats malloc_info mallopt
TSAN_RENAME := $(foreach f,$(TSAN_API),-D$(f)=sa_tsan_$(f))
TSAN_OBJS   := $(SRCS:src/%.c=build/tsan/%.o)

build/tsan/%.o: src/%.c $(wildcard src/*.h) size_classes/size_classes.h | build/tsan
	$(CC) $(LIBFLAGS) -fsanitize=thread -DSA_DEBUG_BUILD=1 $(TSAN_RENAME) -c $< -o $@.tmp
	$(TO_SALLOC_TEXT)

test/bin/test_tsan_stress: test/stress/test_stress.c test/stress/stress_common.h $(TSAN_OBJS) | test/bin
	$(CC) $(TESTFLAGS) -fsanitize=thread $(TSAN_RENAME) -o $@ $< $(TSAN_OBJS) -lcmocka

# Real dumps made by real tools (jemalloc, pprof), beside the repository;
# a clone elsewhere names them: make test FIXTURES_DIR=/path/to/fixtures.
FIXTURES_DIR ?= $(CURDIR)/../shared/fixtures
TEST_ENV := SALLOC_LIB=$(CURDIR)/lib/libsalloc.so GEN_SIZE_CLASSES=$(CURDIR)/build/bin/gen_size_classes \
            SIZE_CLASSES_H=$(CURDIR)/size_classes/size_classes.h \
            SIZE_CLASSES_README=$(CURDIR)/size_classes/README.md TEST_BIN_DIR=$(CURDIR)/test/bin \
            FIXTURES_DIR=$(FIXTURES_DIR) \
            SALLOC_CMD=$(CURDIR)/build/bin/salloc SALLOC_DEMO=$(CURDIR)/build/bin/salloc-demo CXX_THREADS_BIN=$(CURDIR)/test/bin/cxx_threads

# Heavy sampling, and every stack the walker captures compared with
# backtrace() (a disagreement fails test_real_programs).
HEAVY_SAMPLING := lg_prof_sample:8,prof_unwind:check

# Half the samples guarded (guard.h), a sample every 4 KiB: the quarantine
# and the guard's mappings under every thread's traffic; the last 64
# samples kept whole (prof_recent.h), records dropped and completed all the
# time, across forks.
GUARDED_SAMPLING := lg_prof_sample:12,lg_prof_guard_every:1,prof_recent_alloc_max:64
# The background thread purging every 10 ms while the stress threads and
# forks allocate: decay concurrent with everything else.  Classes above
# 4 KiB uncached (tcache_max), so that their objects go one at a time
# through the central lists, whose spans empty and decay all the time.
BACKGROUND_DECAY := background_thread:true,dirty_decay_ms:1,lg_prof_sample:14,tcache_max:4096
# Every thread starting uncached (tcache.h): each malloc and free through the
# central lists, sampled every 4 KiB, in the stress test and real programs;
# test_stress's workers also turn their caches on and off in every run.
UNCACHED := tcache:false,lg_prof_sample:12
# Every malloc and free on a slow path, checked (opt.check) and filled
# (opt.junk): a freed block 0x5a, a new one 0xa5, with the check's tag kept.
CHECKED_JUNK := check:true,junk:true,lg_prof_sample:14

TEST_PROGRAMS := test/bin/cxx_threads test/bin/cxx_new_check test/bin/prof_sites test/bin/prof_sites_nopie test/bin/prof_reentrancy \
                 test/bin/prof_leaks \
                 test/bin/prof_small_stack test/bin/fork_handlers test/bin/secure_env \
                 test/bin/static_sampling test/bin/small_stack_coroutine \
                 $(if $(JEMALLOC_HEADER),test/bin/jemalloc_linked)

test: all tools build/bin/gen_size_classes $(UNIT_TESTS) $(STRESS_TESTS) $(INTEG_TESTS) $(TEST_PROGRAMS) \
      bench/bin/callgrind_pair bench/bin/sample_cost
	@sh test/check_exports.sh lib/libsalloc.so
	@SA_DEBUG=$(SA_DEBUG) sh test/check_layout.sh lib/libsalloc.so build/lib/libsalloc.map $(COLD_SRCS:src/%.c=build/lib/%.o)
	@fail=0; \
	for t in $(UNIT_TESTS); do \
	    echo "== $$t"; $(TEST_ENV) $$t || fail=1; \
	done; \
	for t in $(STRESS_TESTS) test/bin/test_real_programs; do \
	    echo "== $$t (LD_PRELOAD=lib/libsalloc.so, heavy sampling, walker checked: SALLOC_CONF=$(HEAVY_SAMPLING))"; \
	    $(TEST_ENV) STRESS_SECONDS=3 SALLOC_CONF=$(HEAVY_SAMPLING) \
	        LD_PRELOAD=$(CURDIR)/lib/libsalloc.so $$t || fail=1; \
	done; \
	echo "== test/bin/test_stress (LD_PRELOAD=lib/libsalloc.so, guarded sampling: SALLOC_CONF=$(GUARDED_SAMPLING))"; \
	$(TEST_ENV) STRESS_SECONDS=1 STRESS_FORKS=5 SALLOC_CONF=$(GUARDED_SAMPLING) \
	    LD_PRELOAD=$(CURDIR)/lib/libsalloc.so test/bin/test_stress || fail=1; \
	for t in test/bin/test_stress test/bin/test_real_programs; do \
	    echo "== $$t (LD_PRELOAD=lib/libsalloc.so, background decay: SALLOC_CONF=$(BACKGROUND_DECAY))"; \
	    $(TEST_ENV) STRESS_SECONDS=2 STRESS_FORKS=5 SALLOC_CONF=$(BACKGROUND_DECAY) \
	        LD_PRELOAD=$(CURDIR)/lib/libsalloc.so $$t || fail=1; \
	done; \
	for t in test/bin/test_stress test/bin/test_real_programs; do \
	    echo "== $$t (LD_PRELOAD=lib/libsalloc.so, uncached threads: SALLOC_CONF=$(UNCACHED))"; \
	    $(TEST_ENV) STRESS_SECONDS=2 STRESS_FORKS=5 SALLOC_CONF=$(UNCACHED) \
	        LD_PRELOAD=$(CURDIR)/lib/libsalloc.so $$t || fail=1; \
	done; \
	echo "== test/bin/test_stress (LD_PRELOAD=lib/libsalloc.so, checked and junk-filled: SALLOC_CONF=$(CHECKED_JUNK))"; \
	$(TEST_ENV) STRESS_SECONDS=1 STRESS_FORKS=5 SALLOC_CONF=$(CHECKED_JUNK) \
	    LD_PRELOAD=$(CURDIR)/lib/libsalloc.so test/bin/test_stress || fail=1; \
	for t in $(STRESS_TESTS) $(INTEG_TESTS); do \
	    echo "== $$t (LD_PRELOAD=lib/libsalloc.so)"; \
	    $(TEST_ENV) LD_PRELOAD=$(CURDIR)/lib/libsalloc.so $$t || fail=1; \
	done; \
	if [ "$(SA_DEBUG)" != 0 ]; then echo "SKIP: fast-path instruction counts: SA_DEBUG=$(SA_DEBUG) build"; \
	elif command -v valgrind >/dev/null; then \
	    echo "== fast-path instruction counts against bench/fastpath.golden"; \
	    bash bench/callgrind.sh --check || fail=1; \
	else echo "SKIP: fast-path instruction counts: valgrind is not installed"; fi; \
	echo "== bench/bin/sample_cost --check (LD_PRELOAD=lib/libsalloc.so, SALLOC_CONF=lg_prof_sample:12)"; \
	$(TEST_ENV) SALLOC_CONF=lg_prof_sample:12 LD_PRELOAD=$(CURDIR)/lib/libsalloc.so \
	    bench/bin/sample_cost --check 1024 200000 || fail=1; \
	echo "== bench/real_time.py -r 1 sort (salloc, salloc-noprof): the script still runs"; \
	ALLOCATORS="salloc salloc-noprof" python3 bench/real_time.py -r 1 sort >/dev/null || fail=1; \
	exit $$fail
	@if $(FUZZ_PROBE); then $(MAKE) --no-print-directory fuzz-smoke; \
	else echo "SKIP: fuzzing: clang/libFuzzer not installed"; fi

# The unit tests too, against a tsan test archive (SA_TESTING, invariant
# checks on, the API renamed; build/tsan-test), each compiled with the same
# renames, so that its own malloc and free calls (not cmocka's or libc's)
# are salloc's; test/unit/tsan_init.c sets salloc up before main, as the
# process's first allocations would.  Left out, because under tsan they
# cannot pass:
#   test_dump:   frees getline()'s buffer, which libc got from tsan's malloc,
#                with free (salloc's here); its one thread changes
#                mappings, not the heap.
#   test_trim:   measures the process's resident set, which tsan's shadow
#                memory and its own heap swamp.
#   test_unwind: compares the walker with backtrace(), which tsan intercepts:
#                its stacks start with the interceptor's frame.
# The stress test test_storms stays out too: it waits for the process to be
# down to one thread (tsan keeps one of its own), bounds the resident set,
# and forks next to 8 busy threads, which tsan does not support.
TSAN_UNIT_SKIP  := test_dump test_trim test_unwind
TSAN_UNIT_TESTS := $(patsubst test/bin/%,test/bin/tsan/%,$(filter-out $(TSAN_UNIT_SKIP:%=test/bin/%),$(UNIT_TESTS)))
TSAN_TEST_OBJS  := $(SRCS:src/%.c=build/tsan-test/%.o)

build/tsan-test/%.o: src/%.c $(wildcard src/*.h) size_classes/size_classes.h | build/tsan-test
	$(CC) $(LIBFLAGS) -fsanitize=thread -DSA_TESTING -DSA_DEBUG_BUILD=1 $(TSAN_RENAME) -c $< -o $@.tmp
	$(TO_SALLOC_TEXT)

build/tsan-test/libsalloc_test.a: $(TSAN_TEST_OBJS)
	rm -f $@ && ar rcs $@ $(TSAN_TEST_OBJS)

$(TSAN_UNIT_TESTS): test/bin/tsan/%: test/unit/%.c test/unit/unit.h test/unit/sites.h test/unit/tsan_init.c \
                    build/tsan-test/libsalloc_test.a | test/bin/tsan
	$(CC) $(TESTFLAGS) $(NO_BUILTIN_MALLOC) -fsanitize=thread -DSA_TESTING $(TSAN_RENAME) -o $@ $< \
	    test/unit/tsan_init.c build/tsan-test/libsalloc_test.a -lcmocka -lm

TSAN_ENV := TSAN_OPTIONS="halt_on_error=1 detect_deadlocks=0"

test-tsan: test/bin/test_tsan_stress $(TSAN_UNIT_TESTS) build/bin/gen_size_classes
	@fail=0; \
	for t in $(TSAN_UNIT_TESTS); do \
	    echo "== $$t"; $(TEST_ENV) $(TSAN_ENV) $$t || fail=1; \
	done; \
	echo "== test/bin/test_tsan_stress (SALLOC_CONF=lg_prof_sample:10)"; \
	STRESS_SECONDS=3 SALLOC_CONF=lg_prof_sample:10 $(TSAN_ENV) test/bin/test_tsan_stress || fail=1; \
	echo "== test/bin/test_tsan_stress (SALLOC_CONF=$(BACKGROUND_DECAY))"; \
	STRESS_SECONDS=2 STRESS_FORKS=5 SALLOC_CONF=$(BACKGROUND_DECAY) $(TSAN_ENV) test/bin/test_tsan_stress || fail=1; \
	echo "== test/bin/test_tsan_stress (SALLOC_CONF=$(UNCACHED))"; \
	STRESS_SECONDS=2 STRESS_FORKS=5 SALLOC_CONF=$(UNCACHED) $(TSAN_ENV) test/bin/test_tsan_stress || fail=1; \
	exit $$fail

# ---- UndefinedBehaviorSanitizer ----
# salloc's sources built with gcc's -fsanitize=undefined, every check fatal,
# and invariant checks on: a test archive like build/libsalloc_test.a
# (build/ubsan/test) that every unit test links, and a libsalloc.so
# (build/ubsan/lib) the stress tests preload.  UBSan does not replace
# malloc, so nothing is renamed: salloc is the malloc of both.  The .so
# needs libubsan.so (gcc links it dynamically into shared objects): the
# loader brings it, and its libstdc++, in after salloc, and their
# allocations (libstdc++'s exception pool, before main, among them) are
# salloc's, as any preloaded program's are.
# float-cast-overflow: undefined behaviour too, but not in gcc's
# -fsanitize=undefined.  Every unit and stress test runs: none needs
# leaving out.
UBSAN            := -fsanitize=undefined,float-cast-overflow -fno-sanitize-recover=all
UBSAN_TEST_OBJS  := $(SRCS:src/%.c=build/ubsan/test/%.o)
UBSAN_LIB_OBJS   := $(SRCS:src/%.c=build/ubsan/lib/%.o)
UBSAN_SHLIB      := build/ubsan/lib/libsalloc.so
UBSAN_UNIT_TESTS := $(patsubst test/bin/%,test/bin/ubsan/%,$(UNIT_TESTS))
UBSAN_STRESS     := $(patsubst test/bin/%,test/bin/ubsan/%,$(STRESS_TESTS))
UBSAN_ENV        := UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

build/ubsan/test/%.o: src/%.c $(wildcard src/*.h) size_classes/size_classes.h | build/ubsan/test
	$(CC) $(LIBFLAGS) $(UBSAN) -DSA_TESTING -DSA_DEBUG_BUILD=1 -c $< -o $@.tmp
	$(TO_SALLOC_TEXT)

build/ubsan/libsalloc_test.a: $(UBSAN_TEST_OBJS)
	rm -f $@ && ar rcs $@ $(UBSAN_TEST_OBJS)

build/ubsan/lib/%.o: src/%.c $(wildcard src/*.h) size_classes/size_classes.h | build/ubsan/lib
	$(CC) $(LIBFLAGS) $(UBSAN) -DSA_DEBUG_BUILD=1 -c $< -o $@.tmp
	$(TO_SALLOC_TEXT)

$(UBSAN_SHLIB): $(UBSAN_LIB_OBJS)
	$(CC) -shared $(UBSAN) -Wl,-soname,$(SONAME) -Wl,-z,now -Wl,-z,nodelete -Wl,--no-undefined -Wl,-z,start-stop-visibility=hidden \
	    -pthread $(LDFLAGS) -o $@ $(UBSAN_LIB_OBJS)

$(UBSAN_UNIT_TESTS): test/bin/ubsan/%: test/unit/%.c test/unit/unit.h test/unit/sites.h build/ubsan/libsalloc_test.a | test/bin/ubsan
	$(CC) $(TESTFLAGS) $(NO_BUILTIN_MALLOC) $(UBSAN) -DSA_TESTING -o $@ $< build/ubsan/libsalloc_test.a -lcmocka -lm

# The stress tests themselves are the ordinary build (public API only).
$(UBSAN_STRESS): test/bin/ubsan/%: test/stress/%.c test/stress/stress_common.h | test/bin/ubsan
	$(CC) $(TESTFLAGS) -o $@ $< -lcmocka

# test_unwind loads the same libraries as the plain build (TEST_BIN_DIR).
test/bin/ubsan/test_unwind: test/bin/libunwind_a.so test/bin/libunwind_b.so test/bin/libunwind_big_a.so test/bin/libunwind_big_b.so

test-ubsan: $(UBSAN_UNIT_TESTS) $(UBSAN_STRESS) $(UBSAN_SHLIB) build/bin/gen_size_classes
	@fail=0; \
	for t in $(UBSAN_UNIT_TESTS); do \
	    echo "== $$t"; $(TEST_ENV) $(UBSAN_ENV) $$t || fail=1; \
	done; \
	for t in $(UBSAN_STRESS); do \
	    echo "== $$t (LD_PRELOAD=$(UBSAN_SHLIB), SALLOC_CONF=lg_prof_sample:10)"; \
	    $(TEST_ENV) STRESS_SECONDS=2 SALLOC_CONF=lg_prof_sample:10 $(UBSAN_ENV) \
	        LD_PRELOAD=$(CURDIR)/$(UBSAN_SHLIB) $$t || fail=1; \
	done; \
	exit $$fail

# ---- the salloc command and its demo (tools/) ----
# An ordinary program (stdio, malloc, addr2line), never preloaded; it finds
# the library beside itself (../lib or ../../lib), else in $(LIBDIR).
TOOL_SRCS := $(filter-out tools/demo.c,$(wildcard tools/*.c))

build/bin/salloc: $(TOOL_SRCS) tools/cli.h | build/bin
	$(CC) -std=gnu11 -O2 -g $(WARN) -DSALLOC_LIBDIR='"$(LIBDIR)"' $(CFLAGS) -o $@ $(TOOL_SRCS) $(LDFLAGS) -lm

build/bin/salloc-demo: tools/demo.c | build/bin
	$(CC) -std=gnu11 -O2 -g $(WARN) -pthread $(CFLAGS) -o $@ $< $(LDFLAGS)

tools: build/bin/salloc build/bin/salloc-demo

# The demo under the profiler: the dump, its top sites, a flame graph.
run: all tools
	rm -f build/demo.*.heap
	build/bin/salloc run -r 64k -o build/demo -- build/bin/salloc-demo
	build/bin/salloc top build/demo.*.f.heap
	build/bin/salloc flame build/demo.*.f.heap -o build/demo.svg
	@echo "flame graph: build/demo.svg"

# ---- benchmarks ----
# C bodies (bench/bodies_*.c); bench/bench_core.cc registers them with google
# benchmark.  No allocator is linked: the scripts swap allocators with
# LD_PRELOAD, so every allocator runs the same code.  -fno-builtin-*: the
# compiler must not delete or merge the allocation calls we measure.
BENCH_C      := $(filter-out bench/callgrind_pair.c bench/sample_cost.c,$(wildcard bench/*.c))
BENCH_OBJS   := $(BENCH_C:bench/%.c=build/bench/%.o)
BENCH_CFLAGS := -std=c11 -O2 -g -Wall -Wextra -Werror -pthread \
                -fno-builtin-malloc -fno-builtin-free -fno-builtin-calloc -fno-builtin-realloc
BENCH_CXXFLAGS := -std=c++17 -O2 -g -Wall -Wextra -Werror -pthread

build/bench/%.o: bench/%.c bench/bench_bodies.h bench/bench_util.h | build/bench
	$(CC) $(BENCH_CFLAGS) -c $< -o $@

bench/bin/bench_core: bench/bench_core.cc bench/bench_bodies.h $(BENCH_OBJS) | bench/bin
	$(CXX) $(BENCH_CXXFLAGS) -o $@ $< $(BENCH_OBJS) -lbenchmark -lpthread

bench/bin/cxx_workload: bench/cxx_workload.cc | bench/bin
	$(CXX) $(BENCH_CXXFLAGS) -o $@ $<

bench/bin/callgrind_pair: bench/callgrind_pair.c | bench/bin
	$(CC) $(BENCH_CFLAGS) -o $@ $<

bench/bin/sample_cost: bench/sample_cost.c bench/bench_util.h | bench/bin
	$(CC) $(BENCH_CFLAGS) -o $@ $< -lm -ldl

bench: bench/bin/bench_core bench/bin/cxx_workload bench/bin/callgrind_pair bench/bin/sample_cost

bench-compare: all bench/bin/bench_core bench/bin/cxx_workload
	bash bench/compare.sh

# Every benchmark once under salloc, tiny min time: fails on any crash,
# error or missing benchmark (a quick check, not a measurement).
bench-smoke: all bench/bin/bench_core bench/bin/cxx_workload
	bash bench/smoke.sh

bench-callgrind: all bench/bin/callgrind_pair
	bash bench/callgrind.sh

.PHONY: all test test-tsan test-ubsan size-classes install clean bench bench-compare bench-smoke bench-callgrind tools run

# ---- install ----
install: all
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(PKGCONFIGDIR)
	install -m 755 $(SHLIB) $(DESTDIR)$(LIBDIR)/
	ln -sf libsalloc.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libsalloc.so
	install -m 644 lib/libsalloc.a $(DESTDIR)$(LIBDIR)/
	install -m 644 include/salloc.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 man/salloc.3 $(DESTDIR)$(MANDIR)/man3/
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(MANDIR)/man1
	install -m 755 build/bin/salloc $(DESTDIR)$(PREFIX)/bin/
	install -m 644 man/salloc.1 $(DESTDIR)$(MANDIR)/man1/
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' '' \
	    'Name: salloc' 'Description: general-purpose memory allocator' \
	    'Version: $(VERSION)' 'Libs: -L$${libdir} -lsalloc' 'Libs.private: -pthread' \
	    'Cflags: -I$${includedir}' > $(DESTDIR)$(PKGCONFIGDIR)/salloc.pc

clean:
	rm -rf build lib test/bin bench/bin

# ---- fuzzing ----
# libFuzzer targets (test/fuzz/, see its README.md) built by clang with
# AddressSanitizer and UBSan.  The sanitizers bring their own malloc, so, as
# in the ThreadSanitizer build, salloc is compiled again into build/fuzz/lib
# with its allocation API renamed (sa_fuzz_malloc, ...): the process
# allocates with ASan's malloc and the targets call salloc's internals
# (conf_apply, mallctl, ...).  cxx_new.c stays out (ASan has its own
# operator new).  The salloc command's readers (tools/) are compiled with
# the same sanitizers into build/fuzz/tools; fuzz_unwind compiles
# src/unwind.c into itself.
#   make fuzz         each target for FUZZ_SECONDS, from its corpus
#   make fuzz-smoke   each target for FUZZ_SMOKE_SECONDS from the committed
#                     seeds alone, then every file of
#                     test/fuzz/regressions/<target>/ once; fails on any
#                     crash (make test runs it when clang has libFuzzer)
# make fuzz keeps the inputs it finds in build/fuzz/corpus/<target>; crashes
# go to build/fuzz/crashes/<target>/.
FUZZ_CC            ?= clang
FUZZ_SECONDS       ?= 120
FUZZ_SMOKE_SECONDS ?= 5
FUZZ_TARGETS   := fuzz_conf fuzz_mallctl fuzz_dump_readers fuzz_unwind
FUZZ_BINS      := $(FUZZ_TARGETS:%=build/fuzz/%)
FUZZ_SAN       := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_RENAME    := $(foreach f,$(TSAN_API),-D$(f)=sa_fuzz_$(f))
FUZZ_WARN      := $(filter-out -Werror,$(WARN))
FUZZ_LIB_OBJS  := $(patsubst src/%.c,build/fuzz/lib/%.o,$(filter-out src/cxx_new.c,$(SRCS)))
FUZZ_TOOL_OBJS := $(patsubst tools/%.c,build/fuzz/tools/%.o,$(filter-out tools/symbolize.c,$(TOOL_SRCS)))
FUZZ_TFLAGS    := -std=gnu11 -O1 -g $(FUZZ_WARN) $(FUZZ_SAN) -fsanitize=fuzzer -pthread \
                  -Iinclude -Isrc -Itools -Itest/fuzz
# The targets' temporary directories (left behind by a crash) go under build/.
FUZZ_ENV       := TMPDIR=$(CURDIR)/build/fuzz/tmp ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
                  UBSAN_OPTIONS=print_stacktrace=1
# Succeeds when $(FUZZ_CC) builds a libFuzzer program with both sanitizers.
FUZZ_PROBE      = mkdir -p build/fuzz && \
                  printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; return (int)n * 0; }\n' \
                      > build/fuzz/probe.c && \
                  $(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o build/fuzz/probe build/fuzz/probe.c >/dev/null 2>&1

build/fuzz/lib build/fuzz/tools:
	mkdir -p $@

# TO_SALLOC_TEXT for these objects: coverage instrumentation gives every
# function a section of its own (.text.<name>), so every .text* section is
# renamed, not only the usual five: tools/text_sections.awk, as for the
# library's objects, with no function listed hot.
FUZZ_TO_SALLOC_TEXT = objcopy $$(objdump -h $@.tmp | awk -v hot=/dev/null -f tools/text_sections.awk) \
                          $@.tmp $@ && rm -f $@.tmp

# test/fuzz/ignorelist.txt: checks left out for known findings in src/
# (FUZZ_IGNORELIST= builds with every check, to reproduce them).
FUZZ_IGNORELIST ?= test/fuzz/ignorelist.txt
build/fuzz/lib/%.o: src/%.c $(wildcard src/*.h) size_classes/size_classes.h $(FUZZ_IGNORELIST) tools/text_sections.awk | build/fuzz/lib
	$(FUZZ_CC) $(filter-out -Werror,$(LIBFLAGS)) $(FUZZ_SAN) -fsanitize=fuzzer-no-link \
	    $(if $(FUZZ_IGNORELIST),-fsanitize-ignorelist=$(FUZZ_IGNORELIST)) \
	    -DSA_DEBUG_BUILD=1 $(FUZZ_RENAME) -c $< -o $@.tmp
	$(FUZZ_TO_SALLOC_TEXT)

# salloc.c's main() is renamed (and so has no prototype): libFuzzer has the
# process's.
build/fuzz/tools/%.o: tools/%.c tools/cli.h | build/fuzz/tools
	$(FUZZ_CC) -std=gnu11 -O1 -g $(FUZZ_WARN) -Wno-missing-prototypes $(FUZZ_SAN) -fsanitize=fuzzer-no-link \
	    -DSALLOC_LIBDIR='"$(LIBDIR)"' -Dmain=salloc_main -c $< -o $@

build/fuzz/fuzz_conf build/fuzz/fuzz_mallctl: build/fuzz/%: test/fuzz/%.c test/fuzz/fuzz_util.h $(FUZZ_LIB_OBJS)
	$(FUZZ_CC) $(FUZZ_TFLAGS) -o $@ $< $(FUZZ_LIB_OBJS) -lm -ldl

# Every string leaf of src/ctl.c must be known to the target (see the script).
build/fuzz/fuzz_mallctl: build/fuzz/string_leaves.ok
build/fuzz/string_leaves.ok: src/ctl.c test/fuzz/fuzz_mallctl.c test/fuzz/check_string_leaves.sh | build/fuzz/lib
	sh test/fuzz/check_string_leaves.sh src/ctl.c test/fuzz/fuzz_mallctl.c && touch $@

# symbolize.c is compiled into the target itself (#include, with stand-ins
# for addr2line and stat: see the file).
build/fuzz/fuzz_dump_readers: test/fuzz/fuzz_dump_readers.c test/fuzz/fuzz_util.h tools/symbolize.c \
                              tools/cli.h $(FUZZ_TOOL_OBJS) build/fuzz/elf_sample
	$(FUZZ_CC) $(FUZZ_TFLAGS) -o $@ $< $(FUZZ_TOOL_OBJS) -lm

# unwind.c and unwind_file.c are compiled into the target itself
# (#include), its object lookups and file reads redirected to the object
# the input makes up: see the file.  As src/ code it gets the ignore list
# too.
build/fuzz/fuzz_unwind: test/fuzz/fuzz_unwind.c test/fuzz/fuzz_util.h src/unwind.c src/unwind_file.c \
                        $(wildcard src/*.h) \
                        $(FUZZ_IGNORELIST) | build/fuzz/lib
	$(FUZZ_CC) $(FUZZ_TFLAGS) $(if $(FUZZ_IGNORELIST),-fsanitize-ignorelist=$(FUZZ_IGNORELIST)) \
	    -o $@ $< -ldl

build/fuzz/elf_sample: test/fuzz/elf_sample.c | build/fuzz/lib
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -o $@ $< -ldl

fuzz-build: $(FUZZ_BINS)

fuzz: $(FUZZ_BINS)
	@fail=0; \
	for t in $(FUZZ_TARGETS); do \
	    mkdir -p build/fuzz/corpus/$$t build/fuzz/crashes/$$t build/fuzz/tmp; \
	    echo "== $$t for $(FUZZ_SECONDS) s (new inputs: build/fuzz/corpus/$$t, crashes: build/fuzz/crashes/$$t)"; \
	    $(FUZZ_ENV) build/fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 \
	        -artifact_prefix=build/fuzz/crashes/$$t/ -dict=test/fuzz/$$t.dict \
	        build/fuzz/corpus/$$t test/fuzz/corpus/$$t || fail=1; \
	done; \
	exit $$fail

fuzz-smoke: $(FUZZ_BINS)
	@fail=0; \
	for t in $(FUZZ_TARGETS); do \
	    rm -rf build/fuzz/smoke/$$t; \
	    mkdir -p build/fuzz/smoke/$$t build/fuzz/crashes/$$t build/fuzz/tmp; \
	    echo "== $$t for $(FUZZ_SMOKE_SECONDS) s"; \
	    $(FUZZ_ENV) build/fuzz/$$t -max_total_time=$(FUZZ_SMOKE_SECONDS) -timeout=10 \
	        -artifact_prefix=build/fuzz/crashes/$$t/ -dict=test/fuzz/$$t.dict \
	        build/fuzz/smoke/$$t test/fuzz/corpus/$$t 2>build/fuzz/$$t.log || \
	        { tail -n 60 build/fuzz/$$t.log; fail=1; }; \
	    tail -n 1 build/fuzz/$$t.log; \
	    regs=$$(find test/fuzz/regressions/$$t -type f ! -name '.*' 2>/dev/null | sort); \
	    if [ -n "$$regs" ]; then \
	        echo "== $$t: $$(echo "$$regs" | wc -l) regression inputs"; \
	        $(FUZZ_ENV) build/fuzz/$$t -timeout=30 $$regs 2>build/fuzz/$$t.regressions.log || \
	            { tail -n 60 build/fuzz/$$t.regressions.log; fail=1; }; \
	    fi; \
	done; \
	exit $$fail

.PHONY: fuzz fuzz-smoke fuzz-build
