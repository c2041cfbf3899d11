// bench_core.cc: the one C++ file of the benchmarks.  It registers the C
// bodies of bench_bodies.c with google benchmark, named workload/size
// (pair/16, batch_lifo/1000x64, ...).  Every benchmark reports the time of
// ONE malloc+free as its time per iteration (KeepRunningBatch), so results
// of different workloads are in the same unit: ns per malloc+free.
//
// This binary links no allocator: compare.sh swaps them with LD_PRELOAD.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <string>

#include "bench_bodies.h"

namespace {

// Pairs per call into C: enough to amortise the call, small enough that
// KeepRunningBatch's overshoot does not matter.
constexpr std::size_t kPairBatch = 64;
constexpr std::size_t kBatchCount = 1000;

const std::size_t kPairSizes[] = {16, 64, 256, 4096, 65536};
const std::size_t kBatchSizes[] = {16, 64, 256};

void Pair(benchmark::State &state, std::size_t size)
{
    while (state.KeepRunningBatch(kPairBatch))
        bench_pairs(size, kPairBatch);
}

void BatchLifo(benchmark::State &state, std::size_t count, std::size_t size)
{
    while (state.KeepRunningBatch(static_cast<benchmark::IterationCount>(count)))
        bench_batch_lifo(count, size);
}

void BatchFifo(benchmark::State &state, std::size_t count, std::size_t size)
{
    while (state.KeepRunningBatch(static_cast<benchmark::IterationCount>(count)))
        bench_batch_fifo(count, size);
}

void RegisterAll()
{
    for (std::size_t size : kPairSizes)
        benchmark::RegisterBenchmark(("pair/" + std::to_string(size)).c_str(), Pair, size);
    for (std::size_t size : kBatchSizes) {
        std::string shape = std::to_string(kBatchCount) + "x" + std::to_string(size);
        benchmark::RegisterBenchmark(("batch_lifo/" + shape).c_str(), BatchLifo, kBatchCount, size);
        benchmark::RegisterBenchmark(("batch_fifo/" + shape).c_str(), BatchFifo, kBatchCount, size);
    }
}

}  // namespace

int main(int argc, char **argv)
{
    static_assert(kBatchCount <= BENCH_BATCH_MAX, "batch larger than bench_bodies.c's slots");
    RegisterAll();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv))
        return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
