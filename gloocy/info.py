"""mpi4py's Info: hints (key -> value strings). gloocy needs none of them,
so it keeps them and ignores them."""

from gloocy.errors import ERR_INFO, ERR_INFO_KEY, ERR_INFO_NOKEY, GloocyError

__all__ = ["Info", "INFO_NULL", "INFO_ENV"]


class Info:
    """Hints (key -> value strings); gloocy needs none and ignores them."""

    def __init__(self, items=None, *, null=False):
        self._items, self._null = dict(items or {}), null

    @classmethod
    def Create(cls, items=None):
        return cls(items)

    def _check(self):
        if self._null:
            raise GloocyError("INFO_NULL is not an info object", ERR_INFO)
        return self._items

    def Dup(self):
        return Info(self._check())

    def Free(self):
        if self is INFO_ENV:
            raise GloocyError("cannot free INFO_ENV", ERR_INFO)
        self._check()
        self._null = True

    def Get(self, key):
        return self._check().get(key)

    def Set(self, key, value):
        self._check()[key] = value

    def Delete(self, key):
        if self._check().pop(key, None) is None:
            raise GloocyError(f"no info key {key!r}", ERR_INFO_NOKEY)

    def Get_nkeys(self):
        return len(self._check())

    def Get_nthkey(self, n):
        keys = list(self._check())
        if not 0 <= n < len(keys):
            raise GloocyError(f"no info key number {n}", ERR_INFO_KEY)
        return keys[n]

    def __bool__(self):
        return not self._null

    def __eq__(self, other):
        return self is other or (isinstance(other, Info) and self._null and other._null)

    __hash__ = object.__hash__


INFO_NULL = Info(null=True)
INFO_ENV = Info()
