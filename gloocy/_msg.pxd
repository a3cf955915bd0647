# The message layer: a buffer spec of mpi4py's (buf, [buf, datatype],
# [buf, count, datatype], ...) parsed once into the Buf the core moves.

from libc.stdint cimport int64_t

from gloocy._core cimport Buf, I64


cdef class Message:
    cdef readonly Buf buf        # the bytes that travel, typed for the core
    cdef readonly int64_t count  # items of the datatype (per the whole buffer)
    cdef object spec             # the user's spec, as given
    cdef int64_t blocks          # what the spec's count is multiplied by
    cdef object _datatype        # the Datatype, or None until asked for
    cdef object slow             # bufspec's (Vector)Message, when parsed in Python
    cdef I64 block_sizes         # vector messages: each rank's block, in bytes
    cdef I64 block_offsets       # ... and where it starts in buf (the core
                                 # takes both as they are; Python sees
                                 # them as lists: .sizes, .offsets)
    # Scatter received bytes into the user's memory (non-contiguous
    # datatypes only); nbytes < 0: all of them.
    cdef int unpack(self, int64_t nbytes=*) except -1
    cdef object parsed(self)


# spec -> Message; None for IN_PLACE (or None) when allow_in_place.
# readonly: the buffer is only sent. blocks: a count given in the spec is
# per block (one block per rank: Gather, Scatter, Allgather, Alltoall).
cdef Message message(object spec, str name, bint readonly=*,
                     bint allow_in_place=*, int64_t blocks=*)


# A vector spec (one block per rank: buf, [buf, counts], [buf, (counts,
# displs)], [buf, counts, displs, datatype]...) for `size` ranks -> Message
# with block_sizes and block_offsets in bytes.
cdef Message vector_message(object spec, int size, str name, bint readonly=*)


# The n bytes at p (memory of the caller's, valid while the call that is
# given the Buf runs) as a Buf of `dtype` elements of `itemsize` bytes.
cdef Buf memory_buf(void *p, int64_t nbytes, int dtype, int64_t itemsize,
                    str name)
