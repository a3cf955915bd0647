"""mpi4py's Info: hints, string keys to string values, also usable as a
mapping (``len``, ``in``, ``[]``, ``keys``, ``items``, ``get``, ``pop``,
``update``, ``copy``, ``clear``). gloocy keeps the hints it is given and
reads those it knows (e.g. ``mpi_hw_resource_type`` in Split_type).

An Info object is a handle: ``Info(other)`` is a second handle on the same
hints (equal to it), ``Dup`` and ``copy`` make new hints, ``Free`` turns
the handle into INFO_NULL. INFO_NULL reads as an empty mapping and refuses
changes with KeyError, as mpi4py's does. INFO_ENV holds what MPI says of
the process's environment (command, argv, host, arch, wdir...).
"""

import os
import socket
import sys

from gloocy import handles as _handles
from gloocy.errors import ERR_INFO, ERR_INFO_KEY, ERR_INFO_NOKEY, GloocyError

__all__ = ["Info", "INFO_NULL", "INFO_ENV"]


class Info(_handles.Handled):
    """Hints (key -> value strings); Info() is INFO_NULL."""

    __slots__ = ("_items", "__weakref__")     # _items: a dict, None when null

    def __new__(cls, info=None):
        self = object.__new__(cls)
        if info is None:
            self._items = None
        elif isinstance(info, Info):
            self._items = info._items
        else:
            raise TypeError(f"expected an Info, got {info!r}")
        return self

    @classmethod
    def Create(cls, items=None):
        """New hints, from a mapping or (key, value) pairs."""
        info = Info.__new__(cls)
        info._items = {}
        if items is not None:
            if not hasattr(items, "keys"):
                items = _pairs(items)
            info.update(items)
        return info

    @classmethod
    def Create_env(cls, args=None):
        """New hints describing this process's environment (MPI's
        INFO_ENV keys); `args`: the command line to describe (default:
        this process's)."""
        if args is None:
            args = sys.argv
        elif isinstance(args, str):
            args = [args]
        args = [str(a) for a in args]
        env = {"command": args[0] if args else sys.executable,
               "argv": " ".join(args[1:]),
               "maxprocs": os.environ.get("WORLD_SIZE", "1"),
               "host": socket.gethostname(),
               "arch": os.uname().machine,      # (platform.machine(), unimported)
               "wdir": os.getcwd(),
               "thread_level": "MPI_THREAD_MULTIPLE"}
        return cls.Create(env)

    def _live(self):
        if self._items is None:
            raise GloocyError("INFO_NULL (or a freed info) is not an info object",
                              ERR_INFO)
        return self._items

    def _table(self, key):
        """The hints, for a change: KeyError on INFO_NULL (as mpi4py)."""
        if self._items is None:
            raise KeyError(key)
        return self._items

    # -- MPI's methods -----------------------------------------------------------

    def Dup(self):
        info = Info.__new__(type(self))
        info._items = dict(self._live())
        return info

    def Free(self):
        if self is INFO_ENV:
            raise GloocyError("cannot free INFO_ENV", ERR_INFO)
        self._live()
        _handles.forget(self._key())
        self._items = None

    def Get(self, key):
        """The value of `key`, None if it has none."""
        return self._live().get(key)

    def Set(self, key, value):
        self._live()[str(key)] = str(value)

    def Delete(self, key):
        if self._live().pop(key, None) is None:
            raise GloocyError(f"no info key {key!r}", ERR_INFO_NOKEY)

    def Get_nkeys(self):
        return len(self._live())

    def Get_nthkey(self, n):
        keys = list(self._live())
        if not 0 <= n < len(keys):
            raise GloocyError(f"no info key number {n}", ERR_INFO_KEY)
        return keys[n]

    # -- the mapping ---------------------------------------------------------------

    def __len__(self):
        return 0 if self._items is None else len(self._items)

    def __contains__(self, key):
        return self._items is not None and key in self._items

    def __iter__(self):
        return iter(list(self._items or ()))

    def __getitem__(self, key):
        if self._items is None or key not in self._items:
            raise KeyError(key)
        return self._items[key]

    def __setitem__(self, key, value):
        self._table(key)[str(key)] = str(value)

    def __delitem__(self, key):
        del self._table(key)[key]

    def get(self, key, default=None):
        return default if self._items is None else self._items.get(key, default)

    def keys(self):
        return list(self._items or ())

    def values(self):
        return list((self._items or {}).values())

    def items(self):
        return list((self._items or {}).items())

    def pop(self, key, *default):
        if self._items is None or key not in self._items:
            if default:
                return default[0]
            raise KeyError(key)
        return self._items.pop(key)

    def popitem(self):
        if not self._items:
            raise KeyError("popitem(): the info is empty")
        return self._items.popitem()

    def update(self, other=(), **kwds):
        table = self._table("update")
        pairs = other.items() if hasattr(other, "items") else other
        for key, value in list(pairs) + list(kwds.items()):
            table[str(key)] = str(value)

    def copy(self):
        """New hints with the same items (INFO_NULL's copy is null)."""
        return Info.__new__(type(self)) if self._items is None else self.Dup()

    def clear(self):
        if self._items is not None:
            self._items.clear()

    # -- mpi4py's object model -----------------------------------------------------

    def _key(self):
        return None if self._items is None else ("Info", id(self._items))

    @classmethod
    def _null_like(cls):
        return Info.__new__(cls)

    @classmethod
    def _handle_on(cls, obj):
        return Info.__new__(cls, obj)

    def free(self):
        """Free the hints (INFO_ENV and INFO_NULL stay)."""
        if self._items is not None and self is not INFO_ENV:
            self.Free()

    def __reduce__(self):
        """INFO_NULL and INFO_ENV unpickle as themselves (handles on them as
        such handles); other hints as new hints with the same items."""
        for name, constant in (("INFO_NULL", INFO_NULL), ("INFO_ENV", INFO_ENV)):
            if self._items is constant._items:
                return name if self is constant else (type(self), (constant,))
        return _rebuild, (type(self), self.items())

    def __repr__(self):
        if self._items is None:
            return "<Info NULL>"
        return f"<Info {self._items!r}>"


def _pairs(items):
    """A list of (key, value) pairs, else TypeError."""
    try:
        pairs = [tuple(pair) for pair in items]
    except TypeError:
        pairs = None
    if pairs is None or any(len(pair) != 2 for pair in pairs):
        raise TypeError(f"items: expected a mapping or (key, value) pairs, "
                        f"got {items!r}")
    return pairs


def _rebuild(cls, items):
    return cls.Create(items)


INFO_NULL = Info()
INFO_ENV = Info.Create_env()
