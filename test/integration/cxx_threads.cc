// cxx_threads.cc: a C++ program whose output must not depend on the
// allocator.  Threads churn std:: containers (map, unordered_map, vector,
// string, deque, shared_ptr) and pass objects between threads; each prints
// checksums that depend only on its fixed seed, so a run with an allocator
// preloaded must print exactly what a run without it prints.
// test_real_programs.c runs it both ways and compares stdout.
#include <cstdint>
#include <cstdio>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

constexpr int kWorkers = 6;
constexpr int kPipes = 2;
constexpr int kRounds = 3;

// FNV-1a, folded in one value at a time.
struct Hash {
    uint64_t h = 1469598103934665603ull;
    void add(uint64_t v) {
        for (int i = 0; i < 8; i++) {
            h ^= (v >> (8 * i)) & 0xff;
            h *= 1099511628211ull;
        }
    }
    void add(const std::string &s) {
        add(s.size());
        for (unsigned char c : s) {
            h ^= c;
            h *= 1099511628211ull;
        }
    }
};

// A string of `len` letters drawn from the engine: mt19937_64 output is
// fixed by the standard, so it is the same everywhere.
std::string random_string(std::mt19937_64 &rng, size_t len) {
    std::string s;
    for (size_t i = 0; i < len; i++)
        s.push_back(static_cast<char>('a' + rng() % 26));
    return s;
}

size_t random_len(std::mt19937_64 &rng) {
    uint64_t c = rng() % 100;
    if (c < 80) return rng() % 24;        // fits the small-string buffer or not
    if (c < 98) return 24 + rng() % 500;
    return 500 + rng() % 20000;
}

uint64_t churn_map(std::mt19937_64 &rng) {
    std::map<int, std::string> m;
    for (int i = 0; i < 20000; i++) {
        int key = static_cast<int>(rng() % 50000);
        if (rng() % 4 == 0)
            m.erase(key);
        else
            m[key] = random_string(rng, random_len(rng));
    }
    Hash h;
    for (const auto &kv : m) {
        h.add(static_cast<uint64_t>(kv.first));
        h.add(kv.second);
    }
    return h.h;
}

uint64_t churn_unordered(std::mt19937_64 &rng) {
    std::unordered_map<std::string, std::vector<int>> um;
    for (int i = 0; i < 20000; i++) {
        std::string key = random_string(rng, 1 + rng() % 12);
        auto &v = um[key];
        size_t n = rng() % 40;
        for (size_t k = 0; k < n; k++)
            v.push_back(static_cast<int>(rng() % 1000));
        if (rng() % 8 == 0)
            um.erase(random_string(rng, 1 + rng() % 3));
    }
    // Order-independent sum: iteration order is not part of the contract.
    uint64_t sum = 0;
    for (const auto &kv : um) {
        Hash h;
        h.add(kv.first);
        for (int x : kv.second)
            h.add(static_cast<uint64_t>(x));
        sum += h.h;
    }
    return sum;
}

uint64_t churn_deque(std::mt19937_64 &rng) {
    std::deque<std::string> q;
    Hash h;
    for (int i = 0; i < 40000; i++) {
        if (rng() % 3 != 0 || q.empty()) {
            q.push_back(random_string(rng, random_len(rng) % 200));
        } else {
            h.add(q.front());
            q.pop_front();
        }
    }
    h.add(q.size());
    return h.h;
}

struct Node {
    uint64_t value;
    std::vector<std::shared_ptr<Node>> next;
    std::weak_ptr<Node> back;
};

// A random DAG of shared_ptr nodes, walked and then released.
uint64_t churn_shared(std::mt19937_64 &rng) {
    std::vector<std::shared_ptr<Node>> nodes;
    for (int i = 0; i < 5000; i++) {
        auto n = std::make_shared<Node>();
        n->value = rng();
        if (!nodes.empty()) {
            for (int k = 0; k < 3; k++)
                n->next.push_back(nodes[rng() % nodes.size()]);
            n->back = nodes[rng() % nodes.size()];
        }
        nodes.push_back(std::move(n));
        if (rng() % 5 == 0)
            nodes.erase(nodes.begin() + static_cast<long>(rng() % nodes.size()));
    }
    Hash h;
    for (const auto &n : nodes) {
        h.add(n->value);
        h.add(static_cast<uint64_t>(n.use_count()));
        for (const auto &m : n->next)
            h.add(m->value);
        if (auto b = n->back.lock())
            h.add(b->value);
    }
    return h.h;
}

struct Result {
    uint64_t map = 0, unordered = 0, deque = 0, shared = 0;
};

void worker(int id, const std::vector<std::shared_ptr<const std::string>> &common,
            Result &out) {
    std::mt19937_64 rng(1000 + static_cast<uint64_t>(id));
    Hash m, u, d, s;
    for (int round = 0; round < kRounds; round++) {
        // Copies of shared strings: refcounts change from every thread.
        std::vector<std::shared_ptr<const std::string>> mine(common.begin(), common.end());
        m.add(churn_map(rng));
        u.add(churn_unordered(rng));
        d.add(churn_deque(rng));
        s.add(churn_shared(rng));
        s.add(*mine[rng() % mine.size()]);
    }
    out = Result{ m.h, u.h, d.h, s.h };
}

// A single-producer, single-consumer queue of heap objects: each one is
// allocated in one thread and freed in the other.
struct Pipe {
    std::mutex lock;
    std::condition_variable cv;
    std::deque<std::unique_ptr<std::vector<std::string>>> items;
    bool closed = false;
};

void producer(int id, Pipe &p) {
    std::mt19937_64 rng(5000 + static_cast<uint64_t>(id));
    for (int i = 0; i < 20000; i++) {
        auto item = std::make_unique<std::vector<std::string>>();
        size_t n = 1 + rng() % 8;
        for (size_t k = 0; k < n; k++)
            item->push_back(random_string(rng, random_len(rng) % 300));
        std::lock_guard<std::mutex> g(p.lock);
        p.items.push_back(std::move(item));
        p.cv.notify_one();
    }
    std::lock_guard<std::mutex> g(p.lock);
    p.closed = true;
    p.cv.notify_one();
}

void consumer(Pipe &p, uint64_t &out) {
    Hash h;
    for (;;) {
        std::unique_ptr<std::vector<std::string>> item;
        {
            std::unique_lock<std::mutex> g(p.lock);
            p.cv.wait(g, [&] { return !p.items.empty() || p.closed; });
            if (p.items.empty())
                break;
            item = std::move(p.items.front());
            p.items.pop_front();
        }
        for (const auto &s : *item)
            h.add(s);
    }   // item freed here, in the consumer thread
    out = h.h;
}

}  // namespace

int main() {
    std::vector<std::shared_ptr<const std::string>> common;
    for (int i = 0; i < 64; i++)
        common.push_back(std::make_shared<const std::string>(std::string(static_cast<size_t>(i) * 37, 'x') + std::to_string(i)));

    std::vector<Result> results(kWorkers);
    std::vector<uint64_t> piped(kPipes);
    std::vector<Pipe> pipes(kPipes);
    std::vector<std::thread> threads;
    for (int i = 0; i < kWorkers; i++)
        threads.emplace_back(worker, i, std::cref(common), std::ref(results[static_cast<size_t>(i)]));
    for (int i = 0; i < kPipes; i++) {
        threads.emplace_back(producer, i, std::ref(pipes[static_cast<size_t>(i)]));
        threads.emplace_back(consumer, std::ref(pipes[static_cast<size_t>(i)]), std::ref(piped[static_cast<size_t>(i)]));
    }
    for (auto &t : threads)
        t.join();

    Hash total;
    for (int i = 0; i < kWorkers; i++) {
        const Result &r = results[static_cast<size_t>(i)];
        std::printf("worker %d: map %016llx unordered %016llx deque %016llx shared %016llx\n", i,
                    static_cast<unsigned long long>(r.map), static_cast<unsigned long long>(r.unordered),
                    static_cast<unsigned long long>(r.deque), static_cast<unsigned long long>(r.shared));
        total.add(r.map ^ r.unordered ^ r.deque ^ r.shared);
    }
    for (int i = 0; i < kPipes; i++) {
        std::printf("pipe %d: %016llx\n", i, static_cast<unsigned long long>(piped[static_cast<size_t>(i)]));
        total.add(piped[static_cast<size_t>(i)]);
    }
    std::printf("total: %016llx\n", static_cast<unsigned long long>(total.h));
    return 0;
}
