// prof_reentrancy.cc: sampling every allocation (run with
// SALLOC_CONF=lg_prof_sample:0) in a threaded C++ program that throws and
// catches exceptions (the unwinder allocates and walks the same tables the
// sampler's stack capture uses) and dlopen/dlcloses libraries (the loader
// lock) at the same time.  It must finish, not deadlock or crash, and print
// a checksum that does not depend on the allocator.
#include <dlfcn.h>

#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

static long thrower(int depth, int i)
{
    if (depth == 0)
        throw std::runtime_error("depth reached " + std::to_string(i));
    std::vector<std::string> local(3, std::string(40, 'x'));
    return thrower(depth - 1, i) + static_cast<long>(local.size());
}

static long worker(int id)
{
    long sum = 0;
    std::map<int, std::string> m;
    for (int i = 0; i < 2000; i++) {
        try {
            sum += thrower(1 + i % 7, i);
        } catch (const std::exception &e) {
            sum += static_cast<long>(std::string(e.what()).size());
        }
        m[i % 97] = std::to_string(i * id);
        if (i % 200 == 0) {
            void *h = dlopen(i % 400 ? "libresolv.so.2" : "libutil.so.1", RTLD_NOW | RTLD_LOCAL);
            if (h)
                dlclose(h);
        }
    }
    return sum + static_cast<long>(m.size());
}

int main()
{
    std::vector<std::thread> threads;
    std::vector<long> results(6);
    for (int t = 0; t < 6; t++)
        threads.emplace_back([t, &results] { results[t] = worker(t + 1); });
    for (auto &t : threads)
        t.join();
    long total = 0;
    for (long r : results)
        total += r;
    std::printf("checksum %ld\n", total);
    return 0;
}
