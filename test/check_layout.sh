#!/bin/sh
# check_layout.sh LIB MAP COLD_OBJECT...: the shared library's layout keeps
# the pages a program that never dumps or calls mallctl does not need out of
# its resident set (the Makefile's COLD_SRCS and src/util.h's SA_BSS_APART
# say why):
#   1. no DT_FINI: the dynamic linker would call _fini, at the very end of
#      the text, at exit, and the kernel would map the cold code around it;
#   2. in salloc_text, the functions src/hot_text.list and
#      src/sample_text.list name (input sections salloc_hot and
#      salloc_sample) come first and end within the 64 KiB that starts the
#      text segment, which starts on a 64 KiB boundary; after them, the
#      cold objects come after every other object (MAP is the linker's map
#      of LIB; an SA_DEBUG build, whose checks make the code bigger, may
#      run past the 64 KiB);
#   2a. what a sample runs (salloc_sample) lies together, before the rest
#      of the hot code, and every name src/sample_text.list gives is still
#      a function in src/ (a renamed one would quietly leave the group; one
#      the compiler inlines, as clang does some, has no code of its own to
#      place and is no error);
#   3. with .lbss (GCC), .bss holds only small variables: at most 16 KiB;
#   4. the entry points with a fast path start on a 64-byte boundary
#      (SA_EXPORT_FAST, src/util.h).
lib=${1:?usage: check_layout.sh LIB MAP COLD_OBJECT...}
map=${2:?usage: check_layout.sh LIB MAP COLD_OBJECT...}
shift 2
fail=0

if readelf -d "$lib" | grep -q '(FINI)'; then
    echo "check_layout: $lib has a DT_FINI entry (link with -Wl,-fini= naming no symbol)"
    fail=1
fi

# Input sections of salloc_text: " salloc_text  0xADDR  0xSIZE  build/lib/x.o",
# and salloc_hot likewise.
order=$(awk '$1 == "salloc_text" && NF == 4 { print $2, $3, $4 }' "$map")
if [ -z "$order" ]; then
    echo "check_layout: no salloc_text input sections in $map"
    fail=1
fi
hot=$(awk '($1 == "salloc_hot" || $1 == "salloc_sample") && NF == 4 { print $2, $3, $4 }' "$map")
sample=$(awk '$1 == "salloc_sample" && NF == 4 { print $2, $3, $4 }' "$map")
only_hot=$(awk '$1 == "salloc_hot" && NF == 4 { print $2, $3, $4 }' "$map")
# "LOAD 0xOFF 0xVADDR ... R E 0xALIGN": the text segment's start.
text_start=$(readelf -lW "$lib" | awk '$1 == "LOAD" && $8 == "E" { print $3; exit }')
if [ -z "$hot" ] || [ -z "$text_start" ]; then
    echo "check_layout: no salloc_hot input sections in $map, or no text segment in $lib"
    fail=1
else
    hot_end=$(echo "$hot" | while read -r addr size obj; do printf '%d\n' $((addr + size)); done | sort -n | tail -1)
    first_rest=$(echo "$order" | while read -r addr size obj; do printf '%d\n' $((addr)); done | sort -n | head -1)
    window_end=$((text_start + 65536))
    if [ $((text_start % 65536)) -ne 0 ]; then
        echo "check_layout: the text segment starts at $text_start, not on a 64 KiB boundary (-z max-page-size)"
        fail=1
    elif [ "$hot_end" -gt "$window_end" ] && [ "${SA_DEBUG:-0}" = 0 ]; then
        echo "check_layout: the hot code (src/hot_text.list) ends at $hot_end, past the text segment's first 64 KiB (ends $window_end): $((hot_end - window_end)) bytes too many"
        fail=1
    elif [ "$first_rest" -lt "$hot_end" ]; then
        echo "check_layout: other code (first at $first_rest) lies among the hot code (ends at $hot_end)"
        fail=1
    fi
fi
# 2a.  The list's names (no comments, no .cold ending), each followed by
# "(" somewhere in src/*.c: defined or called under that name.
src_dir=$(dirname "$0")/../src
sample_list=${SAMPLE_TEXT:-$src_dir/sample_text.list}
missing=$(sed 's/#.*//; s/[[:space:]]//g; s/\.cold$//' "$sample_list" | grep . | while read -r name; do
    grep -Eq "(^|[^A-Za-z0-9_])$name\(" "$src_dir"/*.c || printf ' %s' "$name"
done)
if [ -n "$missing" ]; then
    echo "check_layout: $sample_list names what is no function in $src_dir:$missing"
    fail=1
fi
sample_end=0
if [ -z "$sample" ]; then
    echo "check_layout: no salloc_sample input sections in $map"
    fail=1
else
    sample_end=$(echo "$sample" | while read -r addr size obj; do printf '%d\n' $((addr + size)); done | sort -n | tail -1)
    first_hot=$(echo "$only_hot" | while read -r addr size obj; do printf '%d\n' $((addr)); done | sort -n | head -1)
    if [ -n "$first_hot" ] && [ "$sample_end" -gt "$first_hot" ]; then
        echo "check_layout: the sample path's code (ends at $sample_end) is not all before the other hot code (first at $first_hot)"
        fail=1
    fi
fi
last_hot=$(echo "$order" | while read -r addr size obj; do
    case " $* " in *" $obj "*) ;; *) printf '%d\n' $((addr + size)) ;; esac
done | sort -n | tail -1)
first_cold=$(echo "$order" | while read -r addr size obj; do
    case " $* " in *" $obj "*) printf '%d\n' $((addr)) ;; esac
done | sort -n | head -1)
if [ -z "$first_cold" ] || [ "$first_cold" -lt "$last_hot" ]; then
    echo "check_layout: cold code (first at ${first_cold:-none}) is not after all other code (ends at $last_hot)"
    fail=1
fi

# "[NN] .bss NOBITS ADDR OFF SIZE ...", the size in hex.
bss=$(printf '%d' "0x$(readelf -SW "$lib" | sed 's/\[ */[/' | awk '$2 == ".bss" { print $6 }')")
if readelf -SW "$lib" | grep -q ' \.lbss '; then
    if [ "$bss" -gt 16384 ]; then
        echo "check_layout: .bss is $bss bytes: a big table is missing SA_BSS_APART"
        fail=1
    fi
    bss_note=".bss $bss bytes"
else
    bss_note="no .lbss (not GCC): .bss not checked"
fi

# "ADDR T NAME" from the dynamic symbol table, the address in hex.
fast="malloc free calloc realloc aligned_alloc memalign posix_memalign malloc_usable_size
      free_sized free_aligned_sized _Znwm _Znam _ZnwmRKSt9nothrow_t _ZdlPv _ZdaPv _ZdlPvm _ZdaPvm"
for sym in $fast; do
    addr=$(nm -D --defined-only "$lib" | awk -v s="$sym" '$3 == s { print $1 }')
    if [ -z "$addr" ]; then
        echo "check_layout: $lib does not define $sym"
        fail=1
    elif [ $((0x$addr % 64)) -ne 0 ]; then
        echo "check_layout: $sym is at 0x$addr, not on a 64-byte boundary (SA_EXPORT_FAST)"
        fail=1
    fi
done

[ $fail = 0 ] && echo "check_layout: $lib: no DT_FINI; hot code $((hot_end - text_start)) bytes into the text segment's first 64 KiB (the sample path's $((sample_end - text_start)) first); cold code after byte $last_hot of salloc_text; $bss_note; fast entry points 64-byte aligned"
exit $fail
