"""MPI-IO over the POSIX file system: mpi4py's ``MPI.File``.

- file.py: the File class (open, close, properties, hints, handlers);
- view.py: file views and data representations;
- access.py: every read and write, built from one transfer;
- pointer.py: the shared file pointer (a locked side file).
"""

from gloocy.mpiio.file import FILE_NULL, File, Register_datarep

__all__ = ["File", "FILE_NULL", "Register_datarep"]
