// cxx_workload.cc: a new/delete-heavy C++ program of our own, for the
// allocator cost of ordinary standard-library code rather than of one
// malloc pattern.  Plain C++17, no google benchmark; compare.sh runs it
// under each allocator (LD_PRELOAD) as the row `cxx_workload`.
//
// What it does (fixed seed, so every allocator sees the same requests):
//   1. a std::map<std::string, std::vector<int>> of 100k entries: keys built
//      by concatenation (most beyond the small-string buffer), vectors grown
//      one push_back at a time (the realloc-like growth of containers);
//   2. a std::unordered_map<int, std::string> of 150k entries: node and
//      bucket allocations, strings of 8..80 chars;
//   3. string work: sentences concatenated from words, copied, sorted;
//   4. std::shared_ptr churn: make_shared, copies into a second owner,
//      random replacement (control blocks and objects come and go);
//   5. erase half of both maps at random, rebuild them with other keys and
//      sizes: the heap after a phase change;
// then it prints a checksum of the contents (so no work can be optimised
// away) and its own elapsed wall time:
//
//   checksum 1234567890 elapsed_ms 512.3
//
// usage: cxx_workload [SCALE]   (SCALE multiplies every count; default 1)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

// xorshift64*, as in bench_util.h: fixed seed, same sequence everywhere.
class Rng {
public:
    explicit Rng(std::uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15u + 1) {}
    std::uint64_t Next()
    {
        s_ ^= s_ >> 12;
        s_ ^= s_ << 25;
        s_ ^= s_ >> 27;
        return s_ * 0x2545F4914F6CDD1Du;
    }
    // Uniform in [lo, hi].
    std::size_t Range(std::size_t lo, std::size_t hi) { return lo + Next() % (hi - lo + 1); }

private:
    std::uint64_t s_;
};

const char *const kWords[] = {"allocator", "span", "thread", "cache", "page", "heap", "sample",
                              "profile", "central", "list", "object", "class", "size", "free",
                              "malloc", "realloc", "kernel", "resident", "decay", "arena"};
constexpr std::size_t kWordCount = sizeof kWords / sizeof kWords[0];

// Checksums mix in lengths and a few bytes: cheap, and they depend on all
// the work.
std::uint64_t Mix(std::uint64_t h, std::uint64_t v) { return (h ^ v) * 0x100000001B3u; }

std::uint64_t Digest(const std::string &s)
{
    std::uint64_t h = s.size();
    if (!s.empty())
        h = Mix(Mix(h, static_cast<unsigned char>(s.front())), static_cast<unsigned char>(s.back()));
    return h;
}

// A key like "heap-cache-123456-7": concatenated from parts, 20..40 chars.
std::string MakeKey(Rng &rng, std::size_t n)
{
    std::string key = kWords[rng.Next() % kWordCount];
    key += '-';
    key += kWords[rng.Next() % kWordCount];
    key += '-' + std::to_string(n) + '-' + std::to_string(rng.Next() % 100);
    return key;
}

std::string MakeValue(Rng &rng)
{
    std::string value;
    std::size_t len = rng.Range(8, 80);
    while (value.size() < len)
        value += kWords[rng.Next() % kWordCount];
    value.resize(len);
    return value;
}

using KeyedVectors = std::map<std::string, std::vector<int>>;
using NamedInts = std::unordered_map<int, std::string>;

void FillMap(KeyedVectors &map, Rng &rng, std::size_t count, std::size_t first, std::size_t max_len)
{
    for (std::size_t i = 0; i < count; i++) {
        std::vector<int> &values = map[MakeKey(rng, first + i)];
        std::size_t len = rng.Range(1, max_len);
        for (std::size_t j = 0; j < len; j++)
            values.push_back(static_cast<int>(rng.Next() & 0xffff));
    }
}

void FillHash(NamedInts &hash, Rng &rng, std::size_t count, int first)
{
    for (std::size_t i = 0; i < count; i++)
        hash.emplace(first + static_cast<int>(i), MakeValue(rng));
}

// Erase about half, chosen at random.
template <typename Container>
void EraseHalf(Container &c, Rng &rng)
{
    for (auto it = c.begin(); it != c.end();)
        it = (rng.Next() & 1) ? c.erase(it) : std::next(it);
}

std::uint64_t Sum(const KeyedVectors &map)
{
    std::uint64_t h = map.size();
    for (const auto &[key, values] : map) {
        h = Mix(h, Digest(key));
        h = Mix(h, values.size());
        h = Mix(h, static_cast<std::uint64_t>(values.back()));
    }
    return h;
}

std::uint64_t Sum(const NamedInts &hash)
{
    std::uint64_t h = hash.size();
    for (const auto &[key, value] : hash)   // order-independent: add
        h += Mix(static_cast<std::uint64_t>(key), Digest(value));
    return h;
}

// Sentences of 3..12 words, copied (a second owner), sorted, deduplicated.
std::uint64_t StringWork(Rng &rng, std::size_t count)
{
    std::vector<std::string> sentences;
    for (std::size_t i = 0; i < count; i++) {
        std::string s;
        std::size_t words = rng.Range(3, 12);
        for (std::size_t w = 0; w < words; w++)
            s = s + kWords[rng.Next() % kWordCount] + ' ';   // temporaries on purpose
        sentences.push_back(s);
    }
    std::vector<std::string> copy = sentences;
    std::sort(copy.begin(), copy.end());
    copy.erase(std::unique(copy.begin(), copy.end()), copy.end());
    std::uint64_t h = copy.size();
    for (const std::string &s : copy)
        h = Mix(h, Digest(s));
    return h;
}

struct Node {
    std::string name;
    std::vector<double> data;
    std::shared_ptr<Node> parent;
};

// A pool of shared nodes, each also held by a second owner; random
// replacement drops the last reference of some (object + control block
// freed) and not of others.
std::uint64_t SharedPtrChurn(Rng &rng, std::size_t pool, std::size_t steps)
{
    std::vector<std::shared_ptr<Node>> owners(pool), others(pool);
    std::uint64_t h = 0;
    for (std::size_t step = 0; step < steps; step++) {
        std::size_t i = rng.Next() % pool;
        auto node = std::make_shared<Node>();
        node->name = MakeValue(rng);
        node->data.resize(rng.Range(0, 16), static_cast<double>(step));
        node->parent = owners[rng.Next() % pool];
        if (node->parent && node->parent->parent)   // keep chains short
            node->parent->parent.reset();
        owners[i] = node;
        if (rng.Next() % 4 == 0)
            others[rng.Next() % pool] = std::move(node);
        h = Mix(h, owners[i].use_count());
    }
    for (const auto &p : owners)
        if (p)
            h = Mix(h, Digest(p->name) + p->data.size());
    return h;
}

// Everything, containers destroyed included (programs pay for that too).
std::uint64_t Workload(std::size_t scale)
{
    Rng rng(42);
    std::uint64_t checksum = 0;
    KeyedVectors map;
    NamedInts hash;
    FillMap(map, rng, 100000 * scale, 0, 16);
    FillHash(hash, rng, 150000 * scale, 0);
    checksum = Mix(checksum, StringWork(rng, 50000 * scale));
    checksum = Mix(checksum, SharedPtrChurn(rng, 10000, 150000 * scale));

    EraseHalf(map, rng);
    EraseHalf(hash, rng);
    checksum = Mix(checksum, Sum(map));
    FillMap(map, rng, 50000 * scale, 1000000, 64);   // other keys, longer vectors
    FillHash(hash, rng, 75000 * scale, 1000000);
    checksum = Mix(checksum, Sum(map));
    return Mix(checksum, Sum(hash));
}

}  // namespace

int main(int argc, char **argv)
{
    std::size_t scale = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1;
    if (argc > 2 || scale == 0) {
        std::fprintf(stderr, "usage: %s [SCALE]   (SCALE > 0 multiplies every count)\n", argv[0]);
        return 2;
    }
    auto start = std::chrono::steady_clock::now();
    std::uint64_t checksum = Workload(scale);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("checksum %llu elapsed_ms %.1f\n", static_cast<unsigned long long>(checksum), ms);
    return 0;
}
