// bench_core.cc: the one C++ file of the benchmarks.  It registers the C
// bodies (bench_bodies.h) with google benchmark as family/params
// (pair/16, sizemix/live=10000, larson/threads=4, ...).
//
// Every benchmark reports WALL-CLOCK time per operation, so threads blocked
// or descheduled count, and rows of one family share a unit:
//  - one-thread bodies do n operations per call: KeepRunningBatch(n) with
//    UseRealTime, so google benchmark's time per iteration is one operation;
//  - bodies that spawn their own threads (and phase) time themselves and
//    return seconds: KeepRunningBatch(operations of one call) with
//    UseManualTime and SetIterationTime(seconds), again one operation per
//    iteration.  What "one operation" is, per family, is in bench/README.md.
// google benchmark appends /real_time or /manual_time to the names it
// prints; compare.sh strips them.
//
// This binary links no allocator: compare.sh swaps them with LD_PRELOAD.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "bench_bodies.h"

namespace {

using benchmark::IterationCount;
using benchmark::State;

// Without --benchmark_min_time on the command line, each benchmark runs for
// at least this long (google benchmark's own default is 0.5 s): a full run
// stays around a minute.  The heavy bodies take longer than this per call
// and so run once.
constexpr const char *kDefaultMinTime = "--benchmark_min_time=0.1";

// Operations per call into C: enough to amortise the call, small enough that
// KeepRunningBatch's overshoot does not matter.
constexpr std::size_t kPairBatch = 64;
constexpr std::size_t kBatchCount = 1000;
constexpr std::size_t kSizemixBatch = 256;
constexpr std::size_t kReallocBatch = 256;

// Work per call of the threaded bodies: a few tens of milliseconds each.
constexpr std::size_t kProdconsObjects = 50000;
constexpr std::size_t kLarsonOpsPerThread = 500 * 128;   // a multiple of its period
constexpr std::size_t kFalseSharingRounds = 2000;
constexpr unsigned kChurnGenerations = 4;
constexpr std::size_t kChurnOpsPerGeneration = 320000;   // shared out among the threads
constexpr std::size_t kScaleOpsPerThread = 1000000;   // ~20 ms: start stagger is noise
constexpr std::size_t kPhaseObjectsPerBuild = 800000;    // ~256 MiB per build

// ---- one thread: time per operation via KeepRunningBatch ----

void Pair(State &state, std::size_t size)
{
    while (state.KeepRunningBatch(kPairBatch))
        bench_pairs(size, kPairBatch);
}

void BatchLifo(State &state, std::size_t count, std::size_t size)
{
    while (state.KeepRunningBatch(static_cast<IterationCount>(count)))
        bench_batch_lifo(count, size);
}

void BatchFifo(State &state, std::size_t count, std::size_t size)
{
    while (state.KeepRunningBatch(static_cast<IterationCount>(count)))
        bench_batch_fifo(count, size);
}

// Filling the working set is set-up, outside the timed loop.
void Sizemix(State &state, std::size_t slots)
{
    sizemix *mix = bench_sizemix_create(slots);
    while (state.KeepRunningBatch(kSizemixBatch))
        bench_sizemix_run(mix, kSizemixBatch);
    bench_sizemix_destroy(mix);
}

void ReallocGrow(State &state, realloc_growth growth)
{
    realloc_grow *grow = bench_realloc_grow_create(growth);
    while (state.KeepRunningBatch(kReallocBatch))
        bench_realloc_grow_run(grow, kReallocBatch);
    bench_realloc_grow_destroy(grow);
}

void Calloc(State &state, std::size_t size)
{
    while (state.KeepRunningBatch(kPairBatch))
        bench_calloc_pairs(size, kPairBatch);
}

void Aligned(State &state, std::size_t align, std::size_t size)
{
    while (state.KeepRunningBatch(kPairBatch))
        bench_aligned_pairs(align, size, kPairBatch);
}

// ---- self-timed bodies: each call is `ops` operations taking the seconds
// the body returns ----

template <typename Body>
void SelfTimed(State &state, std::size_t ops, Body body)
{
    while (state.KeepRunningBatch(static_cast<IterationCount>(ops)))
        state.SetIterationTime(body());
}

void Prodcons(State &state, std::size_t size)
{
    SelfTimed(state, kProdconsObjects, [&] { return bench_prodcons(size, kProdconsObjects); });
}

void Larson(State &state, unsigned threads)
{
    SelfTimed(state, threads * kLarsonOpsPerThread,
              [&] { return bench_larson(threads, kLarsonOpsPerThread); });
}

// shared_lines: the most seen in any call (allocator state differs between
// calls; the worst case is the one that hurts).
void FalseSharing(State &state, false_sharing_result (*body)(std::size_t))
{
    std::size_t shared = 0;
    SelfTimed(state, kFalseSharingRounds, [&] {
        false_sharing_result r = body(kFalseSharingRounds);
        shared = std::max(shared, r.shared_lines);
        return r.seconds;
    });
    state.counters["shared_lines"] = static_cast<double>(shared);
}

// Total work is the same for every thread count: more threads, shorter lives.
void Churn(State &state, unsigned threads)
{
    std::size_t ops_per_thread = kChurnOpsPerGeneration / threads;
    SelfTimed(state, threads * kChurnGenerations * ops_per_thread,
              [&] { return bench_churn(threads, kChurnGenerations, ops_per_thread); });
}

void IdlePool(State &state, unsigned threads)
{
    SelfTimed(state, bench_idle_pool_ops(threads), [&] { return bench_idle_pool(threads); });
}

// Per THREAD: wall time / one thread's ops, so perfect scaling keeps it flat.
// thread_ns_per_op: the same from each thread's own start-to-end time (the
// mean over threads); the wall time above also charges the threads' start
// stagger, which this leaves out.  harness_only: scale_harness, the same
// loop with no malloc or free.
void ScaleLocal(State &state, unsigned threads, bool harness_only)
{
    double own_seconds = 0;
    IterationCount calls = 0;
    SelfTimed(state, kScaleOpsPerThread, [&] {
        scale_result r = bench_scale_local(threads, kScaleOpsPerThread, harness_only);
        own_seconds += r.mean_thread_seconds;
        calls++;
        return r.seconds;
    });
    if (calls > 0)
        state.counters["thread_ns_per_op"] = own_seconds * 1e9 / (static_cast<double>(calls) * kScaleOpsPerThread);
}

// Time per allocation; memory counters of the last call.
void Phase(State &state)
{
    phase_result last{};
    SelfTimed(state, 2 * kPhaseObjectsPerBuild, [&] {
        last = bench_phase(kPhaseObjectsPerBuild);
        return last.seconds;
    });
    state.counters["rss_peak_mib"] = last.rss_peak_mib;
    state.counters["rss_after_free_mib"] = last.rss_after_free_mib;
    state.counters["build_ns"] = last.build_ns;
    state.counters["free_most_ns"] = last.free_most_ns;
    state.counters["rebuild_ns"] = last.rebuild_ns;
    state.counters["free_rest_ns"] = last.free_rest_ns;
}

// ---- registration ----

template <typename... Args>
benchmark::internal::Benchmark *Add(const std::string &name, Args &&...args)
{
    return benchmark::RegisterBenchmark(name.c_str(), std::forward<Args>(args)...);
}

void RegisterSingleThread()
{
    for (std::size_t size : {16, 64, 256, 1024, 4096, 16384, 65536})
        Add("pair/" + std::to_string(size), Pair, size)->UseRealTime();
    for (std::size_t size : {16, 64, 256}) {
        std::string shape = std::to_string(kBatchCount) + "x" + std::to_string(size);
        Add("batch_lifo/" + shape, BatchLifo, kBatchCount, size)->UseRealTime();
        Add("batch_fifo/" + shape, BatchFifo, kBatchCount, size)->UseRealTime();
    }
    for (std::size_t slots : {10000, 100000})
        Add("sizemix/live=" + std::to_string(slots), Sizemix, slots)->UseRealTime();
    Add("realloc_grow/double_to_1MiB", ReallocGrow, REALLOC_DOUBLING)->UseRealTime();
    Add("realloc_grow/append_to_64KiB", ReallocGrow, REALLOC_APPEND)->UseRealTime();
    for (std::size_t size : {64, 4096, 65536})
        Add("calloc/" + std::to_string(size), Calloc, size)->UseRealTime();
    const std::pair<std::size_t, std::size_t> aligned[] = {{64, 64}, {64, 1000}, {4096, 4096}, {4096, 100}};
    for (auto [align, size] : aligned)
        Add("aligned/" + std::to_string(align) + "x" + std::to_string(size), Aligned, align, size)
            ->UseRealTime();
}

void RegisterThreaded()
{
    for (std::size_t size : {64, 1024})
        Add("prodcons/" + std::to_string(size), Prodcons, size)->UseManualTime();
    for (unsigned threads : {2u, 4u})
        Add("larson/threads=" + std::to_string(threads), Larson, threads)->UseManualTime();
    Add("false_sharing/active", FalseSharing, bench_false_sharing_active)->UseManualTime();
    Add("false_sharing/passive", FalseSharing, bench_false_sharing_passive)->UseManualTime();
    Add("phase/heap=256MiB", Phase)->UseManualTime();
    for (unsigned threads : {8u, 32u})
        Add("churn/threads=" + std::to_string(threads), Churn, threads)->UseManualTime();
    Add("idle_pool/threads=64", IdlePool, 64u)->UseManualTime();
    for (unsigned threads : {1u, 2u, 4u, 8u, 16u}) {
        Add("scale_local/threads=" + std::to_string(threads), ScaleLocal, threads, false)->UseManualTime();
        Add("scale_harness/threads=" + std::to_string(threads), ScaleLocal, threads, true)->UseManualTime();
    }
}

}  // namespace

int main(int argc, char **argv)
{
    static_assert(kBatchCount <= BENCH_BATCH_MAX, "batch larger than bodies_single.c's slots");
    // Our default min time goes first, so a --benchmark_min_time given on
    // the command line (parsed later) wins.
    std::vector<char *> args(argv, argv + argc);
    args.insert(args.begin() + 1, const_cast<char *>(kDefaultMinTime));
    int nargs = static_cast<int>(args.size());
    RegisterSingleThread();
    RegisterThreaded();
    benchmark::Initialize(&nargs, args.data());
    if (benchmark::ReportUnrecognizedArguments(nargs, args.data()))
        return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
