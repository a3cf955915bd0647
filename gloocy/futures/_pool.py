"""The task farm under gloocy.futures: one client rank hands tasks to the
worker ranks of a communicator and collects their results.

Messages (lower-case, pickled) on a duplicate of the communicator, so that
they never meet the user's own:

  client -> worker  TASK    (task id, executor id, initializer, fn, args, kwargs)
                            or None: stop serving
  worker -> client  RESULT  (task id, ok, result or exception)
                            or None: stopped

A worker runs one task at a time; the client keeps each worker busy with at
most one task and queues the rest. One thread of the client receives the
results (blocking receive, no polling) and hands out the queued tasks.
"""

import collections
import sys
import threading
import traceback

TASK, RESULT = 1, 2


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker (its __cause__)."""

    def __init__(self, text):
        super().__init__(text)
        self.tb = text

    def __str__(self):
        return self.tb


def _portable(exc):
    """`exc`, with its remote traceback as __cause__, if it pickles; else a
    RuntimeError saying what it was."""
    import pickle
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        exc.__traceback__ = None
        pickle.dumps(exc)
    except Exception:
        exc = RuntimeError(f"{type(exc).__name__}: {exc} (not picklable)")
    return exc, text


def serve(comm, client):
    """Run the tasks `client` (a rank of comm) sends until it says stop."""
    initialized = set()
    while True:
        task = comm.recv(source=client, tag=TASK)
        if task is None:
            comm.send(None, client, tag=RESULT)
            return
        task_id, executor_id, initializer, fn, args, kwargs = task
        try:
            if executor_id not in initialized:
                initialized.add(executor_id)
                if initializer is not None:
                    initializer[0](*initializer[1])
            reply = (task_id, True, fn(*args, **kwargs))
        except BaseException as exc:            # noqa: B902 (the task's, sent back)
            reply = (task_id, False, _portable(exc))
        try:
            comm.send(reply, client, tag=RESULT)
        except Exception as exc:                # the result does not pickle
            comm.send((task_id, False, _portable(exc)), client, tag=RESULT)


class Pool:
    """The client's side: the workers of `comm` (every rank but `client`)."""

    def __init__(self, comm, client):
        self.comm, self.client = comm, client
        self.workers = [r for r in range(comm.Get_size()) if r != client]
        self.idle = collections.deque(self.workers)
        self.queue = collections.deque()        # (task, future) waiting for a worker
        self.running = {}                       # task id -> (worker, future)
        self.lock = threading.Lock()
        self.next_id = 0
        self.stopped = False
        self.receiver = None

    @property
    def size(self):
        return len(self.workers)

    def submit(self, future, executor_id, initializer, fn, args, kwargs):
        with self.lock:
            if self.stopped:
                raise RuntimeError("the workers have stopped (the job is ending)")
            task_id, self.next_id = self.next_id, self.next_id + 1
            task = (task_id, executor_id, initializer, fn, args, kwargs)
            if self.receiver is None:
                self.receiver = threading.Thread(target=self._receive, daemon=True,
                                                 name="gloocy-futures-results")
                self.receiver.start()
            if self.idle:
                self._send(self.idle.popleft(), task, future)
            else:
                self.queue.append((task, future))

    def _send(self, worker, task, future):
        """(under the lock)"""
        if not future.set_running_or_notify_cancel():
            self.idle.append(worker)            # cancelled while queued
            return
        self.running[task[0]] = (worker, future)
        try:
            self.comm.send(task, worker, tag=TASK)
        except BaseException as exc:            # the task does not pickle
            del self.running[task[0]]
            self.idle.append(worker)
            future.set_exception(exc)

    def _receive(self):
        stopped = 0
        while stopped < len(self.workers):
            reply = self.comm.recv(source=-2, tag=RESULT)     # ANY_SOURCE
            if reply is None:
                stopped += 1
                continue
            task_id, ok, value = reply
            with self.lock:
                worker, future = self.running.pop(task_id)
                self.idle.append(worker)
                while self.queue and self.idle:
                    task, queued = self.queue.popleft()
                    self._send(self.idle.popleft(), task, queued)
            if ok:
                future.set_result(value)
            else:
                exc, text = value
                exc.__cause__ = RemoteTraceback(text)
                future.set_exception(exc)

    def cancel_queued(self, executor_id):
        with self.lock:
            keep = collections.deque()
            for task, future in self.queue:
                if task[1] == executor_id:
                    future.cancel()
                else:
                    keep.append((task, future))
            self.queue = keep

    def stop(self):
        """Tell every worker to stop, once its task is done; wait for them."""
        with self.lock:
            if self.stopped:
                return
            self.stopped = True
            for task, future in self.queue:
                future.cancel()
            self.queue.clear()
            if self.receiver is None:
                self.receiver = threading.Thread(target=self._receive, daemon=True,
                                                 name="gloocy-futures-results")
                self.receiver.start()
        for worker in self.workers:
            self.comm.send(None, worker, tag=TASK)
        self.receiver.join()


def report(exc):
    """Print an exception of the main script as Python would."""
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
