"""mpi4py's names over gloocy: ``from gloocy import MPI`` runs mpi4py
collective and point-to-point code unchanged, with no MPI library.

Importing it joins the job, as importing mpi4py initializes MPI: the ranks
started by ``gloocy-run -n N`` (or torchrun, srun... see gloocy.init) find
each other; a plain ``python prog.py`` is a world of one.
"""

import os
import socket
import sys
import threading
import time

import gloocy as _gloocy
from gloocy import _core, bufspec as _bufspec, errors as _errors, ops as _ops
from gloocy import handles as _handles
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
from gloocy.datatypes import typealign as _typealign  # noqa: F401
from gloocy.datatypes import typecode as _typecode  # noqa: F401
from gloocy.errors import GloocyError as Exception  # noqa: A001
from gloocy.info import INFO_ENV, INFO_NULL, Info  # noqa: F401
from gloocy.errhandler import (ERRHANDLER_NULL, ERRORS_ABORT,  # noqa: F401
                               ERRORS_ARE_FATAL, ERRORS_RETURN, Errhandler)
from gloocy.groups import (CONGRUENT, GROUP_EMPTY, GROUP_NULL, IDENT,  # noqa: F401
                           SIMILAR, UNDEFINED, UNEQUAL, Group)
from gloocy.ops import (BAND, BOR, BXOR, LAND, LOR, LXOR, MAX, MAXLOC,  # noqa: F401
                        MIN, MINLOC, NO_OP, OP_NULL, PROD, REPLACE, SUM, Op)
from gloocy.requests import (REQUEST_NULL, Grequest, Prequest, Request,  # noqa: F401
                             Testall, Testany, Testsome, Waitall, Waitany,
                             Waitsome)

# SUCCESS and the error classes, ERR_*
globals().update({k: v for k, v in vars(_errors).items()
                  if k == "SUCCESS" or k.startswith("ERR_")})

MPIException = Exception


# Attribute keys for Comm.Get_attr (MPICH's); Get_attr gives None for
# those gloocy has no value for.
WTIME_IS_GLOBAL, HOST, IO = 1681915911, 1681915907, 1681915909
APPNUM, UNIVERSE_SIZE = 1681915917, 1681915913     # MPICH's keys; no value here (None)
from gloocy.constants import LASTUSEDCODE  # noqa: E402,F401
from gloocy import message as _message  # noqa: E402
from gloocy.message import (BSEND_OVERHEAD, BUFFER_AUTOMATIC,  # noqa: E402,F401
                            MESSAGE_NO_PROC, MESSAGE_NULL, BufferAutomaticType,
                            Message)
from gloocy.requests import CollectiveRequest as _CollectiveRequest  # noqa: E402
MAX_PROCESSOR_NAME = 128
MAX_ERROR_STRING = 512
THREAD_SINGLE, THREAD_FUNNELED, THREAD_SERIALIZED, THREAD_MULTIPLE = 0, 1, 2, 3
VERSION, SUBVERSION = 4, 1


# -- one-sided communication: windows (gloocy.rma) ----------------------------
from gloocy.rma.constants import (LOCK_EXCLUSIVE, LOCK_SHARED,  # noqa: E402,F401
                                  MODE_NOCHECK, MODE_NOPRECEDE, MODE_NOPUT,
                                  MODE_NOSTORE, MODE_NOSUCCEED, WIN_BASE,
                                  WIN_CREATE_FLAVOR, WIN_DISP_UNIT, WIN_FLAVOR,
                                  WIN_FLAVOR_ALLOCATE, WIN_FLAVOR_CREATE,
                                  WIN_FLAVOR_DYNAMIC, WIN_FLAVOR_SHARED,
                                  WIN_MODEL, WIN_SEPARATE, WIN_SIZE, WIN_UNIFIED)
# -- MPI-IO (gloocy.mpiio) ---------------------------------------------------
# Windows and files are loaded on first use (__getattr__ below): most
# programs use neither, and they are a sixth of this module's import.
# So are ports and names (gloocy.dynamic) and address arithmetic
# (gloocy.packing): every rank of a job pays for its imports at start-up.
# name -> module, or (module, its name there)
_ON_FIRST_USE = {"Win": "gloocy.rma", "WIN_NULL": "gloocy.rma",
                 "File": "gloocy.mpiio", "FILE_NULL": "gloocy.mpiio",
                 "Register_datarep": "gloocy.mpiio",
                 "Open_port": ("gloocy.dynamic", "open_port"),
                 "Close_port": ("gloocy.dynamic", "close_port"),
                 "Publish_name": ("gloocy.dynamic", "publish_name"),
                 "Unpublish_name": ("gloocy.dynamic", "unpublish_name"),
                 "Lookup_name": ("gloocy.dynamic", "lookup_name"),
                 "Aint_add": ("gloocy.packing", "aint_add"),
                 "Aint_diff": ("gloocy.packing", "aint_diff"),
                 "Get_address": ("gloocy.packing", "get_address")}


def __getattr__(name):
    where = _ON_FIRST_USE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    module, attr = where if isinstance(where, tuple) else (where, name)
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_ON_FIRST_USE))


from gloocy.session import SESSION_NULL, Session  # noqa: E402,F401
# MPI-IO's access modes (MPICH's numbers), for code that names them.
MODE_CREATE, MODE_RDONLY, MODE_WRONLY, MODE_RDWR = 1, 2, 4, 8
MODE_DELETE_ON_CLOSE, MODE_UNIQUE_OPEN, MODE_EXCL, MODE_APPEND = 16, 32, 64, 128
MODE_SEQUENTIAL = 256
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
# Importing MPI joins the job unless the program said not to, as with
# mpi4py: `from mpi4py import rc; rc.initialize = False` before the import
# (through a package named mpi4py whose MPI is this module) or
# MPI4PY_RC_INITIALIZE=false. Then COMM_WORLD and COMM_SELF are null until
# Init() or Init_thread() makes them the world and this process. (Of rc's
# other options gloocy needs none: it always has every thread level, and
# raises exceptions.)

# mpi4py.rc's options, their defaults and the values each accepts
# (None: any int >= 0)
_RC_OPTIONS = {
    "initialize": (True, (True, False, "yes", "no")),
    "threads": (True, (True, False, "yes", "no")),
    "thread_level": ("multiple", ("single", "funneled", "serialized",
                                  "multiple")),
    "finalize": (None, (None, True, False, "yes", "no")),
    "fast_reduce": (True, (True, False, "yes", "no")),
    "recv_mprobe": (True, (True, False, "yes", "no")),
    "irecv_bufsz": (32768, None),
    "errors": ("exception", ("default", "exception", "abort", "fatal")),
}
_TRUE_WORDS, _FALSE_WORDS = ("true", "yes", "on", "y", "1"), \
    ("false", "no", "off", "n", "0")


def _rc_from_environ(text, default):
    """An MPI4PY_RC_* value: a count for int options, else a boolean word
    as a bool, else the lower-cased word."""
    text = text.strip()
    if type(default) is int and text.isdigit():
        return int(text)
    word = text.lower()
    if word in _TRUE_WORDS or word in _FALSE_WORDS:
        return word in _TRUE_WORDS
    return word


def _rc_options():
    """{option: value} of mpi4py's rc (a program's `from mpi4py import rc`,
    through a package named mpi4py whose MPI is this module), each
    MPI4PY_RC_<OPTION> variable overriding it and written back into rc, as
    mpi4py does on import; an unexpected value warns and gives the default."""
    rc = sys.modules.get("mpi4py.rc")
    options = {}
    for name, (default, accepted) in _RC_OPTIONS.items():
        text = os.environ.get(f"MPI4PY_RC_{name.upper()}")
        if text is not None:
            value = _rc_from_environ(text, default)
            try:
                setattr(rc, name, value)
            except AttributeError:      # no rc, or a read-only one
                pass
        else:
            value = getattr(rc, name, default)
        if (type(value) is int and value >= 0 if accepted is None
                else value in accepted):
            options[name] = value
        else:
            import warnings
            warnings.warn(f"mpi4py.rc.{name}: unexpected value {value!r}",
                          RuntimeWarning, stacklevel=3)
            options[name] = default
    return options


def _world_attributes():
    """COMM_WORLD's APPNUM: the command's index in a Spawn_multiple, 0 in a
    launched job, none for a singleton (as MPICH); UNIVERSE_SIZE: none."""
    from gloocy.rendezvous.env import detect
    appnum = os.environ.get("GLOOCY_APPNUM")
    if appnum is not None and appnum.isdigit():
        return {APPNUM: int(appnum)}
    return {APPNUM: 0} if detect().source != "none" else {}


COMM_WORLD = Intracomm()            # the world (null until initialized)
COMM_SELF = Intracomm()             # this process alone (likewise)
_state = {"initialized": False, "finalized": False}


def _join():
    """Join the job: COMM_WORLD and COMM_SELF become live."""
    Intracomm.__init__(COMM_WORLD, _gloocy.init())  # a second handle
    _gloocy._world = COMM_WORLD                # what gloocy.init() returns from now
    COMM_WORLD._predefine("COMM_WORLD")
    COMM_WORLD._errhandler = ERRORS_RETURN      # mpi4py's: errors raise
    Intracomm.__init__(COMM_SELF, _core.Context(0, 1, [None]),
                       procs=[COMM_WORLD.rank])
    COMM_SELF._predefine("COMM_SELF")
    COMM_SELF._errhandler = ERRORS_RETURN
    _state["initialized"] = True
    _communicator.WORLD_ATTRS.update(_world_attributes())
    if "GLOOCY_PARENT_PORT" in os.environ:     # (gloocy.dynamic.ENV_PARENT)
        from gloocy import dynamic      # a spawned process meets its parents
        dynamic.join_parent(COMM_WORLD)


if _rc_options()["initialize"] in (True, "yes"):
    _join()


def Init():
    """Join the job when the import did not (rc.initialize False); a second
    Init is an error, as in MPI."""
    if _state["initialized"]:
        raise Exception("MPI is already initialized", ERR_OTHER)
    _join()


def Init_thread(required=THREAD_MULTIPLE):
    """Init; the thread level provided (every level: THREAD_MULTIPLE)."""
    Init()
    return THREAD_MULTIPLE


def Query_thread():
    return THREAD_MULTIPLE


def Is_thread_main():
    import threading
    return threading.current_thread() is threading.main_thread()


def Is_initialized():
    return _state["initialized"]


def Is_finalized():
    return _state["finalized"]


def Finalize():
    """Leave the job: the world's connections close."""
    if not _state["initialized"]:
        raise Exception("Finalize: MPI is not initialized", ERR_OTHER)
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


from gloocy.memory import buffer, memory  # noqa: E402,F401


def Alloc_mem(size, info=None):
    return buffer.allocate(size)


def Free_mem(mem):
    """Release memory from Alloc_mem (the view is empty afterwards)."""
    mem.release()




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


_comm_locks_lock = threading.Lock()


# -- a communicator's private context for multi-message calls ----------------
# (mpi4py's _commctx_intra/_commctx_inter, which its util.pkl5 uses): a
# duplicate made once per communicator (kept as an attribute, so every handle
# on it shares it, freed with it) and a new tag per call, the same on every
# rank since collectives are called in the same order everywhere.

def _commctx_free(comm, keyval, ctx):
    ctx[0].Free()                 # (an intercommunicator's local one with it)


_COMMCTX = Comm.Create_keyval(delete_fn=_commctx_free)


def _commctx(comm):
    with _comm_lock(comm, "commctx"):
        ctx = comm.Get_attr(_COMMCTX)
        if ctx is None:
            dup = comm.Dup()
            local = dup._lcomm if isinstance(dup, Intercomm) else None
            ctx = [dup, 0, local]
            comm.Set_attr(_COMMCTX, ctx)
        tag = ctx[1]
        ctx[1] = (tag + 1) % (2**31 - 1)
        return ctx[0], tag, ctx[2]


def _commctx_intra(comm):
    """(a duplicate of comm, a tag for this call)."""
    if not isinstance(comm, Intracomm):
        raise TypeError(f"expected an Intracomm, got {comm!r}")
    dup, tag, _ = _commctx(comm)
    return dup, tag


def _commctx_inter(comm):
    """(a duplicate of comm, a tag for this call, an intracommunicator over
    the local group, whether the local group is the low one)."""
    if not isinstance(comm, Intercomm):
        raise TypeError(f"expected an Intercomm, got {comm!r}")
    dup, tag, local = _commctx(comm)
    return dup, tag, local, bool(dup._first)


def _comm_lock(comm, key=None):
    """A lock of `comm`'s own, one per key (mpi4py's helper for its util
    modules: one thread at a time in a communicator's multi-step calls)."""
    table = _comm_lock_table(comm)
    with _comm_locks_lock:
        lock = table.get(key)
        if lock is None:
            lock = table[key] = threading.Lock()
    return lock


# -- error classes, codes and strings (gloocy.errors) -------------------------

def Get_error_class(errorcode):
    return _errors.error_class_of(errorcode)


def Get_error_string(errorcode):
    return _errors.error_string(errorcode)


Add_error_class = _errors.add_error_class
Add_error_code = _errors.add_error_code
Add_error_string = _errors.add_error_string
Remove_error_class = _errors.remove_error_class
Remove_error_code = _errors.remove_error_code
Remove_error_string = _errors.remove_error_string


# -- mpi4py's object model: sizes and handles of objects --

def _handle_classes():
    return (Comm, Datatype, Request, Message, Op, Group, Info, Errhandler,
            Session, __getattr__("Win"), __getattr__("File"))


def _sizeof(obj):
    """Bytes of the MPI object a handle class (or one of its objects)
    stands for: a handle's, or a Status's fields."""
    cls = obj if isinstance(obj, type) else type(obj)
    if issubclass(cls, Status):
        return 24                 # its fields: six C ints (Status.tomemory)
    if issubclass(cls, _handle_classes()):
        return _handles.HANDLE_SIZE
    raise TypeError(f"expecting an MPI type or instance, got {obj!r}")


def _addressof(obj):
    """A non-zero address standing for the object's handle."""
    if not isinstance(obj, (Status,) + _handle_classes()):
        raise TypeError(f"expecting an MPI instance, got {obj!r}")
    return id(obj)


def _handleof(obj):
    """The object's integer handle (a Status: its address)."""
    if isinstance(obj, Status):
        return id(obj)
    if not isinstance(obj, _handle_classes()):
        raise TypeError(f"expecting an MPI instance, got {obj!r}")
    return obj.handle


def Aint_add(base, disp):
    return base + disp


def Aint_diff(addr1, addr2):
    return addr1 - addr2


def Get_hw_resource_info():
    """Hints on this process's hardware: none known here (an empty Info, as
    MPICH gives)."""
    return Info.Create()


# -- dynamic processes: ports and names (gloocy.dynamic, loaded on first use:
# see _ON_FIRST_USE; Spawn: gloocy.spawn) --


# MPICH's numbers for names gloocy has no use for, so that code naming them runs
DISPLACEMENT_CURRENT = DISP_CUR = -54278278
F_SOURCE, F_TAG, F_ERROR, F_STATUS_SIZE = 2, 3, 4, 5
MAX_PORT_NAME, MAX_INFO_KEY, MAX_INFO_VAL, MAX_OBJECT_NAME = 1024, 255, 1024, 128
MAX_DATAREP_STRING, MAX_LIBRARY_VERSION_STRING = 128, 8192
MAX_PSET_NAME_LEN = MAX_STRINGTAG_LEN = 256


def Wtime():
    return time.perf_counter()


def Wtick():
    return time.get_clock_info("perf_counter").resolution


# `from gloocy.MPI import *` brings what mpi4py's does, windows and files too
__all__ = sorted({n for n in globals() if not n.startswith("_")} | set(_ON_FIRST_USE))
