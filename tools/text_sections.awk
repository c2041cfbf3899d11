# text_sections.awk: objcopy arguments that gather an object's code into
# salloc's two text sections (Makefile: the library's objects, build/lib/;
# with hot=/dev/null, the fuzz builds', all of it salloc_text):
#   salloc_hot   the functions src/hot_text.list names: the code a program
#                runs even if it never calls mallctl, dumps or errs
#   salloc_text  the rest
# The library's linker script (src/salloc_text.ld) lays them out as one
# output section, salloc_text, hot part first.
#
# Input: `objdump -h` of an object built with -ffunction-sections; -v
# hot=FILE, the list.  The object's code sections are .text.NAME,
# .text.unlikely.NAME (a function's cold part, or a function all cold),
# .text.hot.NAME, .text.startup.NAME, .text.exit.NAME, and plain .text.
#
# Names are matched without gcc's clone suffixes (.constprop.0, .isra.0,
# .part.0): another compiler, or another version, clones differently.  A
# list entry NAME takes both of NAME's parts: callgrind does not always
# name a cold part reached by a jump (realloc's, where realloc(NULL, n)
# jumps on to malloc's slow path, ran with none of the runs naming it),
# and the cold parts of the listed functions are 274 bytes in all.  An
# entry NAME.cold takes its cold part alone.
BEGIN {
    while ((getline line < hot) > 0) {
        sub(/#.*/, "", line)
        gsub(/[ \t]/, "", line)
        if (line == "")
            continue
        if (line ~ /\.cold$/) {
            sub(/\.cold$/, "", line)
            sub(/\..*/, "", line)
            hot_cold[line] = 1
        } else {
            sub(/\..*/, "", line)
            hot_main[line] = 1
        }
    }
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

END {
    for (i = 1; i <= n; i++) {
        f = function_of(sections[i])
        is_hot = 0
        if (part == "main")
            is_hot = (f in hot_main)
        else if (part == "cold")
            is_hot = (f in hot_cold) || (f in hot_main)
        printf " --rename-section %s=%s", sections[i], is_hot ? "salloc_hot" : "salloc_text"
    }
}
