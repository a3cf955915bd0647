"""MPI-IO over the POSIX file system: mpi4py's ``MPI.File``.

``File.Open(comm, filename, amode)`` opens one file for the processes of an
intracommunicator (collectively: rank 0 creates it, the others open it
once it exists; an error on any rank is an error on all). Every process
reads and writes with ``os.preadv``/``os.pwrite`` (the GIL released), through
its file view (gloocy.mpiio.view) and at one of three positions: explicit
offsets (``*_at``), its individual file pointer (``Read``, ``Write``,
``Seek``) or the shared file pointer (``*_shared``, ``*_ordered``;
gloocy.mpiio.pointer). Collective forms (``*_all``, split ``*_begin``/
``*_end``) are the independent ones; ordered ones take their places in rank
order. Nonblocking forms run at once and return a complete request.

Errors are ``MPI.Exception`` with MPI's I/O error classes (ERR_NO_SUCH_FILE,
ERR_FILE_EXISTS, ERR_AMODE, ERR_ACCESS, ERR_READ_ONLY...). As for the
communicators, gloocy raises them whatever the file's error handler;
``Call_errhandler`` runs it. A new file gets FILE_NULL's handler
(ERRORS_RETURN unless set otherwise), as in MPI.
"""

import errno
import os
import secrets
import weakref

from gloocy import errhandler as _errhandlers, handles as _handles
from gloocy.datatypes import BYTE
from gloocy.errors import (ERR_ACCESS, ERR_AMODE, ERR_ARG, ERR_BAD_FILE,
                           ERR_COMM, ERR_FILE, ERR_FILE_EXISTS, ERR_IO,
                           ERR_NO_SPACE, ERR_NO_SUCH_FILE, ERR_QUOTA,
                           ERR_READ_ONLY, GloocyError)
from gloocy.mpiio import view as file_view, pointer as file_pointer
from gloocy.mpiio.access import (MODE_RDONLY, MODE_SEQUENTIAL, MODE_WRONLY,
                                DataAccess, not_sequential, writable)
from gloocy.mpiio.view import View
from gloocy.info import Info

__all__ = ["File", "FILE_NULL", "Register_datarep", "MODE_RDONLY", "MODE_WRONLY",
           "MODE_RDWR", "MODE_CREATE", "MODE_EXCL", "MODE_DELETE_ON_CLOSE",
           "MODE_UNIQUE_OPEN", "MODE_SEQUENTIAL", "MODE_APPEND", "SEEK_SET",
           "SEEK_CUR", "SEEK_END", "DISPLACEMENT_CURRENT"]

# MPICH's numbers (the ones the data access checks are file_access's)
MODE_CREATE, MODE_RDWR = 1, 8
MODE_DELETE_ON_CLOSE, MODE_UNIQUE_OPEN, MODE_EXCL, MODE_APPEND = 16, 32, 64, 128
SEEK_SET, SEEK_CUR, SEEK_END = 600, 602, 604
DISPLACEMENT_CURRENT = -54278278

_ERRNO_CLASSES = {errno.ENOENT: ERR_NO_SUCH_FILE, errno.ENOTDIR: ERR_NO_SUCH_FILE,
                  errno.EEXIST: ERR_FILE_EXISTS, errno.EACCES: ERR_ACCESS,
                  errno.EPERM: ERR_ACCESS, errno.EROFS: ERR_READ_ONLY,
                  errno.ENOSPC: ERR_NO_SPACE, errno.EDQUOT: ERR_QUOTA,
                  errno.EISDIR: ERR_BAD_FILE, errno.ENAMETOOLONG: ERR_BAD_FILE,
                  errno.EINVAL: ERR_ARG}

# What FILE_NULL's error handler is: the one new files get.
_default_errhandler = [_errhandlers.ERRORS_RETURN]


def _os_error(e, what):
    """An OSError as the MPI.Exception of its I/O error class."""
    return GloocyError(f"{what}: {e.strerror or e}", _ERRNO_CLASSES.get(e.errno, ERR_IO))


def _fs_path(filename):
    if not isinstance(filename, (str, bytes, os.PathLike)):
        raise TypeError(f"filename: expected a str, bytes or path, got {filename!r}")
    return os.fsdecode(os.fspath(filename))


def _check_amode(amode):
    amode = int(amode)
    access = [m for m in (MODE_RDONLY, MODE_WRONLY, MODE_RDWR) if amode & m]
    if len(access) != 1:
        raise GloocyError(f"amode: {amode} must have exactly one of MODE_RDONLY, "
                          "MODE_WRONLY and MODE_RDWR", ERR_AMODE)
    if amode & MODE_RDONLY and amode & (MODE_CREATE | MODE_EXCL):
        raise GloocyError("amode: MODE_RDONLY cannot go with MODE_CREATE or "
                          "MODE_EXCL", ERR_AMODE)
    if amode & MODE_RDWR and amode & MODE_SEQUENTIAL:
        raise GloocyError("amode: MODE_SEQUENTIAL cannot go with MODE_RDWR",
                          ERR_AMODE)
    return amode


def _os_flags(amode, create):
    flags = {MODE_RDONLY: os.O_RDONLY, MODE_WRONLY: os.O_WRONLY,
             MODE_RDWR: os.O_RDWR}[amode & (MODE_RDONLY | MODE_WRONLY | MODE_RDWR)]
    if create and amode & MODE_CREATE:      # (EXCL alone creates nothing)
        flags |= os.O_CREAT | (os.O_EXCL if amode & MODE_EXCL else 0)
    return flags | os.O_CLOEXEC


def _try_open(path, amode, create):
    """(fd, None) or (-1, (message, error class))."""
    try:
        return os.open(path, _os_flags(amode, create), 0o666), None
    except OSError as e:
        err = _os_error(e, f"File.Open: {path}")
        return -1, (str(err), err.Get_error_class())


class _OpenFile:
    """What every handle on one open file shares."""

    __slots__ = ("comm", "fd", "path", "amode", "info", "atomic", "errhandler",
                 "view", "position", "shared", "split", "finalizer", "__weakref__")

    def io_error(self, e, what):
        return _os_error(e, f"{what} ({self.path})")


class File(DataAccess, _handles.Handled):
    """An MPI file (File.Open); File() and FILE_NULL are the null file.
    ``File(other)`` is a second handle on other's file."""

    __slots__ = ("_f", "__weakref__")

    def __new__(cls, file=None):
        if file is not None and not isinstance(file, File):
            raise TypeError(f"expected a File, got {file!r}")
        self = object.__new__(cls)
        self._f = None if file is None else file._f
        return self

    # -- mpi4py's object model ----------------------------------------------------

    def __reduce__(self):
        if self._f is not None:
            raise ValueError(f"cannot pickle {self!r}: an open file")
        return "FILE_NULL" if self is FILE_NULL else (type(self), (FILE_NULL,))

    def __repr__(self):
        return (f"<File {self._f.path!r}>" if self._f is not None
                else "<File FILE_NULL>")

    def _key(self):
        return None if self._f is None else ("File", id(self._f))

    def free(self):
        """Close the file, if this handle is not the null one."""
        if self._f is not None:
            self.Close()

    def _open(self, what):
        f = self._f
        if f is None or f.fd < 0:
            raise GloocyError(f"File.{what}: " + ("FILE_NULL" if f is None
                              else "the file is closed"), ERR_FILE)
        return f

    # -- opening and closing ------------------------------------------------------

    @classmethod
    def Open(cls, comm, filename, amode=MODE_RDONLY, info=None):
        """Open `filename` for every process of `comm` (collective)."""
        from gloocy.communicator import Intracomm
        if not isinstance(comm, Intracomm):
            raise TypeError(f"comm: expected an Intracomm, got {comm!r}")
        if not comm:
            raise GloocyError("File.Open: comm is COMM_NULL", ERR_COMM)
        path = _fs_path(filename)
        amode = _check_amode(amode)
        if info is not None and not isinstance(info, Info):
            raise TypeError(f"info: expected an Info, got {info!r}")
        comm = comm.Dup()
        try:
            f = _open_collectively(comm, path, amode)
        except BaseException:
            comm.Free()
            raise
        f.info = dict(info.items()) if info else {}
        self = object.__new__(cls)
        self._f = f
        return self

    def Close(self):
        """Close the file (collective); this handle becomes FILE_NULL."""
        f = self._open("Close")
        comm = f.comm
        comm.Barrier()                    # everyone is done with the file
        leader = comm.Get_rank() == 0
        f.finalizer.detach()
        try:
            os.close(f.fd)
        finally:
            f.fd = -1
            f.shared.remove()
            if leader:
                if isinstance(f.shared, file_pointer.SidePointer):
                    f.shared.remove_file()
                if f.amode & MODE_DELETE_ON_CLOSE:
                    try:
                        os.unlink(f.path)
                    except FileNotFoundError:
                        pass
            _free_view_types(f.view)
            _handles.forget(("File", id(f)))
            self._f = None
            comm.Free()

    @classmethod
    def Delete(cls, filename, info=None):
        """Delete a file."""
        path = _fs_path(filename)
        try:
            os.unlink(path)
        except OSError as e:
            raise _os_error(e, f"File.Delete: {path}") from None

    # -- the file's properties ----------------------------------------------------

    def Get_size(self):
        f = self._open("Get_size")
        try:
            return os.fstat(f.fd).st_size
        except OSError as e:
            raise f.io_error(e, "Get_size") from None

    def Set_size(self, size):
        """Truncate or extend the file to `size` bytes (collective)."""
        f = self._open("Set_size")
        size = View.check_offset(size, "size")
        writable(f, "Set_size")
        not_sequential(f, "Set_size")
        self._by_leader(f, "Set_size", lambda: os.ftruncate(f.fd, size))

    def Preallocate(self, size):
        """Make the file at least `size` bytes long, its blocks allocated
        (collective)."""
        f = self._open("Preallocate")
        size = View.check_offset(size, "size")
        writable(f, "Preallocate")

        def allocate():
            if size > os.fstat(f.fd).st_size:
                try:
                    os.posix_fallocate(f.fd, 0, size)
                except OSError as e:
                    if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    os.ftruncate(f.fd, size)
        self._by_leader(f, "Preallocate", allocate)

    def _by_leader(self, f, what, change):
        """Collective: rank 0 runs change(); everyone gets what it returned,
        or raises the error it raised."""
        outcome = None
        if f.comm.Get_rank() == 0:
            try:
                outcome = ("ok", change())
            except OSError as e:
                outcome = (str(f.io_error(e, what)), _ERRNO_CLASSES.get(e.errno, ERR_IO))
            except GloocyError as e:
                outcome = (str(e), e.Get_error_class())
        if f.comm.Get_size() > 1:
            outcome = f.comm.bcast(outcome, 0)
        if outcome[0] != "ok":
            raise GloocyError(*outcome)
        return outcome[1]

    def Get_amode(self):
        return self._open("Get_amode").amode

    def Get_group(self):
        return self._open("Get_group").comm.Get_group()

    def Get_info(self):
        return Info.Create(self._open("Get_info").info)

    def Set_info(self, info):
        f = self._open("Set_info")
        if not isinstance(info, Info):
            raise TypeError(f"info: expected an Info, got {info!r}")
        if info:
            f.info.update(info.items())

    def Sync(self):
        """Write what the system holds for the file to its storage."""
        f = self._open("Sync")
        try:
            os.fsync(f.fd)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EROFS, errno.EBADF):
                raise f.io_error(e, "Sync") from None

    def Set_atomicity(self, flag):
        """Atomic mode (collective): each access holds a POSIX lock on the
        bytes it spans, so concurrent accesses do not interleave."""
        self._open("Set_atomicity").atomic = bool(flag)

    def Get_atomicity(self):
        return self._open("Get_atomicity").atomic

    size = property(lambda self: self.Get_size(), doc="Size (bytes).")
    amode = property(lambda self: self.Get_amode(), doc="Access mode.")
    group = property(lambda self: self.Get_group(), doc="Group.")
    group_size = property(lambda self: self._open("group_size").comm.Get_size())
    group_rank = property(lambda self: self._open("group_rank").comm.Get_rank())
    info = property(lambda self: self.Get_info(),
                    lambda self, value: self.Set_info(value), doc="Hints.")
    atomicity = property(lambda self: self.Get_atomicity(),
                         lambda self, value: self.Set_atomicity(value))

    # -- views --------------------------------------------------------------------

    def Set_view(self, disp=0, etype=BYTE, filetype=None, datarep="native",
                 info=None):
        """The file as this process sees it from now (collective): from byte
        `disp`, copies of `filetype` made of `etype`s; both pointers go to 0."""
        f = self._open("Set_view")
        if datarep is None:
            datarep = "native"
        if (int(disp) == DISPLACEMENT_CURRENT) != bool(f.amode & MODE_SEQUENTIAL):
            raise GloocyError("disp: DISPLACEMENT_CURRENT goes with (and only "
                              "with) a file opened with MODE_SEQUENTIAL", ERR_ARG)
        if int(disp) == DISPLACEMENT_CURRENT:
            disp = f.view.byte_offset(f.shared.get() * f.view.esize)
        disp = View.check_offset(disp, "disp")
        view = View(disp, etype, etype if filetype is None else filetype,
                    str(datarep))
        view.etype, view.filetype = _kept(view.etype), _kept(view.filetype)
        old, f.view, f.position = f.view, view, 0
        _free_view_types(old)
        if info:
            f.info.update(info.items())
        self._set_shared(f, "Set_view", lambda: 0)

    def Get_view(self):
        """(disp, etype, filetype, datarep); derived types are new handles."""
        v = self._open("Get_view").view
        return v.disp, _kept(v.etype), _kept(v.filetype), v.datarep

    def Get_type_extent(self, datatype):
        return file_view.type_extent(datatype, self._open("Get_type_extent").view.datarep)

    def Get_byte_offset(self, offset):
        """The file byte where etype `offset` of the view is."""
        f = self._open("Get_byte_offset")
        not_sequential(f, "Get_byte_offset")
        v = f.view
        return v.byte_offset(View.check_offset(offset) * v.esize)

    # -- file pointers ------------------------------------------------------------

    def Seek(self, offset, whence=SEEK_SET):
        f = self._open("Seek")
        not_sequential(f, "Seek")
        f.position = _sought(self, f, f.position, offset, whence)

    def Get_position(self):
        f = self._open("Get_position")
        not_sequential(f, "Get_position")
        return f.position

    def Seek_shared(self, offset, whence=SEEK_SET):
        """Move the shared pointer (collective; every process passes the
        same arguments)."""
        f = self._open("Seek_shared")
        not_sequential(f, "Seek_shared")
        self._set_shared(f, "Seek_shared", lambda: _sought(
            self, f, f.shared.get() if whence == SEEK_CUR else 0, offset, whence))

    def Get_position_shared(self):
        f = self._open("Get_position_shared")
        not_sequential(f, "Get_position_shared")
        return f.shared.get()

    def _set_shared(self, f, what, compute):
        """Collective: the shared pointer goes to compute(), found by rank 0
        once every earlier shared access is done, and told to the others
        after it is in place (so that none reads the old one)."""
        if f.comm.Get_size() > 1:
            f.comm.Barrier()

        def place():
            value = compute()
            f.shared.reset(value, True)
            return value
        value = self._by_leader(f, what, place)
        if f.comm.Get_rank():
            f.shared.reset(value, False)

    # -- error handlers -----------------------------------------------------------

    @classmethod
    def Create_errhandler(cls, errhandler_fn):
        return _errhandlers.create(errhandler_fn)

    def Get_errhandler(self):
        handler = (_default_errhandler[0] if self._f is None
                   else self._open("Get_errhandler").errhandler)
        return _errhandlers.Errhandler(handler)

    def Set_errhandler(self, errhandler):
        handler = _errhandlers.checked(errhandler)
        if self._f is None:
            _default_errhandler[0] = handler
        else:
            self._open("Set_errhandler").errhandler = handler

    def Call_errhandler(self, errorcode):
        handler = (_default_errhandler[0] if self._f is None
                   else self._open("Call_errhandler").errhandler)
        _errhandlers.call(handler, self, errorcode)


def _open_collectively(comm, path, amode):
    """The _OpenFile of `path` on this process; rank 0 opens first (and
    creates), then the others; an error anywhere raises everywhere."""
    rank, size = comm.Get_rank(), comm.Get_size()
    fd, error, end, side = -1, None, 0, None
    if rank == 0:
        fd, error = _try_open(path, amode, create=True)
        if size > 1:
            side = file_pointer.side_path(path, secrets.token_hex(6))
        if fd >= 0 and amode & MODE_APPEND:
            end = os.fstat(fd).st_size
    if size > 1:
        error, end, side = comm.bcast((error, end, side), 0)
        if rank and error is None:
            fd, error = _try_open(path, amode, create=False)
        errors = comm.allgather(error)
        failed = [(r, e) for r, e in enumerate(errors) if e is not None]
        if failed:
            error = (f"rank {failed[0][0]}: {failed[0][1][0]}", failed[0][1][1])
    if error is not None:
        if fd >= 0:
            os.close(fd)
        raise GloocyError(*error)
    f = _OpenFile()
    f.comm, f.fd, f.path, f.amode = comm, fd, path, amode
    f.atomic, f.errhandler, f.split = False, _default_errhandler[0], None
    f.view = View(0, BYTE, BYTE, "native")
    f.position = end
    f.shared = (file_pointer.LocalPointer(end) if size == 1 else
                file_pointer.SidePointer(side, end))
    # a file dropped without Close (erroneous) at least gives its descriptors back
    f.finalizer = weakref.finalize(f, _close_quietly, fd, f.shared)
    return f


def _close_quietly(fd, shared):
    try:
        os.close(fd)
    except OSError:
        pass
    shared.remove()


def _kept(datatype):
    """The view's own handle on a datatype: predefined ones themselves,
    derived ones a duplicate (so the user may free theirs)."""
    return datatype if datatype.is_predefined else datatype.Dup().Commit()


def _free_view_types(view):
    for t in {id(view.etype): view.etype, id(view.filetype): view.filetype}.values():
        if not t.is_predefined and t:
            t.Free()


def _sought(file, f, current, offset, whence):
    """The position (etypes) Seek goes to."""
    offset = int(offset)
    if whence == SEEK_SET:
        new = offset
    elif whence == SEEK_CUR:
        new = current + offset
    elif whence == SEEK_END:
        data = f.view.data_before(file.Get_size())
        new = -(-data // f.view.esize) + offset
    else:
        raise GloocyError(f"whence: {whence} is not SEEK_SET, SEEK_CUR or SEEK_END",
                          ERR_ARG)
    if new < 0:
        raise GloocyError(f"Seek: the position would be {new} (negative)", ERR_ARG)
    return new


Register_datarep = file_view.register_datarep

FILE_NULL = File()
