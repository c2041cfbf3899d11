// cxx_new_check.cc: C++'s operator new and delete, every form, and what
// must happen when memory runs out.  Run by test_real_programs plain and
// with salloc preloaded; prints one line per check and "all checks passed",
// exits 1 on the first failure.  With salloc preloaded (argument "salloc")
// it also checks that the operators are salloc's own (src/cxx_new.c).
#include <dlfcn.h>

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
