#!/bin/sh
# check_string_leaves.sh: fails if src/ctl.c's table has a string leaf
# (T_STR: its value is a `const char *`), a function leaf (T_FN: a hook's
# function pointer) or a writer leaf (T_WRITER: a callback and its
# argument) that fuzz_mallctl.c's strings[] does not list: the target
# would pass raw input bytes to it as a pointer.
# The Makefile runs it before building fuzz_mallctl.
ctl=${1:-src/ctl.c}
target=${2:-test/fuzz/fuzz_mallctl.c}
names=$(sed -n -e 's/^ *\(FN\|VAR\)("\([^"]*\)", *T_\(STR\|FN\|WRITER\).*/\2/p' -e 's/^ *STR("\([^"]*\)".*/\1/p' "$ctl")
if [ -z "$names" ]; then
    echo "$0: no string leaves found in $ctl (has the table's form changed?)" >&2
    exit 1
fi
status=0
for n in $names; do
    if ! grep -q "{\"$n\"," "$target"; then
        echo "$target: string leaf \"$n\" of $ctl is missing from strings[]" >&2
        status=1
    fi
done
exit $status
