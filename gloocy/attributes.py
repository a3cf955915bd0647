"""Attribute caching (MPI's keyvals): values users hang on a communicator or
a datatype under a key, copied by Dup and released by Free through the
key's callbacks, as mpi4py's ``Create_keyval``/``Set_attr``/``Get_attr``.

A key's ``copy_fn(obj, keyval, value)`` says what a Dup of obj gets: the
value it returns (``NotImplemented``: nothing); ``True`` copies the value
itself, ``None`` or ``False`` nothing. ``delete_fn(obj, keyval, value)`` runs
when a value goes: Delete_attr, Set_attr over it, Free of its object. A
callback that raises fails the call with ERR_OTHER, its traceback printed
(as MPI's error handlers report it).
"""

import itertools
import sys

from gloocy.constants import KEYVAL_INVALID
from gloocy.errors import ERR_KEYVAL, ERR_OTHER, GloocyError

__all__ = ["create_keyval", "free_keyval", "Attributes", "MPI_KEYVALS"]

_keys = {}                             # keyval -> (copy_fn, delete_fn)
_numbers = itertools.count(1 << 20)
# MPI's own keyvals (TAG_UB, HOST, IO...) are this and up (MPICH's numbers);
# ours stay below.
MPI_KEYVALS = 1 << 30


def create_keyval(copy_fn=None, delete_fn=None, nopython=False):
    """A new keyval. (`nopython` is mpi4py's: values are plain integers;
    they are kept as given here either way.)"""
    for name, fn in (("copy_fn", copy_fn), ("delete_fn", delete_fn)):
        if fn is not None and not isinstance(fn, bool) and not callable(fn):
            raise TypeError(f"{name}: expected a callable, True, False or None, "
                            f"got {fn!r}")
    keyval = next(_numbers)
    _keys[keyval] = (copy_fn, delete_fn)
    return keyval


def free_keyval(keyval):
    """Forget `keyval` (values already set keep their callbacks);
    KEYVAL_INVALID, for mpi4py's ``keyval = Free_keyval(keyval)``."""
    _known(keyval)
    _keys[keyval] = _keys[keyval] + (True,)    # freed: no new values
    return KEYVAL_INVALID


def _known(keyval):
    if keyval not in _keys:
        raise GloocyError(f"keyval: {keyval!r} is not a keyval of this process",
                          ERR_KEYVAL)
    return _keys[keyval]


def _call(fn, what, obj, keyval, value):
    try:
        return fn(obj, keyval, value)
    except BaseException as e:
        import traceback          # (seldom: not imported with the module)
        traceback.print_exc(file=sys.stderr)
        raise GloocyError(f"the {what} callback of keyval {keyval} raised "
                          f"{type(e).__name__}: {e}", ERR_OTHER) from e


class Attributes:
    """The values one object holds, by keyval."""

    __slots__ = ("values",)

    def __init__(self, values=None):
        self.values = values or {}

    def get(self, keyval):
        """The value under `keyval`, None if there is none."""
        if keyval not in self.values:
            _known(keyval)
        return self.values.get(keyval)

    def set(self, obj, keyval, value):
        key = _known(keyval)
        if len(key) > 2:
            raise GloocyError(f"keyval: {keyval} was freed", ERR_KEYVAL)
        if keyval in self.values:
            self.delete(obj, keyval)
        self.values[keyval] = value

    def delete(self, obj, keyval):
        """Drop the value under `keyval` (its delete callback first)."""
        delete_fn = _known(keyval)[1]
        if keyval not in self.values:
            return
        value = self.values.pop(keyval)
        if callable(delete_fn) and not isinstance(delete_fn, bool):
            _call(delete_fn, "delete", obj, keyval, value)

    def copy(self, obj):
        """What a Dup of `obj` holds."""
        copied = {}
        for keyval, value in self.values.items():
            copy_fn = _keys[keyval][0]
            if copy_fn is True:
                copied[keyval] = value
            elif callable(copy_fn) and not isinstance(copy_fn, bool):
                new = _call(copy_fn, "copy", obj, keyval, value)
                if new is not NotImplemented:
                    copied[keyval] = new
        return Attributes(copied)

    def clear(self, obj):
        """Drop every value (Free), each through its delete callback, the
        last set first (as MPICH)."""
        for keyval in reversed(list(self.values)):
            self.delete(obj, keyval)
