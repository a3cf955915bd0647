"""mpi4py's Status: where a received (or probed) message came from and how
big it is."""

from gloocy.constants import ANY_SOURCE, ANY_TAG, UNDEFINED

__all__ = ["Status"]


class Status:
    """Where a received (or probed) message came from and how big it is
    (`count` in bytes), as mpi4py's Status."""

    __slots__ = ("source", "tag", "count", "error", "cancelled")

    def __init__(self, status=None):
        if status is not None and not isinstance(status, Status):
            raise TypeError(f"status: expected a Status, got {status!r}")
        if status is None:
            self.source, self.tag, self.count, self.error = ANY_SOURCE, ANY_TAG, 0, 0
            self.cancelled = False
        else:
            for name in Status.__slots__:
                setattr(self, name, getattr(status, name))

    def Get_source(self):
        return self.source

    def Set_source(self, source):
        self.source = source

    def Get_tag(self):
        return self.tag

    def Set_tag(self, tag):
        self.tag = tag

    def Get_error(self):
        return self.error

    def Set_error(self, error):
        self.error = error

    def Is_cancelled(self):
        return self.cancelled

    def Set_cancelled(self, flag):
        self.cancelled = bool(flag)

    def Get_count(self, datatype=None):
        """Bytes received, or whole elements of `datatype` (UNDEFINED when
        the bytes are not a whole number of them)."""
        if datatype is None:
            return self.count
        size = getattr(datatype, "itemsize", None) or datatype.Get_size()
        if size == 0:
            return 0 if self.count == 0 else UNDEFINED
        return self.count // size if self.count % size == 0 else UNDEFINED

    Get_elements = Get_count

    def Set_elements(self, datatype, count):
        size = getattr(datatype, "itemsize", None) or datatype.Get_size()
        self.count = count * size

    def _set(self, source, tag, count):
        self.source, self.tag, self.count = source, tag, count

    def __repr__(self):
        return f"<Status source={self.source} tag={self.tag} count={self.count}>"
