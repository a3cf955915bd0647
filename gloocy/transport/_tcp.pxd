from gloocy.transport._stream cimport StreamPair


cdef class TcpPair(StreamPair):
    pass
