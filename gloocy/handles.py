"""Integer handles, as mpi4py's objects have them (``obj.handle``,
``Class.fromhandle(h)``, ``toint``/``fromint``, ``py2f``/``f2py``), for the
Python handle classes (Group, Info, Session, Win...).

A handle is a small integer naming an object in this process: 0 is the
null one, the same number names every copy (``Class(obj)``) of an object.
Numbers are handed out when first asked for; the table keeps one copy
alive so that ``fromhandle`` can rebuild the object, or (weak_handle_of,
for objects that end when their users drop them, as requests) only names
it while it lives. It imports nothing from gloocy, so any layer may use
it.
"""

import itertools
import weakref

__all__ = ["handle_of", "weak_handle_of", "object_of", "forget", "Handled",
           "HANDLE_SIZE"]

HANDLE_SIZE = 8                   # bytes of a handle (what MPI._sizeof says)

_numbers = itertools.count(64)    # below 64: room for fixed numbers
_number_of = {}                   # identity key -> handle number
_object_of = {}                   # handle number -> (key, an object it names)
_weakly = weakref.WeakValueDictionary()     # handle number -> a live object


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


def weak_handle_of(obj):
    """A new number naming `obj` while it is alive (the table does not keep
    it): the caller keeps the number with the object."""
    number = next(_numbers)
    _weakly[number] = obj
    return number


def object_of(number, kind):
    """An object of class `kind` the number names (ValueError if none)."""
    entry = _object_of.get(int(number))
    obj = _weakly.get(int(number)) if entry is None else entry[1]
    if obj is None or not isinstance(obj, kind):
        raise ValueError(f"handle: {number} names no {kind.__name__} here")
    return obj


class Handled:
    """mpi4py's integer handles for a Python class: ``handle``,
    ``toint``/``py2f``, ``fromhandle``/``fromint``/``f2py``, and its
    comparisons (handles on one object are equal; null ones are false;
    none hashes). The class names an object's identity with ``_key()``
    (None: the null object), makes the null object with ``_null_like()``
    and a second handle on an object with ``_handle_on(obj)``."""

    __slots__ = ()

    def __bool__(self):
        return self._key() is not None

    def __eq__(self, other):
        if not isinstance(other, self._handle_kind()):
            return NotImplemented
        return self._key() == other._key()

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None                   # as mpi4py's handles

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
