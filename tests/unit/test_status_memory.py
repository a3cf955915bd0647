"""Status.tomemory: a writable view of ints over the Status's own fields,
as mpi4py's (mpi4py's test_status.testToMemory does the same)."""

import gc

from gloocy import MPI


def test_tomemory_aliases_the_fields():
    status = MPI.Status()
    status.source, status.tag, status.error = 11, 22, 33
    mem = status.tomemory()
    assert mem.format == "i" and not mem.readonly
    seq = list(mem)
    for old, new in ((11, 111), (22, 222), (33, 333)):
        mem[seq.index(old)] = new
    assert (status.source, status.tag, status.error) == (111, 222, 333)
    status.Set_elements(MPI.BYTE, 5)
    assert 5 in list(mem)


def test_tomemory_keeps_its_status_alive():
    status = MPI.Status()
    status.tag = 4242
    mem = status.tomemory()
    del status
    gc.collect()
    assert 4242 in list(mem)
    mem.release()
