// cxx_new_check.cc: C++'s operator new and delete, every form, and what
// must happen when memory runs out.  Run by test_real_programs plain and
// with salloc preloaded; prints one line per check and "all checks passed",
// exits 1 on the first failure.  With salloc preloaded (argument "salloc")
// it also checks that the operators are salloc's own (src/cxx_new.c).
#include <dlfcn.h>
#include <pthread.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace {

int failures = 0;

void check(bool ok, const char *what)
{
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    if (!ok)
        failures++;
}

// Far more than any machine has: an allocation that must fail.
constexpr std::size_t kImpossible = std::size_t{1} << 46;

struct alignas(256) Wide {
    char bytes[300];
};

struct alignas(4096) Page {
    char bytes[100];
};

int handler_calls = 0;

void out_of_memory_once()
{
    handler_calls++;
    std::set_new_handler(nullptr); // the next failure throws
}

// Which object defines the function at `f`.
std::string defined_in(void *f)
{
    Dl_info info;
    return dladdr(f, &info) && info.dli_fname ? info.dli_fname : "?";
}

// salloc's mallctl, looked up at run time (the program also runs without
// salloc).
using MallctlFn = int (*)(const char *, void *, std::size_t *, void *, std::size_t);

template <typename T> T read_ctl(MallctlFn ctl, const char *name)
{
    T v{};
    std::size_t len = sizeof v;
    if (ctl(name, &v, &len, nullptr, 0) != 0)
        std::abort();
    return v;
}

struct SampledNews {
    MallctlFn ctl;
    std::uint64_t allocated, deallocated;
    std::size_t sampled, left;
};

// In a thread of its own, which starts with the rate just set: 50 blocks
// of new[], every one due for a sample (R = 1 byte), then deleted.
void *sampled_news(void *arg)
{
    auto *r = static_cast<SampledNews *>(arg);
    enum { N = 50 };
    char *blocks[N];
    std::uint64_t a0 = read_ctl<std::uint64_t>(r->ctl, "thread.allocated");
    std::uint64_t d0 = read_ctl<std::uint64_t>(r->ctl, "thread.deallocated");
    std::size_t s0 = read_ctl<std::size_t>(r->ctl, "prof.sample_count");
    for (int i = 0; i < N; i++) {
        blocks[i] = new char[64];
        blocks[i][63] = 1;
    }
    r->sampled = read_ctl<std::size_t>(r->ctl, "prof.sample_count") - s0;
    r->allocated = read_ctl<std::uint64_t>(r->ctl, "thread.allocated") - a0;
    for (int i = 0; i < N; i++)
        delete[] blocks[i];
    r->deallocated = read_ctl<std::uint64_t>(r->ctl, "thread.deallocated") - d0;
    r->left = read_ctl<std::size_t>(r->ctl, "prof.sample_count") - s0;
    return nullptr;
}

// Sampled operator new (malloc_not_cached, then malloc_sample_due once the
// list holds the proxies the deletes gave back): each block is a sample,
// counted once in thread.allocated and thread.deallocated.
void check_sampled_news()
{
    auto ctl = reinterpret_cast<MallctlFn>(dlsym(RTLD_DEFAULT, "mallctl"));
    check(ctl != nullptr, "mallctl is there");
    if (!ctl)
        return;
    std::size_t saved = 0, lg = 0, len = sizeof saved;
    if (ctl("prof.lg_sample", &saved, &len, &lg, sizeof lg) != 0) {
        std::printf("skip: sampled new[] (profiling off: SALLOC_CONF=prof:false)\n");
        return;
    }
    for (int round = 0; round < 2; round++) { // the second finds lists filled
        SampledNews r{ctl, 0, 0, 0, 0};
        pthread_t t;
        if (pthread_create(&t, nullptr, sampled_news, &r) != 0 || pthread_join(t, nullptr) != 0)
            std::abort();
        check(r.sampled == 50 && r.left == 0, "new[] due for sampling: 50 samples, all freed");
        check(r.allocated == 50 * 64 && r.deallocated == 50 * 64,
              "sampled new[]: thread.allocated and thread.deallocated count each block once");
    }
    if (ctl("prof.lg_sample", nullptr, nullptr, &saved, sizeof saved) != 0)
        std::abort();
}

} // namespace

int main(int argc, char **argv)
{
    bool preloaded = argc > 1 && std::strcmp(argv[1], "salloc") == 0;
    if (preloaded) {
        using NewFn = void *(*)(std::size_t);
        NewFn op_new = static_cast<NewFn>(&::operator new);
        void (*op_delete)(void *) noexcept = &::operator delete;
        check(defined_in(reinterpret_cast<void *>(op_new)).find("libsalloc") != std::string::npos,
              "operator new is salloc's");
        check(defined_in(reinterpret_cast<void *>(op_delete)).find("libsalloc") != std::string::npos,
              "operator delete is salloc's");
        check_sampled_news();
    }

    // Every form, with its matching delete.
    int *one = new int(42);
    check(*one == 42, "new/delete");
    delete one;
    std::vector<std::unique_ptr<std::string>> many;
    for (int i = 0; i < 10000; i++)
        many.push_back(std::make_unique<std::string>(std::string(static_cast<std::size_t>(i % 300), 'x')));
    std::size_t total = 0;
    for (auto &s : many)
        total += s->size();
    check(total == 1485000, "10000 strings (sized delete)");
    many.clear();
    char *array = new char[100000];
    std::memset(array, 1, 100000);
    delete[] array;
    check(true, "new[]/delete[]");
    Wide *wide = new Wide;
    check(reinterpret_cast<std::uintptr_t>(wide) % 256 == 0, "aligned new (256)");
    delete wide;
    Page *pages = new Page[3];
    check(reinterpret_cast<std::uintptr_t>(pages) % 4096 == 0, "aligned new[] (4096)");
    delete[] pages;
    int *quiet = new (std::nothrow) int[10];
    check(quiet != nullptr, "nothrow new[]");
    delete[] quiet;
    Wide *quiet_wide = new (std::nothrow) Wide;
    check(quiet_wide != nullptr && reinterpret_cast<std::uintptr_t>(quiet_wide) % 256 == 0,
          "nothrow aligned new");
    delete quiet_wide;
    delete static_cast<int *>(nullptr);
    check(true, "delete nullptr");

    // Out of memory: bad_alloc, nullptr for nothrow, the new_handler first.
    bool threw = false;
    try {
        char *p = new char[kImpossible];
        p[0] = 1;
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    check(threw, "new of 64 TiB throws std::bad_alloc");
    check(new (std::nothrow) char[kImpossible] == nullptr, "nothrow new of 64 TiB is nullptr");
    threw = false;
    try {
        Wide *w = new Wide[kImpossible / sizeof(Wide)];
        w[0].bytes[0] = 1;
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    check(threw, "aligned new of 64 TiB throws std::bad_alloc");
    std::set_new_handler(out_of_memory_once);
    threw = false;
    try {
        char *p = new char[kImpossible];
        p[0] = 1;
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    check(threw && handler_calls == 1, "new_handler called once, then std::bad_alloc");

    if (failures) {
        std::printf("%d checks failed\n", failures);
        return 1;
    }
    std::printf("all checks passed\n");
    return 0;
}
