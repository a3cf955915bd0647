"""mpi4py's names over gloocy: ``from gloocy import MPI`` runs mpi4py
collective and point-to-point code unchanged, with no MPI library.

Importing it joins the job, as importing mpi4py initializes MPI: the ranks
started by ``gloocy-run -n N`` (or torchrun, srun... see gloocy.init) find
each other; a plain ``python prog.py`` is a world of one.
"""

import ctypes
import socket
import threading
import time

import gloocy as _gloocy
from gloocy import _core, bufspec as _bufspec, errors as _errors, ops as _ops
from gloocy.communicator import COMM_NULL, Comm, Intercomm, Intracomm
from gloocy.communicator import Cartcomm, Distgraphcomm, Graphcomm, Topocomm  # noqa: F401
from gloocy.topology import (CART, DIST_GRAPH, GRAPH, UNWEIGHTED,  # noqa: F401
                             WEIGHTS_EMPTY, compute_dims as Compute_dims)
from gloocy.constants import (ANY_SOURCE, ANY_TAG, BOTTOM,  # noqa: F401
                              COMM_TYPE_HW_GUIDED, COMM_TYPE_HW_UNGUIDED,
                              COMM_TYPE_RESOURCE_GUIDED, COMM_TYPE_SHARED,
                              IN_PLACE, KEYVAL_INVALID, PROC_NULL, ROOT, TAG_UB)
from gloocy.status import Status
from gloocy.datatypes import *  # noqa: F401,F403  (every predefined Datatype)
from gloocy.datatypes import Datatype, _typedict, _typedict_c, _typedict_f  # noqa: F401
from gloocy.datatypes import typecode as _typecode  # noqa: F401
from gloocy.errors import GloocyError as Exception  # noqa: A001
from gloocy.info import INFO_ENV, INFO_NULL, Info  # noqa: F401
from gloocy.errhandler import (ERRHANDLER_NULL, ERRORS_ABORT,  # noqa: F401
                               ERRORS_ARE_FATAL, ERRORS_RETURN, Errhandler)
from gloocy.groups import (CONGRUENT, GROUP_EMPTY, GROUP_NULL, IDENT,  # noqa: F401
                           SIMILAR, UNDEFINED, UNEQUAL, Group)
from gloocy.ops import (BAND, BOR, BXOR, LAND, LOR, LXOR, MAX, MAXLOC,  # noqa: F401
                        MIN, MINLOC, NO_OP, OP_NULL, PROD, REPLACE, SUM, Op)
from gloocy.requests import (REQUEST_NULL, Prequest, Request, Testall,  # noqa: F401
                             Testany, Testsome, Waitall, Waitany, Waitsome)

# SUCCESS and the error classes, ERR_*
globals().update({k: v for k, v in vars(_errors).items()
                  if k == "SUCCESS" or k.startswith("ERR_")})

MPIException = Exception


# Attribute keys for Comm.Get_attr; those gloocy has no value for are
# KEYVAL_INVALID.
WTIME_IS_GLOBAL, HOST, IO = 1681915911, 1681915907, 1681915909
APPNUM = UNIVERSE_SIZE = LASTUSEDCODE = KEYVAL_INVALID
from gloocy import message as _message  # noqa: E402
from gloocy.message import (BSEND_OVERHEAD, BUFFER_AUTOMATIC,  # noqa: E402,F401
                            MESSAGE_NO_PROC, MESSAGE_NULL, BufferAutomaticType,
                            Message)
from gloocy.requests import CollectiveRequest as _CollectiveRequest  # noqa: E402
BUFFER_AUTOMATIC = None
MAX_PROCESSOR_NAME = 128
MAX_ERROR_STRING = 512
THREAD_SINGLE, THREAD_FUNNELED, THREAD_SERIALIZED, THREAD_MULTIPLE = 0, 1, 2, 3
VERSION, SUBVERSION = 3, 1


class Session:
    """MPI sessions are not supported."""

    @classmethod
    def Init(cls, *args, **kwargs):
        raise NotImplementedError("gloocy has no MPI sessions")


class Win:
    """One-sided communication is not supported: only the null window
    exists (WIN_NULL)."""

    @classmethod
    def Create(cls, *args, **kwargs):
        raise NotImplementedError("gloocy has no one-sided communication")

    Allocate = Allocate_shared = Create_dynamic = Create
    Create_keyval = Create

    def __bool__(self):
        return False


WIN_NULL = Win()


class File:
    """MPI-IO is not supported: only the null file exists (FILE_NULL)."""

    @classmethod
    def Open(cls, *args, **kwargs):
        raise NotImplementedError("gloocy has no MPI-IO (File)")

    Delete = Get_size = Open

    def __bool__(self):
        return False


FILE_NULL = File()
# MPI-IO's and one-sided access modes (MPICH's numbers), for code that names them.
MODE_CREATE, MODE_RDONLY, MODE_WRONLY, MODE_RDWR = 1, 2, 4, 8
MODE_DELETE_ON_CLOSE, MODE_UNIQUE_OPEN, MODE_EXCL, MODE_APPEND = 16, 32, 64, 128
MODE_SEQUENTIAL, MODE_NOCHECK, MODE_NOSTORE, MODE_NOPUT = 256, 1024, 2048, 4096
MODE_NOPRECEDE, MODE_NOSUCCEED = 8192, 16384
SEEK_SET, SEEK_CUR, SEEK_END = 600, 602, 604


# -- pickling: MPI.Pickle, MPI.pickle (gloocy.pickling) ----------------------
# The communicators' object calls and irecv read the settings of MPI.pickle
# through these hooks, called again whenever it changes.
from gloocy import communicator as _communicator  # noqa: E402
from gloocy import pickling as _pickling  # noqa: E402
from gloocy import requests as _requests  # noqa: E402
from gloocy.pickling import Pickle, pickle  # noqa: E402,F401
_pickling.on_change(_communicator._set_pickle)
_pickling.on_change(_requests._set_pickle)


# -- the world ---------------------------------------------------------------

COMM_WORLD = Intracomm(_gloocy.init())     # a second handle, as an Intracomm
_gloocy._world = COMM_WORLD                # what gloocy.init() returns from now
COMM_WORLD._predefine("COMM_WORLD")
COMM_WORLD._errhandler = ERRORS_RETURN      # mpi4py's: errors raise
COMM_SELF = Intracomm(_core.Context(0, 1, [None]), procs=[COMM_WORLD.rank])
COMM_SELF._predefine("COMM_SELF")
COMM_SELF._errhandler = ERRORS_RETURN

_state = {"finalized": False}


def Init():
    """MPI is initialized at import: as in MPI, a second Init is an error."""
    raise Exception("MPI is already initialized (at import)", ERR_OTHER)


def Init_thread(required=THREAD_MULTIPLE):
    Init()


def Query_thread():
    return THREAD_MULTIPLE


def Is_thread_main():
    import threading
    return threading.current_thread() is threading.main_thread()


def Is_initialized():
    return True


def Is_finalized():
    return _state["finalized"]


def Finalize():
    """Leave the job: the world's connections close."""
    if not _state["finalized"]:
        _state["finalized"] = True
        COMM_WORLD._leave()


def Get_version():
    return (VERSION, SUBVERSION)


def Get_library_version():
    return f"gloocy {_gloocy.__version__}"


def get_vendor():
    parts = [int(p) for p in _gloocy.__version__.split(".")[:3] if p.isdigit()]
    return ("gloocy", tuple((parts + [0, 0, 0])[:3]))


def Get_abi_version():
    return (-1, -1)


def Get_processor_name():
    return socket.gethostname()


def Pcontrol(level):
    """Profiling control: nothing to do."""


class buffer(bytearray):
    """Memory from Alloc_mem (a reduced mpi4py MPI.buffer): bytes with an
    address and a size."""

    @classmethod
    def allocate(cls, nbytes, clear=False):
        return cls(nbytes)

    @property
    def nbytes(self):
        return len(self)

    @property
    def address(self):
        return ctypes.addressof(ctypes.c_char.from_buffer(self)) if self else 0

    def cast(self, format, shape=None):
        view = memoryview(self)
        return view.cast(format) if shape is None else view.cast(format, shape)

    def tobytes(self, order=None):
        return bytes(self)


def Alloc_mem(size, info=None):
    return buffer.allocate(size)


def Free_mem(mem):
    """Nothing to do: the memory goes with its last reference."""


def Get_address(location):
    """The address of a buffer's first byte (displacements from BOTTOM)."""
    if location is BOTTOM:
        return 0
    return int(_bufspec._buffer(location, "location", True)[0].ctypes.data)


def Attach_buffer(buf):
    """The process's buffer for buffered sends (None or BUFFER_AUTOMATIC:
    no limit); a Bsend that does not fit it is an ERR_BUFFER error."""
    _message.PROCESS_BUFFER.attach(buf)


def Detach_buffer():
    """Wait for the buffered sends in flight; the buffer detached."""
    if not _message.PROCESS_BUFFER.attached:
        raise Exception("Detach_buffer: no buffer attached", ERR_BUFFER)
    return _message.PROCESS_BUFFER.detach()


def Flush_buffer():
    """Wait for the buffered sends in flight."""
    _message.PROCESS_BUFFER.flush()


def Iflush_buffer():
    Flush_buffer()
    return _CollectiveRequest._finished()


def _comm_lock_table(comm):
    return comm.__dict__.setdefault("_locks", {})


def Get_error_class(errorcode):
    return errorcode


def Get_error_string(errorcode):
    return _errors.error_string(errorcode)


def Wtime():
    return time.perf_counter()


def Wtick():
    return time.get_clock_info("perf_counter").resolution
