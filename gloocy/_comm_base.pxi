# The state every communicator has, its identity, attributes and
# lifetime: the root of the communicator classes, one file per role: this,
# _comm_p2p.pxi, _comm_collectives.pxi, then communicator.pyx (Comm: new
# communicators; Intracomm: what only one group has, the scans).

# COMM_WORLD, COMM_SELF, COMM_NULL by name (see _predefine)
cdef dict PREDEFINED = {}


# toint's handles: handle -> a communicator, id(its context) -> handle;
# forgotten when the communicator is freed.
cdef dict _HANDLES = {}
cdef dict _HANDLE_OF = {}
cdef long _LAST_HANDLE = 0


cdef dict _ALL_PROCS = {}         # size -> (0, ..., size - 1)


cdef tuple _all_procs(int size):
    """(0, ..., size - 1), one tuple per size for the process: the world
    communicators of thousands of rank threads share it (a tuple each was
    ~200 us and ~140 KiB a rank at 4,096)."""
    got = _ALL_PROCS.get(size)
    if got is None:
        if len(_ALL_PROCS) >= 16:
            _ALL_PROCS.clear()
        got = _ALL_PROCS[size] = tuple(range(size))
    return got


cdef inline bint _python_class(cls):
    """Whether cls is a Python class (a user's subclass), not one of ours."""
    return PyType_HasFeature(cls, Py_TPFLAGS_HEAPTYPE)


cdef object _native(cls):
    """The class of ours a user's subclass derives from."""
    return next(t for t in cls.__mro__ if not _python_class(t))


cdef class _CommBase:
    """What every communicator is: a core Context (or the null one), its
    processes, name, attributes, and how it ends."""

    cdef public object _ctx       # the core Context, or _NULL_CONTEXT
    cdef Context ctx              # the same, typed; None when null
    cdef public tuple _procs      # our ranks' processes, by world rank
    cdef public str _name
    cdef public bint _predefined  # COMM_WORLD, COMM_SELF: never freed
    cdef public object _errhandler
    cdef public object _info
    cdef public object _attrs     # Attributes (keyvals), made when first needed
    cdef dict _lock_table         # __dict__["_locks"] once made (_comm_lock)
    cdef dict __dict__            # users may hang attributes on a communicator
    cdef object __weakref__
    cdef object _new_args         # a Python subclass: (args, kwargs) of its __new__; True once bound

    def __cinit__(self, *args, **kwargs):
        # mpi4py's subclassing idiom, Sub.__new__(cls, comm) calling
        # Comm.__new__(cls, other): the handle is other's, whatever the
        # constructor was given (see _made_in_new)
        if _python_class(type(self)):
            self._new_args = (args, kwargs)

    cdef bint _made_in_new(self) except -1:
        """True when __init__ has nothing to do: a Python subclass's object,
        bound to what its __new__ named (done here, the first time)."""
        pending = self._new_args
        if pending is None:
            return False
        if pending is True:
            return True
        self._new_args = None
        _native(type(self)).__init__(self, *pending[0], **pending[1])
        self._new_args = True
        return True

    cdef object _new_like(self, tuple args, dict kwargs):
        """A new communicator of this one's class, made from `args`: a
        Python subclass's without calling its __new__ (which may expect
        another communicator), as mpi4py makes them."""
        cls = type(self)
        if not _python_class(cls):
            return cls(*args, **kwargs)
        native = _native(cls)
        # its C allocator straight (native.__new__(cls) may be refused as
        # "not safe" when cls mixes in other Python classes)
        cdef tuple no_args = ()
        cdef _CommBase new = (<PyTypeObject *>native).tp_new(
            cls, <PyObject *>no_args, NULL)
        new._new_args = (args, kwargs)
        new._made_in_new()
        return new

    def __init__(self, context=None, *, procs=None, name=""):
        """A communicator running on a core Context; with another
        Communicator, a second handle on it (equal to it); with nothing,
        a null one (equal to COMM_NULL)."""
        cdef _CommBase other
        if self._made_in_new():
            return
        if isinstance(context, _CommBase):
            other = context
            procs, name = other._procs, other._name
            self._attrs = other.attributes()      # shared, as the handle is
            context = other._ctx
        elif context is None:
            context, procs = _NULL_CONTEXT, ()
            name = name or "MPI_COMM_NULL"
        elif not isinstance(context, Context):
            raise TypeError(f"expected a communicator, got {context!r}")
        self._bind(context)
        self._procs = _all_procs(context.size) if procs is None else tuple(procs)
        self._name = name
        self._predefined = False
        self._errhandler = None
        self._info = None

    cdef attributes(self):
        if self._attrs is None:
            self._attrs = Attributes()
        return self._attrs

    cdef _bind(self, context):
        self._ctx = context
        self.ctx = context if isinstance(context, Context) else None

    cdef Context live(self):
        """The Context; ArgumentError (ERR_COMM) on a null communicator."""
        if self.ctx is None:
            _NULL_CONTEXT.rank
        return self.ctx

    # -- identity ----------------------------------------------------------

    @property
    def rank(self):
        """This process's rank, 0 <= rank < size."""
        return self.live().rank

    @property
    def size(self):
        """Number of ranks."""
        return self.live().size

    def Get_rank(self):
        return self.live().rank

    def Get_size(self):
        return self.live().size

    @property
    def timeout(self):
        """Default deadline of every call, in seconds."""
        return self._ctx.timeout

    @timeout.setter
    def timeout(self, seconds):
        if not seconds > 0:
            raise ValueError(f"timeout must be positive, got {seconds!r}")
        self._ctx.timeout = float(seconds)

    def __repr__(self):
        if not self:
            return "<gloocy.Communicator NULL>"
        return f"<gloocy.Communicator rank {self.rank} of {self.size}>"

    def Get_group(self):
        return Group(self._procs, self._procs[self.rank])

    group = property(Get_group)

    def Compare(self, comm):
        """IDENT (the same communicator), CONGRUENT (same ranks), SIMILAR
        (same processes, other ranks) or UNEQUAL."""
        self._ctx.rank, comm._ctx.rank      # COMM_NULL raises here
        if comm is self or comm._ctx is self._ctx:
            return IDENT
        result = self.Get_group().Compare(comm.Get_group())
        return CONGRUENT if result == IDENT else result

    def Get_name(self):
        return self._name

    def Set_name(self, name):
        self._name = str(name)

    name = property(Get_name, Set_name)

    def Is_inter(self):
        self.live()                         # COMM_NULL: ERR_COMM
        return False

    def Is_intra(self):
        self.live()
        return True

    is_inter = property(Is_inter)
    is_intra = property(Is_intra)

    def Get_topology(self):
        self.live()
        return UNDEFINED

    topology = property(Get_topology)

    @property
    def is_topo(self):
        return self.Get_topology() != UNDEFINED

    # -- integer handles (mpi4py's toint/fromint, py2f/f2py) ---------------------

    def toint(self):
        """An integer naming this communicator in this process (0: null);
        Comm.fromint gives it back (a new handle of the same class)."""
        global _LAST_HANDLE
        if self._ctx is _NULL_CONTEXT:
            return 0
        handle = _HANDLE_OF.get(id(self._ctx))
        if handle is None:
            _LAST_HANDLE += 1
            handle = _HANDLE_OF[id(self._ctx)] = _LAST_HANDLE
            _HANDLES[handle] = self
        return handle

    py2f = toint

    @classmethod
    def fromint(cls, handle):
        if handle == 0:
            return COMM_NULL
        comm = _HANDLES.get(handle)
        if comm is None:
            raise ArgumentError(f"handle: {handle} names no communicator "
                                "(or a freed one)", ERR_COMM)
        return type(comm)(comm)

    f2py = fromint

    # -- mpi4py's object model: handle, fromhandle, free -------------------------

    @property
    def handle(self):
        return self.toint()

    @classmethod
    def fromhandle(cls, handle):
        return cls.fromint(handle)

    def Disconnect(self):
        """Free this communicator (gloocy's calls are all complete when
        they return, so there is nothing to wait for)."""
        self.live()
        self.Free()

    def free(self):
        """Free a communicator this process made; a copy of a predefined one
        (Comm(COMM_WORLD)) becomes null; the predefined ones stay."""
        if self._ctx is _NULL_CONTEXT:
            return
        predefined = PREDEFINED.get(self._name[4:]) if self._name.startswith("MPI_") else None
        if predefined is not None and self._ctx is predefined._ctx:
            if self is not predefined:
                self._bind(_NULL_CONTEXT)
                self._procs = ()
            return
        self.Free()

    # -- attributes (see gloocy.attributes) ---------------------------------

    @classmethod
    def Create_keyval(cls, copy_fn=None, delete_fn=None, nopython=False):
        """A key for Set_attr: `copy_fn` says what a Dup gets, `delete_fn`
        sees values go."""
        return create_keyval(copy_fn, delete_fn, nopython)

    @classmethod
    def Free_keyval(cls, keyval):
        return free_keyval(keyval)

    def Get_attr(self, keyval):
        """The value under `keyval`, None if none. MPI's own keyvals:
        TAG_UB, the largest tag; the others have no value here."""
        self._ctx.rank                      # COMM_NULL raises here
        if keyval == KEYVAL_INVALID:
            raise ArgumentError("keyval: KEYVAL_INVALID", ERR_KEYVAL)
        if keyval == TAG_UB:
            return 2**31 - 1
        if keyval == LASTUSEDCODE:
            return last_used_code()
        if keyval >= MPI_KEYVALS:           # MPI's others (HOST, IO...)
            world = PREDEFINED.get("COMM_WORLD")        # (APPNUM: the world's)
            return (WORLD_ATTRS.get(keyval) if world is not None
                    and self._ctx is (<_CommBase>world)._ctx else None)
        return self.attributes().get(keyval)

    def Set_attr(self, keyval, attrval):
        self._ctx.rank                      # COMM_NULL raises here
        self.attributes().set(self, keyval, attrval)

    def Delete_attr(self, keyval):
        self._ctx.rank                      # COMM_NULL raises here
        self.attributes().delete(self, keyval)

    def Get_info(self):
        """A new Info holding this communicator's hints (the caller frees
        it)."""
        self._ctx.rank                      # COMM_NULL raises here
        return Info.Create() if self._info is None else self._info.Dup()

    def Set_info(self, info):
        """Keep a copy of `info`'s hints (INFO_NULL: none)."""
        self._ctx.rank                      # COMM_NULL raises here
        if not isinstance(info, Info):
            raise TypeError(f"info: expected an Info, got {info!r}")
        self._info = info.Dup() if info else None

    info = property(Get_info, Set_info)

    def Dup_with_info(self, info, *, timeout=None):
        dup = self.Dup(timeout=timeout)
        dup.Set_info(info)
        return dup

    def _mpi4(self, *args, **kwargs):
        raise NotImplementedError("this MPI-4 operation is not in gloocy yet")

    Attach_buffer = Detach_buffer = _mpi4
    Flush_buffer = Iflush_buffer = _mpi4

    # -- error handlers (see gloocy.errhandler) ------------------------------

    @classmethod
    def Create_errhandler(cls, errhandler_fn):
        """An error handler running ``errhandler_fn(comm, errorcode)``."""
        return _errhandlers.create(errhandler_fn)

    def Set_errhandler(self, errhandler):
        """What Call_errhandler runs; gloocy's calls raise their errors as
        exceptions whatever the handler."""
        self._ctx.rank                      # COMM_NULL raises here
        self._errhandler = _errhandlers.checked(errhandler)

    def Get_errhandler(self):
        """A new handle on this communicator's error handler."""
        self._ctx.rank                      # COMM_NULL raises here
        return _errhandlers.Errhandler(self._errhandler or ERRORS_RETURN)

    def Call_errhandler(self, errorcode):
        """Run this communicator's error handler on `errorcode`."""
        self._ctx.rank                      # COMM_NULL raises here
        _errhandlers.call(self._errhandler or ERRORS_RETURN, self, errorcode)

    def Abort(self, errorcode=0):
        """End the whole job now (the launcher stops the other ranks)."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(errorcode) & 0xFF or 1)

    # -- lifetime ------------------------------------------------------------

    def Free(self):
        """Forget this communicator; the connections close with the last
        one over them (peers are told this rank left cleanly). It is
        COMM_NULL afterwards."""
        if self._predefined:
            raise ArgumentError(f"cannot free {self._name or 'a predefined communicator'}",
                                ERR_COMM)
        if self._attrs is not None:
            self._attrs.clear(self)
        self._close()

    def _close(self):
        if _HANDLE_OF:
            _HANDLES.pop(_HANDLE_OF.pop(id(self._ctx), None), None)
        self._ctx.close()
        self._bind(_NULL_CONTEXT)

    def _leave(self):
        """This process leaves the job (exit, Finalize): the nonblocking
        collectives it started finish, then the connections under this
        communicator close with a goodbye, whatever communicators derived
        from it are still alive (they are closed with them)."""
        ctx = self._ctx
        if ctx is _NULL_CONTEXT:
            return                      # left already (Finalize, then exit)
        if isinstance(ctx, _core.Context):
            _core.finish_schedules(ctx)
        self._close()
        if isinstance(ctx, _core.Context):
            ctx.close_all()

    @property
    def closed(self):
        return self._ctx.closed

    def __bool__(self):
        return self._ctx is not _NULL_CONTEXT

    def _predefine(self, str name):
        """Make this COMM_WORLD, COMM_SELF or COMM_NULL (`name` without
        MPI_): never freed, pickled by name."""
        self._predefined = True
        self._name = "MPI_" + name
        PREDEFINED[name] = self

    def __reduce__(self):
        """COMM_WORLD, COMM_SELF and COMM_NULL unpickle as themselves, other
        handles on them as such handles; other communicators cannot
        travel."""
        name = self._name[4:] if self._name.startswith("MPI_") else None
        predefined = PREDEFINED.get(name)
        if predefined is None or self._ctx is not predefined._ctx:
            raise ValueError(f"cannot pickle {self!r}")
        return name if self is predefined else (type(self), (predefined,))

    def __eq__(self, other):
        if not isinstance(other, _CommBase):
            return NotImplemented
        return self._ctx is other._ctx

    __hash__ = object.__hash__

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.Free()
