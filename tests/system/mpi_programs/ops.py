"""Every predefined op on buffers and objects; user ops (Op.Create) in
Allreduce/Reduce/Scan, commutative and not; Is_commutative; Reduce_local."""
import numpy as np

from _world import MPI, comm, rank, say, size


def error_name(e):
    if isinstance(e, MPI.Exception):
        names = ["ERR_OP", "ERR_TYPE", "ERR_COUNT", "ERR_ARG", "ERR_BUFFER", "ERR_OTHER"]
        cls = e.Get_error_class()
        return "MPI.Exception " + next((n for n in names if getattr(MPI, n) == cls), "other class")
    return type(e).__name__


ARITH = ["SUM", "PROD", "MAX", "MIN"]
LOGIC = ["LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR"]

# arithmetic ops on integer and float buffers (values keep products exact)
for name in ARITH:
    op = getattr(MPI, name)
    for dt in ("i4", "i8", "u2", "f4", "f8"):
        x = (np.array([1, 2, 3, 4]) + rank % 3).astype(dt)
        out = np.zeros(4, dt)
        comm.Allreduce(x, out, op=op)
        say(name, dt, "Allreduce", np.round(out, 6).tolist())
    x = np.array([rank + 1.5, -rank], "f8")
    out = np.zeros(2) if rank == 0 else None
    comm.Reduce(x, out, op=op, root=0)
    if rank == 0:
        say(name, "Reduce f8", np.round(out, 6).tolist())
    out = np.zeros(2)
    comm.Scan(x, out, op=op)
    say(name, "Scan f8", np.round(out, 6).tolist())

# logical and bitwise ops on integers (and bool for the logical ones)
for name in LOGIC:
    op = getattr(MPI, name)
    for dt in ("i4", "u1", "i8"):
        x = np.array([0, 1, rank % 2, rank, 0xF0 >> rank, 5], dt)
        out = np.zeros(6, dt)
        comm.Allreduce(x, out, op=op)
        say(name, dt, "Allreduce", out.tolist())
    out = np.zeros(6, "i4")
    comm.Scan(np.array([0, 1, rank % 2, rank, 3 << rank, 5], "i4"), out, op=op)
    say(name, "Scan i4", out.tolist())
for name in ("LAND", "LOR", "LXOR"):
    x = np.array([True, False, rank % 2 == 0, rank == 0])
    out = np.zeros(4, "?")
    comm.Allreduce(x, out, op=getattr(MPI, name))
    say(name, "bool Allreduce", out.tolist())

# ops that do not fit the type are refused (the same on every rank)
for name, dt in [("BAND", "f8"), ("LXOR", "f4"), ("BOR", "c16"), ("MAX", "c16")]:
    try:
        comm.Allreduce(np.ones(2, dt), np.zeros(2, dt), op=getattr(MPI, name))
        say(name, dt, "accepted")
    except Exception as e:
        say(name, dt, "refused", error_name(e))

# MAXLOC / MINLOC on (value, index) pair types
pairs = np.array([[rank * 3 % 4, rank], [5 - rank, rank], [7, rank]], "i4")
for name in ("MAXLOC", "MINLOC"):
    out = np.zeros_like(pairs)
    comm.Allreduce([pairs, MPI.TWOINT], [out, MPI.TWOINT], op=getattr(MPI, name))
    say(name, "2INT Allreduce", out.tolist())
    dtp = np.dtype([("v", "f8"), ("i", "i4")], align=True)  # MPI.DOUBLE_INT layout
    x = np.zeros(2, dtp)
    x["v"] = [rank * 1.5 % 2, -float(rank)]
    x["i"] = rank
    out = np.zeros(2, dtp)
    comm.Allreduce([x, MPI.DOUBLE_INT], [out, MPI.DOUBLE_INT], op=getattr(MPI, name))
    say(name, "DOUBLE_INT Allreduce", [(round(float(v), 6), int(i)) for v, i in out.tolist()])
    out = np.zeros_like(pairs)
    comm.Scan([pairs, MPI.TWOINT], [out, MPI.TWOINT], op=getattr(MPI, name))
    say(name, "2INT Scan", out.tolist())

# REPLACE and NO_OP are for one-sided communication; collectives refuse them
for name in ("REPLACE", "NO_OP"):
    try:
        comm.Allreduce(np.ones(2, "i4"), np.zeros(2, "i4"), op=getattr(MPI, name))
        say(name, "buffer Allreduce accepted")
    except Exception as e:
        say(name, "buffer Allreduce refused", error_name(e))

# every predefined op applied to Python objects, locally
for name in ARITH + LOGIC + ["REPLACE", "NO_OP"]:
    op = getattr(MPI, name)
    say(name, "call", op(6, 3), op(0, 5), op(True, False))
say("MAXLOC call", MPI.MAXLOC((1, 2), (1, 0)), MPI.MAXLOC((3, 0), (2, 1)))
say("MINLOC call", MPI.MINLOC((1, 2), (1, 0)), MPI.MINLOC((3, 0), (2, 1)))

# Is_commutative
for name in ARITH + LOGIC + ["MAXLOC", "MINLOC", "REPLACE", "NO_OP"]:
    say(name, "commutative", getattr(MPI, name).Is_commutative())


# user-defined ops: a commutative one (a + b + 1 is associative too) ...
def plus_one(inbuf, inoutbuf, datatype):
    if datatype is None:  # object reductions pass Python objects and no type
        return inbuf + inoutbuf + 1
    a = np.frombuffer(inbuf, "i8")
    b = np.frombuffer(inoutbuf, "i8")
    b += a + 1


# ... and a non-commutative one: 2x2 integer matrix product, inoutbuf = inbuf @ inoutbuf
def matmul(inbuf, inoutbuf, datatype):
    a = np.frombuffer(inbuf, "i8").reshape(-1, 2, 2)
    b = np.frombuffer(inoutbuf, "i8").reshape(-1, 2, 2)
    b[...] = a @ b


PLUS1 = MPI.Op.Create(plus_one, commute=True)
MATMUL = MPI.Op.Create(matmul, commute=False)
say("user commutative", PLUS1.Is_commutative(), MATMUL.Is_commutative())

x = np.array([rank, 10 * rank, 5], "i8")
out = np.zeros(3, "i8")
comm.Allreduce(x, out, op=PLUS1)
say("PLUS1 Allreduce", out.tolist())
out = np.zeros(3, "i8") if rank == size - 1 else None
comm.Reduce(x, out, op=PLUS1, root=size - 1)
if rank == size - 1:
    say("PLUS1 Reduce", out.tolist())
out = np.zeros(3, "i8")
comm.Scan(x, out, op=PLUS1)
say("PLUS1 Scan", out.tolist())
say("PLUS1 objects", comm.allreduce(rank, op=PLUS1), comm.scan(rank * 2, op=PLUS1))

mat = MPI.INT64_T.Create_contiguous(4).Commit()  # one 2x2 matrix per element
mine = np.array([[[1, rank], [0, 1]], [[rank + 1, 1], [1, 0]]], "i8")  # 2 matrices
out = np.zeros_like(mine)
comm.Allreduce([mine, 2, mat], [out, 2, mat], op=MATMUL)
say("MATMUL Allreduce", out.tolist())
out = np.zeros_like(mine) if rank == 0 else None
comm.Reduce([mine, 2, mat], [out, 2, mat] if rank == 0 else None, op=MATMUL, root=0)
if rank == 0:
    say("MATMUL Reduce", out.tolist())
out = np.zeros_like(mine)
comm.Scan([mine, 2, mat], [out, 2, mat], op=MATMUL)
say("MATMUL Scan", out.tolist())
out = np.zeros_like(mine)
comm.Exscan([mine, 2, mat], [out, 2, mat], op=MATMUL)
if rank > 0:
    say("MATMUL Exscan", out.tolist())
mat.Free()
PLUS1.Free()
MATMUL.Free()
say("user ops freed", PLUS1 == MPI.OP_NULL, MATMUL == MPI.OP_NULL)

# Reduce_local: inoutbuf = inbuf op inoutbuf, no communication
for name in ARITH + ["BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR"]:
    a = np.array([1, 2, 3, 0], "i4")
    b = np.array([3, 0, 1, 2], "i4") + rank
    getattr(MPI, name).Reduce_local(a, b)
    say(name, "Reduce_local", b.tolist())
a = np.array([2.5, -1.0])
b = np.array([0.5, 4.0])
MPI.MAX.Reduce_local([a, MPI.DOUBLE], [b, MPI.DOUBLE])
say("MAX Reduce_local spec", b.tolist())
try:
    MPI.SUM.Reduce_local(np.zeros(3), np.zeros(4))
    say("Reduce_local count mismatch accepted")
except Exception as e:
    say("Reduce_local count mismatch", error_name(e))
