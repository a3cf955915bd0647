"""Process groups, as mpi4py's `MPI.Group`: an ordered set of processes,
named by their rank in the world (the first communicator of the job)."""

from gloocy import handles as _handles
from gloocy.constants import PROC_NULL, UNDEFINED
from gloocy.errors import ArgumentError, ERR_ARG, ERR_GROUP, ERR_RANK

__all__ = ["Group", "GROUP_EMPTY", "GROUP_NULL", "IDENT", "CONGRUENT",
           "SIMILAR", "UNEQUAL", "UNDEFINED"]

# mpi4py's (MPICH's) values
IDENT, CONGRUENT, SIMILAR, UNEQUAL = 0, 1, 2, 3


class Group(_handles.Handled):
    """An ordered set of processes; `me` is ours (None: not known here)."""

    # _session: the session's state a group of it (and of groups made from
    # it) belongs to, None for the world's: communicators made from such a
    # group take the session's buffer for their buffered sends (MPI-4.1)
    __slots__ = ("_procs", "_me", "_null", "_token", "_session", "__weakref__")

    def __init__(self, procs=None, me=None, *, null=False):
        """Group(): GROUP_NULL; Group(group): a second handle on group (equal
        to it); Group(procs, me): the processes `procs` (world ranks)."""
        self._session = None
        if isinstance(procs, Group):
            self._procs, self._me = procs._procs, procs._me
            self._null, self._token = procs._null, procs._token
            self._session = procs._session
            return
        if procs is None:
            procs, null = (), null or me is None
        elif not isinstance(procs, (tuple, list, range)):
            raise TypeError(f"expected a Group, got {procs!r}")
        self._procs = tuple(procs)
        self._me = me
        self._null = null
        self._token = object()    # shared by the handles on this group

    # -- queries ---------------------------------------------------------

    def Get_size(self):
        self._check()
        return len(self._procs)

    def Get_rank(self):
        self._check()
        return self._procs.index(self._me) if self._me in self._procs else UNDEFINED

    size = property(Get_size)
    rank = property(Get_rank)

    def Translate_ranks(self, ranks=None, group=None):
        """The ranks in `group` of our ranks `ranks` (UNDEFINED where a
        process is not in it); default: all our ranks, into the world."""
        self._check()
        ranks = range(len(self._procs)) if ranks is None else ranks
        where = ({p: i for i, p in enumerate(group._procs)}
                 if group is not None else None)
        out = []
        for r in ranks:
            r = int(r)
            if r == PROC_NULL:
                out.append(PROC_NULL)
                continue
            proc = self._procs[self._rank(r)]
            out.append(proc if where is None else where.get(proc, UNDEFINED))
        return out

    def Compare(self, group):
        """IDENT: same processes in the same order; SIMILAR: same ones in
        another order; UNEQUAL otherwise."""
        self._check()
        group._check()
        if self._procs == group._procs:
            return IDENT
        if set(self._procs) == set(group._procs):
            return SIMILAR
        return UNEQUAL

    # -- new groups ------------------------------------------------------------

    def Incl(self, ranks):
        self._check()
        ranks = [self._rank(r) for r in ranks]
        if len(set(ranks)) != len(ranks):
            raise ArgumentError(f"ranks: {ranks} has repeats", ERR_RANK)
        return self._new(self._procs[r] for r in ranks)

    def Excl(self, ranks):
        self._check()
        drop = {self._rank(r) for r in ranks}
        return self._new(p for i, p in enumerate(self._procs) if i not in drop)

    def Range_incl(self, ranges):
        return self.Incl(self._expand(ranges))

    def Range_excl(self, ranges):
        return self.Excl(self._expand(ranges))

    def Union(self, group1, group2=None):
        """Callable as MPI.Group.Union(group1, group2) or a.Union(b)."""
        a, b = (self, group1) if group2 is None else (group1, group2)
        return a._new(list(a._procs) + [p for p in b._procs if p not in a._procs])

    def Intersection(self, group1, group2=None):
        a, b = (self, group1) if group2 is None else (group1, group2)
        return a._new(p for p in a._procs if p in b._procs)

    def Difference(self, group1, group2=None):
        a, b = (self, group1) if group2 is None else (group1, group2)
        return a._new(p for p in a._procs if p not in b._procs)

    def Dup(self):
        self._check()
        return self._new(self._procs)

    def Free(self):
        self._check()
        self._procs, self._null = (), True

    # -- mpi4py's object model: integer handles, free (gloocy.handles) --------

    def _key(self):
        if self._null:
            return None
        return ("Group", "EMPTY") if not self._procs else ("Group", id(self._token))

    def free(self):
        """Free the group; GROUP_EMPTY stays."""
        if self._null or self is GROUP_EMPTY:
            return
        _handles.forget(self._key())
        self._procs, self._null = (), True

    def __reduce__(self):
        """GROUP_NULL and GROUP_EMPTY unpickle as themselves, other handles
        on them as such handles; other groups cannot travel."""
        for name, constant in (("GROUP_NULL", GROUP_NULL), ("GROUP_EMPTY", GROUP_EMPTY)):
            if self == constant:
                return name if self is constant else (type(self), (constant,))
        raise ValueError(f"cannot pickle {self!r}")

    # -- helpers ---------------------------------------------------------------

    def _new(self, procs):
        group = Group(tuple(procs), self._me)
        group._session = self._session
        return group

    @classmethod
    def Create_from_session_pset(cls, session, pset_name):
        """The group of process set `pset_name` of `session` (MPI-4)."""
        return session.Create_group(pset_name)

    def _rank(self, rank):
        rank = int(rank)
        if not 0 <= rank < len(self._procs):
            raise ArgumentError(f"rank: {rank} is not in a group of "
                                f"{len(self._procs)}", ERR_RANK)
        return rank

    def _expand(self, ranges):
        ranks = []
        for first, last, stride in ranges:
            if stride == 0:
                raise ArgumentError("ranges: a stride of 0", ERR_ARG)
            ranks.extend(range(first, last + (1 if stride > 0 else -1), stride))
        return ranks

    def _check(self):
        if self._null:
            raise ArgumentError("group: GROUP_NULL (or freed) is not a group",
                                ERR_GROUP)

    def __repr__(self):
        return "<Group NULL>" if self._null else f"<Group {list(self._procs)}>"


GROUP_EMPTY = Group(())
GROUP_NULL = Group()
