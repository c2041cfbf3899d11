# text_sections.awk: objcopy arguments that gather an object's code into
# salloc's three text sections (Makefile: the library's objects, build/lib/;
# with hot=/dev/null and no sample list, the fuzz builds', all of it
# salloc_text):
#   salloc_sample  the functions src/sample_text.list names: what a sampled
#                  allocation and its free run, which must sit together
#                  (that file says why)
#   salloc_hot     the other functions src/hot_text.list names: the code a
#                  program runs even if it never calls mallctl, dumps or errs
#   salloc_text    the rest
# The library's linker script (src/salloc_text.ld) lays them out as one
# output section, salloc_text, in that order.
#
# Input: `objdump -h` of an object built with -ffunction-sections; -v
# hot=FILE and -v sample=FILE, the lists (sample optional).  The object's
# code sections are .text.NAME, .text.unlikely.NAME (a function's cold
# part, or a function all cold), .text.hot.NAME, .text.startup.NAME,
# .text.exit.NAME, and plain .text.
#
# Names are matched without gcc's clone suffixes (.constprop.0, .isra.0,
# .part.0): another compiler, or another version, clones differently.  A
# list entry NAME takes both of NAME's parts: callgrind does not always
# name a cold part reached by a jump (realloc's, where realloc(NULL, n)
# jumps on to malloc's slow path, ran with none of the runs naming it),
# and the cold parts of the listed functions are 274 bytes in all.  An
# entry NAME.cold takes its cold part alone.

# Reads list FILE into main[NAME] (both parts) and cold[NAME] (the cold
# part alone: NAME.cold).
function read_list(file, main, cold,    line) {
    while ((getline line < file) > 0) {
        sub(/#.*/, "", line)
        gsub(/[ \t]/, "", line)
        if (line == "")
            continue
        if (line ~ /\.cold$/) {
            sub(/\.cold$/, "", line)
            sub(/\..*/, "", line)
            cold[line] = 1
        } else {
            sub(/\..*/, "", line)
            main[line] = 1
        }
    }
    close(file)
}

BEGIN {
    read_list(hot, hot_main, hot_cold)
    if (sample != "")
        read_list(sample, sample_main, sample_cold)
}

$2 ~ /^\.text($|\.)/ { sections[++n] = $2 }

# The function a section holds (clone suffix dropped); sets `part` to
# "cold" for .text.unlikely.*, "main" otherwise, "" for plain .text*.
function function_of(sec,    f) {
    part = ""
    f = sec
    if (f !~ /^\.text\./)
        return ""
    sub(/^\.text\./, "", f)
    if (f ~ /^unlikely\./) {
        part = "cold"
        sub(/^unlikely\./, "", f)
    } else if (f ~ /^(hot|startup|exit)\./) {
        part = "main"
        sub(/^(hot|startup|exit)\./, "", f)
    } else if (f == "unlikely" || f == "hot" || f == "startup" || f == "exit") {
        return ""
    } else {
        part = "main"
    }
    sub(/\..*/, "", f)
    return f
}

# Whether the function of the last function_of() is named in a list.
function listed(f, main, cold) {
    if (part == "main")
        return f in main
    if (part == "cold")
        return (f in cold) || (f in main)
    return 0
}

END {
    for (i = 1; i <= n; i++) {
        f = function_of(sections[i])
        to = listed(f, sample_main, sample_cold) ? "salloc_sample" \
           : listed(f, hot_main, hot_cold)       ? "salloc_hot" : "salloc_text"
        printf " --rename-section %s=%s", sections[i], to
    }
}
