"""The data access methods of MPI.File (gloocy.mpiio): reads and writes
at explicit offsets, at the individual file pointer and at the shared one,
blocking, nonblocking (complete when returned), collective and split
collective, all made by ``_method`` from one transfer, ``DataAccess._move``.

A transfer turns the buffer into its data stream (gloocy.bufspec's
message), finds where the stream goes in the file (the view's segments,
from a position in etypes), then writes each segment with ``os.pwrite`` or
reads them with ``os.preadv`` (straight into the buffer when it is one run
of native elements; many small segments close together are read as one
span and gathered with NumPy). A read stops at the end of the file: the
Status counts the bytes read.
"""

import contextlib
import fcntl
import os

import numpy as np

from gloocy import bufspec
from gloocy.mpiio import view as file_view
from gloocy.constants import ANY_SOURCE, ANY_TAG, UNDEFINED
from gloocy.errors import (ERR_ACCESS, ERR_IO, ERR_READ_ONLY,
                           ERR_UNSUPPORTED_OPERATION, GloocyError)
from gloocy.mpiio.view import View

__all__ = ["DataAccess", "writable", "readable", "not_sequential"]

MODE_RDONLY, MODE_WRONLY, MODE_SEQUENTIAL = 2, 4, 256     # (gloocy.mpiio's)
_SPAN_SLACK = 1 << 20     # read a span with up to this many unused bytes at once
# Bytes per system call at most (Linux moves < 2 GiB a call anyway); tests
# set a tiny one to run the loops.
_CHUNK = max(1, int(os.environ.get("GLOOCY_IO_CHUNK_BYTES", 1 << 30)))


def writable(f, what):
    if f.amode & MODE_RDONLY:
        raise GloocyError(f"File.{what}: the file is open read-only", ERR_READ_ONLY)


def readable(f, what):
    if f.amode & MODE_WRONLY:
        raise GloocyError(f"File.{what}: the file is open write-only", ERR_ACCESS)


def not_sequential(f, what):
    if f.amode & MODE_SEQUENTIAL:
        raise GloocyError(f"File.{what}: not with MODE_SEQUENTIAL (only the "
                          "shared file pointer)", ERR_UNSUPPORTED_OPERATION)


def _fill(status, nbytes):
    if status is not None:
        status._set(ANY_SOURCE, ANY_TAG, nbytes)
        status.Set_error(0)


@contextlib.contextmanager
def _atomic(f, offs, lens, write):
    """In atomic mode, a POSIX lock on the bytes the access spans."""
    if not f.atomic or not offs.size:
        yield
        return
    first, end = int(offs[0]), int(offs[-1] + lens[-1])
    fcntl.lockf(f.fd, fcntl.LOCK_EX if write else fcntl.LOCK_SH, end - first, first)
    try:
        yield
    finally:
        fcntl.lockf(f.fd, fcntl.LOCK_UN, end - first, first)


def _pwrite_all(fd, view, offset):
    """Write all of `view` at `offset`, at most _CHUNK bytes a call."""
    done = 0
    while done < len(view):         # pwrite may write less than asked
        done += os.pwrite(fd, view[done:done + _CHUNK], offset + done)


def _pread_all(fd, buf, offset):
    """Fill `buf` (a uint8 array) from `offset`, at most _CHUNK bytes a
    call; the bytes read (fewer at the end of the file)."""
    done = 0
    while done < buf.size:
        got = os.preadv(fd, [buf[done:done + _CHUNK]], offset + done)
        if got == 0:
            break
        done += got
    return done


def _write(f, offs, lens, raw):
    """Write the bytes `raw` to the segments; the bytes written."""
    view = memoryview(raw)
    pos = 0
    for off, n in zip(offs.tolist(), lens.tolist()):
        _pwrite_all(f.fd, view[pos:pos + n], off)
        pos += n
    return pos


def _read(f, offs, lens, raw):
    """Read the segments into `raw` (uint8); the bytes read (fewer at the
    end of the file)."""
    if offs.size > 8:
        first, end = int(offs[0]), int(offs[-1] + lens[-1])
        if end - first <= 2 * raw.size + _SPAN_SLACK:
            return _read_span(f, offs, lens, raw, first, end)
    pos = 0
    for off, n in zip(offs.tolist(), lens.tolist()):
        got = _pread_all(f.fd, raw[pos:pos + n], off)
        pos += got
        if got < n:
            break                   # the end of the file
    return pos


def _read_span(f, offs, lens, raw, first, end):
    """Read bytes [first, end) at once, then pick the segments' bytes."""
    span = np.empty(end - first, np.uint8)
    got = _pread_all(f.fd, span, first)
    # where each data byte is in the span: its segment's start, plus its
    # place in the segment
    data_starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
    where = np.arange(raw.size, dtype=np.int64) + np.repeat(
        offs - first - data_starts, lens)
    done = int(np.searchsorted(where, got))      # increasing: bytes before EOF
    raw[:done] = span[where[:done]]
    return done


def _ordered_start(f, n):
    """Ordered access: this process's place (etypes) after those of the
    lower ranks; the shared pointer moves past everyone's. n None: this
    process's call failed before (it tells the others, then raises)."""
    comm = f.comm
    if comm.Get_size() == 1:
        return f.shared.fetch_add(n)
    counts = comm.allgather(n)
    failed = [r for r, c in enumerate(counts) if c is None]
    if failed:
        if n is None:
            return None
        raise GloocyError(f"ordered access: rank {failed[0]}'s call failed "
                          "(see its error)", ERR_IO)
    base = None
    if comm.Get_rank() == 0:
        try:
            base = f.shared.fetch_add(sum(counts))
        except Exception as e:      # said to all, so that nobody waits
            base = e
    base = comm.bcast(base, 0)
    if isinstance(base, Exception):
        raise GloocyError(f"ordered access: rank 0: {base}", ERR_IO)
    return base + sum(counts[:comm.Get_rank()])


class DataAccess:
    """The data access methods; the class using it provides
    ``_open(what)`` (the open file's state)."""

    __slots__ = ()

    def _move(self, what, write, buf, where, offset=None):
        """One transfer; the bytes moved."""
        f = self._open(what)
        try:
            (writable if write else readable)(f, what)
            if where in ("at", "own"):
                not_sequential(f, what)
            m = bufspec.message(buf, name="buf", readonly=write)
            view = f.view
            nbytes = file_view.stream_size(m.data)
            view.check_whole(nbytes)
            n = nbytes // view.esize
        except Exception:
            if where == "ordered":  # the others are not left waiting
                _ordered_start(f, None)
            raise
        if where == "at":
            start = View.check_offset(offset)
        elif where == "own":
            start = f.position
        elif where == "shared":
            start = f.shared.fetch_add(n)
        else:
            start = _ordered_start(f, n)
        offs, lens = view.segments(start * view.esize, nbytes)
        try:
            with _atomic(f, offs, lens, write):
                if write:
                    done = _write(f, offs, lens, file_view.to_file(
                        m.data, m.datatype, view.datarep))
                else:
                    done = _read_into(f, offs, lens, m, view.datarep, nbytes)
        except OSError as e:
            raise f.io_error(e, f"File.{what}") from None
        if where == "own":      # past what was accessed (a read: up to the end)
            f.position = start + -(-done // view.esize)
        return done

    def _begin(self, what, write, buf, where, offset=None):
        f = self._open(what)
        if f.split is not None:
            raise GloocyError(f"File.{what}: a split collective ({f.split[0]}) "
                              "is still active on this file", ERR_IO)
        nbytes = self._move(what, write, buf, where, offset)
        f.split = (what.replace("_begin", ""), nbytes)

    def _end(self, what, status):
        f = self._open(what)
        name = what.replace("_end", "")
        if f.split is None or f.split[0] != name:
            raise GloocyError(f"File.{what}: no {name}_begin to end", ERR_IO)
        _fill(status, f.split[1])
        f.split = None


def _read_into(f, offs, lens, m, datarep, nbytes):
    data = m.data
    direct = (not file_view.converts(datarep) and data.flags.c_contiguous
              and file_view.packed_dtype(data.dtype) is data.dtype)
    raw = data.reshape(-1).view(np.uint8) if direct else np.empty(nbytes, np.uint8)
    got = _read(f, offs, lens, raw)
    if not direct:
        file_view.from_file(raw[:got], data, m.datatype, datarep)
    whole = got // file_view.packed_dtype(data.dtype).itemsize
    m.unpack(whole * data.dtype.itemsize)
    return got


# -- the methods, made from _move --------------------------------------------------

def _method(name, write, where, kind):
    """File.<name>: kind "" (blocking), "I" (nonblocking), "begin" or "end"."""
    what = "written" if write else "read"
    place = {"at": "at explicit offset `offset` (etypes of the view)",
             "own": "at the individual file pointer",
             "shared": "at the shared file pointer",
             "ordered": "at the shared file pointer, in rank order"}[where]
    if kind == "end":
        def method(self, buf, status=None):
            self._end(name, status)
    elif where == "at":
        if kind == "begin":
            def method(self, offset, buf):
                self._begin(name, write, buf, where, offset)
        elif kind == "I":
            def method(self, offset, buf):
                return _done(self._move(name, write, buf, where, offset))
        else:
            def method(self, offset, buf, status=None):
                _fill(status, self._move(name, write, buf, where, offset))
    else:
        if kind == "begin":
            def method(self, buf):
                self._begin(name, write, buf, where)
        elif kind == "I":
            def method(self, buf):
                return _done(self._move(name, write, buf, where))
        else:
            def method(self, buf, status=None):
                _fill(status, self._move(name, write, buf, where))
    method.__name__ = method.__qualname__ = name
    method.__doc__ = {"end": f"Complete the split collective: its Status.",
                      "begin": f"Start a split collective: data {what} {place}.",
                      "I": f"Data {what} {place}; the Request is complete.",
                      "": f"Data {what} {place}."}[kind]
    setattr(DataAccess, name, method)


def _done(nbytes):
    """A complete request; its Status has MPICH's UNDEFINED source and tag."""
    from gloocy.requests import done_request
    return done_request(UNDEFINED, UNDEFINED, nbytes, None)


for _io, _write_it in (("Read", False), ("Write", True)):
    for _suffix, _where in (("_at", "at"), ("", "own"), ("_shared", "shared")):
        _method(f"{_io}{_suffix}", _write_it, _where, "")
        _method(f"I{_io.lower()}{_suffix}", _write_it, _where, "I")
    for _suffix, _where in (("_at_all", "at"), ("_all", "own"), ("_ordered", "ordered")):
        _method(f"{_io}{_suffix}", _write_it, _where, "")
        if _where != "ordered":
            _method(f"I{_io.lower()}{_suffix}", _write_it, _where, "I")
        _method(f"{_io}{_suffix}_begin", _write_it, _where, "begin")
        _method(f"{_io}{_suffix}_end", _write_it, _where, "end")
