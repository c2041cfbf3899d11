/*
 * child_run.h: runs one scenario of the calling test program in a child
 * (this same executable again, with the scenario's name as its argument
 * and SALLOC_CONF set) and collects what it printed and how it ended: for
 * tests of what salloc reports before it aborts a program.  Header-only,
 * included once by each such test.
 */
#ifndef SALLOC_TEST_CHILD_RUN_H
#define SALLOC_TEST_CHILD_RUN_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

struct child_outcome {
    int signal; /* the signal that ended it; 0 if it exited */
    int status; /* its exit status; -1 if a signal ended it */
    char out[256], err[65536]; /* room for a whole JSON stats report */
};

static void child_read_all(int fd, char *buf, size_t size)
{
    size_t n = 0;
    ssize_t r;
    while (n < size - 1 && (r = read(fd, buf + n, size - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
}

/* Runs scenario `scenario` of this program, named `program` in the child's
 * argv[0], under SALLOC_CONF=`conf`; with `ignore_segv`, the child starts
 * with SIGSEGV ignored (kept across exec, so salloc finds SIG_IGN). */
static void child_run(const char *program, const char *scenario, const char *conf,
                      bool ignore_segv, struct child_outcome *o)
{
    int out[2], err[2];
    assert_int_equal(pipe(out), 0);
    assert_int_equal(pipe(err), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        setenv("SALLOC_CONF", conf, 1);
        if (ignore_segv)
            signal(SIGSEGV, SIG_IGN);
        execl("/proc/self/exe", program, scenario, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    child_read_all(out[0], o->out, sizeof(o->out));
    child_read_all(err[0], o->err, sizeof(o->err));
    close(out[0]);
    close(err[0]);
    int status;
    waitpid(pid, &status, 0);
    o->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    o->status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#endif
