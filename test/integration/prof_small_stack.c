/*
 * prof_small_stack.c: allocates on a thread whose stack is the smallest
 * pthreads allows (PTHREAD_STACK_MIN, thread descriptor and TLS included),
 * run by test_prof.c with salloc preloaded, every allocation sampled and an
 * interval dump due at each: the dumps run inside malloc() on that stack.
 * Prints how many blocks it allocated.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define BLOCKS 16

static void *volatile keep[BLOCKS];

static void *allocate(void *arg)
{
    (void)arg;
    for (int i = 0; i < BLOCKS; i++)
        keep[i] = malloc(64);
    return NULL;
}

int main(void)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (pthread_attr_setstacksize(&attr, PTHREAD_STACK_MIN) != 0)
        return 2;
    pthread_t t;
    if (pthread_create(&t, &attr, allocate, NULL) != 0)
        return 2;
    pthread_join(t, NULL);
    int n = 0;
    for (int i = 0; i < BLOCKS; i++)
        n += keep[i] != NULL;
    printf("%d blocks\n", n);
    return 0;
}
