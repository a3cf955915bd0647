"""Integer handles, as mpi4py's objects have them (``obj.handle``,
``Class.fromhandle(h)``, ``toint``/``fromint``, ``py2f``/``f2py``), and the
handle class gloocy has only as its null object: ``File`` (MPI-IO)
(sessions: gloocy.session; windows: gloocy.rma). Its
null handles behave as mpi4py's (compare, pickle, free, subclass); every
operation raises NotImplementedError saying what gloocy lacks.

A handle is a small integer naming an object in this process: 0 is the
null one, the same number names every copy (``Class(obj)``) of an object.
Numbers are handed out when first asked for; the table keeps one copy
alive so that ``fromhandle`` can rebuild the object. It imports nothing
from gloocy, so any layer may use it.
"""

import itertools

__all__ = ["handle_of", "object_of", "forget", "Handled", "File",
           "FILE_NULL", "HANDLE_SIZE"]

HANDLE_SIZE = 8                   # bytes of a handle (what MPI._sizeof says)

_numbers = itertools.count(64)    # below 64: room for fixed numbers
_number_of = {}                   # identity key -> handle number
_object_of = {}                   # handle number -> (key, an object it names)


def handle_of(key, obj):
    """The number naming `obj`, whose identity is `key` (None: the null
    object, 0)."""
    if key is None:
        return 0
    number = _number_of.get(key)
    if number is None:
        number = _number_of[key] = next(_numbers)
        _object_of[number] = (key, obj)
    return number


def object_of(number, kind):
    """An object of class `kind` the number names (ValueError if none)."""
    entry = _object_of.get(int(number))
    if entry is None or not isinstance(entry[1], kind):
        raise ValueError(f"handle: {number} names no {kind.__name__} here")
    return entry[1]


class Handled:
    """mpi4py's integer handles for a Python class: ``handle``,
    ``toint``/``py2f``, ``fromhandle``/``fromint``/``f2py``. The class
    names an object's identity with ``_key()`` (None: the null object),
    makes the null object with ``_null_like()`` and a second handle on an
    object with ``_handle_on(obj)``."""

    __slots__ = ()

    @property
    def handle(self):
        return handle_of(self._key(), self)

    def toint(self):
        return self.handle

    py2f = toint

    @classmethod
    def fromhandle(cls, handle):
        if int(handle) == 0:
            return cls._null_like()
        return cls._handle_on(object_of(handle, cls._handle_kind()))

    fromint = f2py = fromhandle

    @classmethod
    def _handle_kind(cls):
        """The class of the objects this one's handles may name."""
        return next(t for t in reversed(cls.__mro__) if issubclass(t, Handled)
                    and t is not Handled)

    @classmethod
    def _null_like(cls):
        return cls()

    @classmethod
    def _handle_on(cls, obj):
        return cls(obj)


def forget(key):
    """The object of `key` is gone (freed): its number names nothing."""
    number = _number_of.pop(key, None)
    if number is not None:
        _object_of.pop(number, None)


# -- the null-only handle classes ----------------------------------------------

class _NullHandle:
    """A handle class of which gloocy has only the null object: it exists,
    compares, pickles and frees as mpi4py's; operations raise."""

    __slots__ = ("__weakref__",)
    _what = ""                    # what gloocy lacks, for the messages
    _null_name = ""               # the null constant's name in this module

    def __new__(cls, handle=None):
        base = _base(cls)
        if handle is not None and not isinstance(handle, base):
            raise TypeError(f"expected a {base.__name__}, got {handle!r}")
        return object.__new__(cls)

    def __bool__(self):
        return False

    def __eq__(self, other):
        if not isinstance(other, _base(type(self))):
            return NotImplemented
        return True               # every one of them is the null handle

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None               # as mpi4py's handles

    def __reduce__(self):
        null = globals()[self._null_name]
        return self._null_name if self is null else (type(self), (null,))

    def __repr__(self):
        return f"<{_base(type(self)).__name__} {self._null_name}>"

    @property
    def handle(self):
        return 0

    def toint(self):
        return 0

    py2f = toint

    @classmethod
    def fromhandle(cls, handle):
        if int(handle) != 0:
            raise ValueError(f"handle: {handle} names no {_base(cls).__name__}: "
                             f"gloocy has {cls._what}")
        return cls()

    fromint = f2py = fromhandle

    def free(self):
        """Nothing to free: the null handle."""

    @classmethod
    def _unsupported(cls, name):
        raise NotImplementedError(f"{_base(cls).__name__}.{name}: gloocy has "
                                  f"{cls._what}")


def _base(cls):
    for klass in cls.__mro__:
        if _NullHandle in klass.__bases__:
            return klass
    return cls


def _operations(cls, names, classmethods=()):
    """Give `cls` every name of `names` as an operation that raises
    NotImplementedError (class methods for `classmethods`)."""
    def make(name, static):
        def operation(*args, **kwargs):
            cls._unsupported(name)
        operation.__name__ = operation.__qualname__ = name
        operation.__doc__ = f"Not available: gloocy has {cls._what}."
        return classmethod(lambda klass, *a, **k: cls._unsupported(name)) \
            if static else operation
    for name in names:
        setattr(cls, name, make(name, False))
    for name in classmethods:
        setattr(cls, name, make(name, True))
    return cls


class File(_NullHandle):
    """MPI-IO: only FILE_NULL exists."""

    __slots__ = ()
    _what = "no MPI-IO (MPI.File)"
    _null_name = "FILE_NULL"

    def Close(self):
        self._unsupported("Close")


_operations(File, [
    "Call_errhandler", "Get_amode", "Get_atomicity", "Get_byte_offset",
    "Get_errhandler", "Get_group", "Get_info", "Get_position",
    "Get_position_shared", "Get_size", "Get_type_extent", "Get_view", "Iread",
    "Iread_all", "Iread_at", "Iread_at_all", "Iread_shared", "Iwrite",
    "Iwrite_all", "Iwrite_at", "Iwrite_at_all", "Iwrite_shared", "Preallocate",
    "Read", "Read_all", "Read_all_begin", "Read_all_end", "Read_at",
    "Read_at_all", "Read_at_all_begin", "Read_at_all_end", "Read_ordered",
    "Read_ordered_begin", "Read_ordered_end", "Read_shared", "Seek",
    "Seek_shared", "Set_atomicity", "Set_errhandler", "Set_info", "Set_size",
    "Set_view", "Sync", "Write", "Write_all", "Write_all_begin",
    "Write_all_end", "Write_at", "Write_at_all", "Write_at_all_begin",
    "Write_at_all_end", "Write_ordered", "Write_ordered_begin",
    "Write_ordered_end", "Write_shared"],
    ["Open", "Delete", "Create_errhandler"])


FILE_NULL = File()
