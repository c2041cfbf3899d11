/*
 * cxx_new.c: C++'s operator new and delete, defined by salloc in C under
 * their Itanium-ABI names, so a C++ program's allocations skip libstdc++'s
 * wrappers (a call, a PLT jump and a branch each way) and go straight to
 * the fast paths, as with jemalloc, tcmalloc and mimalloc.
 *
 * Failure.  C cannot throw, so the rare path is handed to the next
 * definition of the same operator (libstdc++'s, found with
 * dlsym(RTLD_NEXT)), which does what the standard asks: call the
 * new_handler and retry (through salloc's malloc again), or throw
 * std::bad_alloc, or for the nothrow forms return NULL.  Only if there is
 * no such definition (libstdc++ linked statically along with salloc) does
 * salloc run the new_handler loop itself, with std::get_new_handler found
 * the same way, and, having nothing to throw with, report and abort.
 *
 * Deletes, sized and aligned ones included, are free(): the pagemap lookup
 * costs no more than using the size, and every block knows its own size.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>

#include "conf.h"
#include "fastpath.h"
#include "log.h"
#include "util.h"

/* The aligned forms' alignment is a std::align_val_t, a size_t enum.
 * salloc's aligned_alloc takes any size (not only multiples of align). */
void *aligned_alloc(size_t align, size_t size);

typedef void *(*new_fn)(size_t);
typedef void *(*new_aligned_fn)(size_t, size_t);
typedef void (*handler_fn)(void);

/* The next definition of `name` after salloc, looked up once. */
static void *next_definition(void **cache, const char *name)
{
    void *f = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (!f) {
        f = dlsym(RTLD_NEXT, name);
        __atomic_store_n(cache, f, __ATOMIC_RELEASE);
    }
    return f;
}

/* No next definition: the new_handler loop here; no handler: abort (C
 * cannot throw std::bad_alloc). */
SA_SLOW_PATH static void *retry_with_handler(size_t size, size_t align, int nothrow)
{
    handler_fn (*get_handler)(void) = (handler_fn(*)(void))dlsym(RTLD_DEFAULT, "_ZSt15get_new_handlerv");
    for (;;) {
        handler_fn handler = get_handler ? get_handler() : NULL;
        if (!handler) {
            if (nothrow)
                return NULL;
            sa_fatal("operator new(%zu): out of memory, and no C++ runtime to throw "
                     "std::bad_alloc with",
                     size);
        }
        handler();
        void *p = align ? aligned_alloc(align, size) : fast_malloc(size);
        if (p)
            return p;
    }
}

/* One operator new: the cached case, else malloc_not_cached, then the
 * next definition on failure.  The slow part is a function of its own,
 * tail-called, so that the cached case saves no register. */
#define DEFINE_NEW(sym, nothrow)                                                   \
    SA_SLOW_PATH static void *sym##_slow(size_t size)                              \
    {                                                                              \
        void *p = malloc_not_cached(size);                                         \
        if (likely(p != NULL))                                                     \
            return p;                                                              \
        static void *next;                                                         \
        new_fn f = (new_fn)next_definition(&next, #sym);                           \
        return f ? f(size) : retry_with_handler(size ? size : 1, 0, nothrow);      \
    }                                                                              \
    void *sym(size_t size);                                                        \
    SA_EXPORT_FAST void *sym(size_t size)                                          \
    {                                                                              \
        void *p = fast_malloc_cached(size);                                        \
        return likely(p != NULL) ? p : sym##_slow(size);                           \
    }

#define DEFINE_NEW_ALIGNED(sym, nothrow)                                           \
    SA_SLOW_PATH static void *sym##_failed(size_t size, size_t align)              \
    {                                                                              \
        static void *next;                                                         \
        new_aligned_fn f = (new_aligned_fn)next_definition(&next, #sym);           \
        return f ? f(size, align) : retry_with_handler(size ? size : 1, align, nothrow); \
    }                                                                              \
    void *sym(size_t size, size_t align);                                          \
    SA_EXPORT_FAST void *sym(size_t size, size_t align)                            \
    {                                                                              \
        void *p = aligned_alloc(align, size);                                      \
        return likely(p != NULL) ? p : sym##_failed(size, align);                  \
    }

/* The nothrow forms take a const std::nothrow_t & as their last argument;
 * an unused pointer here.  Their next definitions take it too: they are
 * called with NULL for it, which libstdc++ never reads. */
#define DEFINE_NEW_NOTHROW(sym)                                                    \
    SA_SLOW_PATH static void *sym##_slow(size_t size, const void *tag)             \
    {                                                                              \
        void *p = malloc_not_cached(size);                                         \
        if (likely(p != NULL))                                                     \
            return p;                                                              \
        static void *next;                                                         \
        void *(*f)(size_t, const void *) =                                         \
            (void *(*)(size_t, const void *))next_definition(&next, #sym);         \
        return f ? f(size, tag) : retry_with_handler(size ? size : 1, 0, 1);       \
    }                                                                              \
    void *sym(size_t size, const void *tag);                                       \
    SA_EXPORT_FAST void *sym(size_t size, const void *tag)                         \
    {                                                                              \
        void *p = fast_malloc_cached(size);                                        \
        return likely(p != NULL) ? p : sym##_slow(size, tag);                      \
    }

#define DEFINE_NEW_ALIGNED_NOTHROW(sym)                                            \
    void *sym(size_t size, size_t align, const void *tag);                         \
    SA_EXPORT_FAST void *sym(size_t size, size_t align, const void *tag)           \
    {                                                                              \
        void *p = aligned_alloc(align, size);                                      \
        if (likely(p != NULL))                                                     \
            return p;                                                              \
        static void *next;                                                         \
        void *(*f)(size_t, size_t, const void *) =                                 \
            (void *(*)(size_t, size_t, const void *))next_definition(&next, #sym); \
        return f ? f(size, align, tag) : retry_with_handler(size ? size : 1, align, 1); \
    }

/* operator new(size_t), new[](size_t) */
DEFINE_NEW(_Znwm, 0)
DEFINE_NEW(_Znam, 0)
/* ... (size_t, std::align_val_t) */
DEFINE_NEW_ALIGNED(_ZnwmSt11align_val_t, 0)
DEFINE_NEW_ALIGNED(_ZnamSt11align_val_t, 0)
/* ... (size_t, const std::nothrow_t &) */
DEFINE_NEW_NOTHROW(_ZnwmRKSt9nothrow_t)
DEFINE_NEW_NOTHROW(_ZnamRKSt9nothrow_t)
/* ... (size_t, std::align_val_t, const std::nothrow_t &) */
DEFINE_NEW_ALIGNED_NOTHROW(_ZnwmSt11align_val_tRKSt9nothrow_t)
DEFINE_NEW_ALIGNED_NOTHROW(_ZnamSt11align_val_tRKSt9nothrow_t)

/* Every delete: void *, then size_t, std::align_val_t and/or a nothrow tag,
 * all unused. */
#define DEFINE_DELETE(sym, ...)                                                    \
    void sym(void *p, ##__VA_ARGS__);                                              \
    SA_EXPORT_FAST void sym(void *p, ##__VA_ARGS__) { fast_free(p); }

/* The sized ones: opt.check checks the size (and alignment).  Not on the
 * common case's way: under opt.check no free is cached (every block's
 * class reads 0, see free_slow_not_null), so the check waits on the way
 * out (2 instructions a delete less; cxx_workload makes 2.3 M).  The
 * aligned ones take one more parameter, passed in with a comma that must
 * not split the macro's arguments. */
#define MACRO_COMMA ,
#define DEFINE_DELETE_SIZED(sym, align_arg, align_value)                           \
    SA_SLOW_PATH static void sym##_slow(void *p, size_t size, size_t align, unsigned cls) \
    {                                                                              \
        if (opt_check)                                                             \
            free_checking_size(p, size, align, "operator delete");                 \
        else                                                                       \
            free_slow(p, cls);                                                     \
    }                                                                              \
    void sym(void *p, size_t size align_arg);                                      \
    SA_EXPORT_FAST void sym(void *p, size_t size align_arg)                        \
    {                                                                              \
        unsigned cls;                                                              \
        if (unlikely(!free_cached(p, &cls)))                                       \
            sym##_slow(p, size, align_value, cls);                                 \
    }

DEFINE_DELETE(_ZdlPv)
DEFINE_DELETE(_ZdaPv)
DEFINE_DELETE_SIZED(_ZdlPvm, , 0)
DEFINE_DELETE_SIZED(_ZdaPvm, , 0)
DEFINE_DELETE(_ZdlPvSt11align_val_t, size_t align __attribute__((unused)))
DEFINE_DELETE(_ZdaPvSt11align_val_t, size_t align __attribute__((unused)))
DEFINE_DELETE_SIZED(_ZdlPvmSt11align_val_t, MACRO_COMMA size_t align, align)
DEFINE_DELETE_SIZED(_ZdaPvmSt11align_val_t, MACRO_COMMA size_t align, align)
DEFINE_DELETE(_ZdlPvRKSt9nothrow_t, const void *tag __attribute__((unused)))
DEFINE_DELETE(_ZdaPvRKSt9nothrow_t, const void *tag __attribute__((unused)))
DEFINE_DELETE(_ZdlPvSt11align_val_tRKSt9nothrow_t, size_t align __attribute__((unused)),
              const void *tag __attribute__((unused)))
DEFINE_DELETE(_ZdaPvSt11align_val_tRKSt9nothrow_t, size_t align __attribute__((unused)),
              const void *tag __attribute__((unused)))
