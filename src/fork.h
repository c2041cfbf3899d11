/*
 * fork.h: keeping the heap usable across fork() in threaded programs.
 * The prepare handler takes every allocator lock in rank order (lock.h), so
 * no other thread is inside the allocator when the address space is copied;
 * the parent releases them, the child reinitialises them.
 */
#ifndef SA_FORK_H
#define SA_FORK_H

/* Registers the handlers (pthread_atfork); called once from init.c. */
void fork_init(void);

#endif
