/* Threads taking the GIL back after a stretch without it queue here first,
   so that one of them at a time waits for the GIL itself.

   CPython's GIL waiter wakes every switch interval (5 ms) to ask the holder
   to let go. Hundreds of rank threads of one process (thread worlds at
   scale) wanting the GIL at once, each as its collective ends, made ~100k
   such wake-ups a second and took most of the CPU: 20 CPU-s and 1.7 M
   context switches for one allreduce of 4,096 thread ranks in 8 processes.
   Queued on a mutex, the others sleep until it is their turn, woken one
   at a time (in a process of many contexts: see below).

   Included by an extension after Python.h: it redirects that extension's
   PyEval_RestoreThread (the end of every `with nogil:`) and its
   PyGILState_Ensure (the start of a `with gil` function called without the
   GIL). The queue is held only while waiting for the GIL, by a thread
   without it, and never by the GIL's holder, so it adds no lock cycle. */
#ifndef GLOOCY_GIL_QUEUE_H
#define GLOOCY_GIL_QUEUE_H

#include <Python.h>
#include <pthread.h>

static pthread_mutex_t gloocy_gil_queue = PTHREAD_MUTEX_INITIALIZER;

/* Contexts alive in this process (changed with the GIL held, read without
   it: a stale value only queues, or not, once). Below GLOOCY_GIL_QUEUE_FROM
   (a job's processes hold a context or a few) the queue is skipped: its
   mutex cost ~30 ns a call, 8% of a 2-rank barrier over shared memory. */
static int gloocy_gil_queue_contexts = 0;
#define GLOOCY_GIL_QUEUE_FROM 16

static void gloocy_gil_queue_reset(void)
{
    /* a forked child: the thread that held the queue is not in it */
    pthread_mutex_init(&gloocy_gil_queue, NULL);
}

/* Once per extension, at import. */
static int gloocy_gil_queue_init(void)
{
    return pthread_atfork(NULL, NULL, gloocy_gil_queue_reset);
}

static int gloocy_finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

static inline void gloocy_restore_thread(PyThreadState *ts)
{
    /* At exit CPython ends a daemon thread that asks for the GIL: not
       while it holds the queue. */
    if (gloocy_gil_queue_contexts < GLOOCY_GIL_QUEUE_FROM || gloocy_finalizing()) {
        PyEval_RestoreThread(ts);
        return;
    }
    pthread_mutex_lock(&gloocy_gil_queue);
    PyEval_RestoreThread(ts);
    pthread_mutex_unlock(&gloocy_gil_queue);
}

static inline PyGILState_STATE gloocy_gilstate_ensure(void)
{
    PyGILState_STATE s;
    if (gloocy_gil_queue_contexts < GLOOCY_GIL_QUEUE_FROM
            || PyGILState_Check() || gloocy_finalizing())
        return PyGILState_Ensure();     /* held already: no wait */
    pthread_mutex_lock(&gloocy_gil_queue);
    s = PyGILState_Ensure();
    pthread_mutex_unlock(&gloocy_gil_queue);
    return s;
}

#define PyEval_RestoreThread(ts) gloocy_restore_thread(ts)
#define PyGILState_Ensure() gloocy_gilstate_ensure()

#endif
