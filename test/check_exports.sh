#!/bin/sh
# check_exports.sh LIB: the shared library exports exactly the public API
# (everything else is hidden; C++'s operator new and delete count as API) and needs nothing beyond libc and pthreads.
lib=${1:?usage: check_exports.sh lib/libsalloc.so}
want="aligned_alloc calloc free free_aligned_sized free_sized malloc malloc_stats_print
malloc_trim malloc_usable_size mallctl mallctlbymib mallctlnametomib memalign
mallinfo mallinfo2 malloc_stats malloc_info mallopt
mallocx rallocx xallocx sallocx dallocx sdallocx nallocx
posix_memalign pvalloc realloc reallocarray valloc
_Znwm _Znam _ZnwmSt11align_val_t _ZnamSt11align_val_t _ZnwmRKSt9nothrow_t _ZnamRKSt9nothrow_t
_ZnwmSt11align_val_tRKSt9nothrow_t _ZnamSt11align_val_tRKSt9nothrow_t
_ZdlPv _ZdaPv _ZdlPvm _ZdaPvm _ZdlPvSt11align_val_t _ZdaPvSt11align_val_t
_ZdlPvmSt11align_val_t _ZdaPvmSt11align_val_t _ZdlPvRKSt9nothrow_t _ZdaPvRKSt9nothrow_t
_ZdlPvSt11align_val_tRKSt9nothrow_t _ZdaPvSt11align_val_tRKSt9nothrow_t"
# Defined, default-visibility dynamic symbols (hidden ones, such as the
# linker's __start_/__stop_salloc_text, are listed by nm -D but not exported).
got=$(readelf -W --dyn-syms "$lib" | awk '$7 != "UND" && $6 == "DEFAULT" && ($5 == "GLOBAL" || $5 == "WEAK") {sub(/@.*/, "", $8); print $8}' | sort | tr '\n' ' ')
want=$(echo $want | tr ' ' '\n' | sort | tr '\n' ' ')
if [ "$got" != "$want" ]; then
    echo "check_exports: $lib exports: $got"
    echo "check_exports: expected:      $want"
    exit 1
fi
needed=$(objdump -p "$lib" | awk '/NEEDED/ {print $2}' | sort | tr '\n' ' ')
case "$needed" in
    "libc.so.6 "|"ld-linux-x86-64.so.2 libc.so.6 ") ;;
    *) echo "check_exports: $lib needs more than libc: $needed"; exit 1 ;;
esac
echo "check_exports: $lib exports only the public API and needs only libc ($needed)"
