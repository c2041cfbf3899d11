/*
 * unwind_lib.c: a library test_unwind.c loads, unloads and replaces.  Built
 * twice (test/bin/libunwind_a.so, libunwind_b.so) with different frame
 * sizes: the same code at the same offsets, so that when b is loaded where
 * a was, a rule cached for a's return address would unwind b's frame
 * wrongly.
 */
void unwind_lib_call(void (*fn)(void *), void *arg);

void unwind_lib_call(void (*fn)(void *), void *arg)
{
    volatile char pad[FRAME_BYTES];
    pad[0] = 1;
    fn(arg);
    pad[FRAME_BYTES - 1] = pad[0]; /* keeps the frame alive across the call */
}
