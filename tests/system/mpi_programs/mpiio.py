"""MPI-IO: one file written by every rank through views, file pointers and
the shared pointer, read back; the lines printed are the file's bytes (as
a digest and a few values), Status counts, positions, sizes and the error
classes of bad calls, so that the two runs print the same lines only if the
files and the answers are the same. The file lives in a temporary folder
that rank 0 makes and removes."""
import hashlib
import os
import shutil
import tempfile
import numpy as np

from _world import MPI, comm, rank, say, size

ERRORS = ["ERR_NO_SUCH_FILE", "ERR_FILE_EXISTS", "ERR_AMODE", "ERR_READ_ONLY",
          "ERR_ACCESS", "ERR_ARG", "ERR_IO", "ERR_FILE", "ERR_BAD_FILE",
          "ERR_UNSUPPORTED_OPERATION", "ERR_TYPE"]


def digest(path):
    with open(path, "rb") as f:
        data = f.read()
    return len(data), hashlib.sha256(data).hexdigest()[:16]


def attempt(label, fn):
    try:
        fn()
        say(label, "ok")
    except MPI.Exception as e:
        name = next((n for n in ERRORS if getattr(MPI, n) == e.Get_error_class()),
                    "another class")
        say(label, "MPI.Exception", name)


folder = comm.bcast(tempfile.mkdtemp(prefix="mpiio-") if rank == 0 else None, 0)
path = os.path.join(folder, "data")
RW = MPI.MODE_RDWR | MPI.MODE_CREATE
status = MPI.Status()

# -- a 2-D array in row blocks (subarray view, collective write) -----------------
rows, cols = 4, 5
fh = MPI.File.Open(comm, path, RW)
block = MPI.INT.Create_subarray([size * rows, cols], [rows, cols], [rank * rows, 0]).Commit()
fh.Set_view(0, MPI.INT, block)
mine = (np.arange(rows * cols, dtype="i4") + 1000 * rank).reshape(rows, cols)
fh.Write_all(mine, status)
say("subarray write count", status.Get_count(MPI.INT), "position", fh.Get_position())
block.Free()
comm.Barrier()
# every rank reads column `rank % cols` through a vector view
column = MPI.INT.Create_vector(size * rows, 1, cols).Commit()
fh.Set_view(4 * (rank % cols), MPI.INT, column)
got = np.full(size * rows + 2, -1, "i4")     # one item of the next copy too
fh.Read_at_all(0, [got, size * rows + 1, MPI.INT], status)
say("column", rank % cols, got.tolist(), "count", status.Get_count(MPI.INT))
say("byte offset of etype 3", fh.Get_byte_offset(3))
column.Free()
fh.Sync()
comm.Barrier()
say("size", fh.Get_size(), "file", *digest(path))

# -- individual pointers and the end of the file ---------------------------------
fh.Set_view(0, MPI.DOUBLE)
fh.Seek(0, MPI.SEEK_END)
say("seek end position", fh.Get_position())
fh.Seek(-1, MPI.SEEK_CUR)
tail = np.zeros(3, "f8")
fh.Read(tail, status)
say("read past the end count", status.Get_count(MPI.BYTE), "position", fh.Get_position())
fh.Close()
comm.Barrier()

# -- the shared pointer: ordered, then shared ------------------------------------
fh = MPI.File.Open(comm, path, RW | MPI.MODE_DELETE_ON_CLOSE)
fh.Set_size(0)
fh.Set_view(8, MPI.SHORT)
# (MPICH's Get_position_shared disagrees between ranks here: not printed)
fh.Write_ordered(np.full(rank + 1, rank + 1, "i2"), status)
say("ordered count", status.Get_count(MPI.SHORT))
fh.Write_shared(np.full(3, 50 + rank, "i2"))
comm.Barrier()
fh.Seek_shared(0)
back = np.zeros(rank + 1, "i2")
fh.Read_ordered(back)
say("read ordered", back.tolist())
fh.Sync()
comm.Barrier()
whole = np.fromfile(path, "i2")
head = whole[4:4 + size * (size + 1) // 2].tolist()
shared = sorted(whole[4 + size * (size + 1) // 2:].tolist())
say("file ordered part", head, "shared part", shared)
comm.Barrier()
req = fh.Iwrite_at(0, np.array([7, 8], "i2"))
req.Wait(status)
say("iwrite_at count", status.Get_count(MPI.SHORT))
fh.Write_at_all_begin(2 + rank, np.array([9], "i2"))
fh.Write_at_all_end(np.array([9], "i2"), status)
say("split count", status.Get_count(MPI.SHORT))
fh.Close()
comm.Barrier()
say("deleted on close", os.path.exists(path))

# -- a sequential file: the shared pointer only -------------------------------------
seq = MPI.MODE_WRONLY | MPI.MODE_CREATE | MPI.MODE_SEQUENTIAL | MPI.MODE_DELETE_ON_CLOSE
fh = MPI.File.Open(comm, path, seq)
fh.Write_ordered(np.full(2, rank, "i4"))
for label, call in [("seq write_at", lambda: fh.Write_at(0, np.zeros(1, "i4"))),
                    ("seq write", lambda: fh.Write(np.zeros(1, "i4"))),
                    ("seq seek", lambda: fh.Seek(0)),
                    ("seq position", fh.Get_position),
                    ("seq shared position", fh.Get_position_shared),
                    ("seq byte offset", lambda: fh.Get_byte_offset(1))]:
    attempt(label, call)
attempt("seq view at 0", lambda: fh.Set_view(0, MPI.INT))
fh.Set_view(MPI.DISPLACEMENT_CURRENT, MPI.INT)
say("seq view disp", fh.Get_view()[0])
fh.Write_ordered(np.full(1, 10 + rank, "i4"))
fh.Sync()
comm.Barrier()
say("seq file", np.fromfile(path, "i4").tolist())
comm.Barrier()
fh.Close()

# -- errors ----------------------------------------------------------------------
attempt("open a missing file", lambda: MPI.File.Open(comm, path, MPI.MODE_RDONLY))
attempt("read-only and create", lambda: MPI.File.Open(
    comm, path, MPI.MODE_RDONLY | MPI.MODE_CREATE))
fh = MPI.File.Open(comm, path, MPI.MODE_WRONLY | MPI.MODE_CREATE)
excl = MPI.MODE_WRONLY | MPI.MODE_CREATE | MPI.MODE_EXCL
if rank == 0:       # (MPICH's other ranks give an invalid error code)
    attempt("open excl an existing file", lambda: MPI.File.Open(MPI.COMM_SELF, path, excl))
attempt("read a write-only file", lambda: fh.Read_at(0, np.zeros(1, "i4")))
fh.Close()
fh = MPI.File.Open(comm, path, MPI.MODE_RDONLY)
attempt("write a read-only file", lambda: fh.Write_at(0, np.zeros(1, "i4")))
fh.Close()
comm.Barrier()
if rank == 0:
    MPI.File.Delete(path)
comm.Barrier()
attempt("delete a missing file", lambda: MPI.File.Delete(path))
comm.Barrier()
if rank == 0:
    shutil.rmtree(folder)
