"""Module-level functions and constants of MPI."""
from _world import MPI, comm, say


# importing MPI initializes it, with full thread support
say("Is_initialized", MPI.Is_initialized(), "Is_finalized", MPI.Is_finalized())
say("Query_thread MULTIPLE", MPI.Query_thread() == MPI.THREAD_MULTIPLE, "Is_thread_main", MPI.Is_thread_main())
for name, init in [("Init", lambda: MPI.Init()),
                   ("Init_thread", lambda: MPI.Init_thread(MPI.THREAD_MULTIPLE))]:
    try:
        init()
        say(name, "again: no error")
    except MPI.Exception as e:
        say(name, "again:", e.Get_error_class() == MPI.ERR_OTHER)
say("THREAD order", MPI.THREAD_SINGLE < MPI.THREAD_FUNNELED < MPI.THREAD_SERIALIZED < MPI.THREAD_MULTIPLE,
    [MPI.THREAD_SINGLE, MPI.THREAD_FUNNELED, MPI.THREAD_SERIALIZED, MPI.THREAD_MULTIPLE])

v = MPI.Get_version()
say("Get_version", type(v).__name__, len(v), all(isinstance(x, int) for x in v), v >= (3, 0))
name = MPI.Get_processor_name()
say("Get_processor_name", isinstance(name, str) and len(name) > 0)
t0 = MPI.Wtime()
t1 = MPI.Wtime()
say("Wtime", isinstance(t0, float), t1 >= t0)
tick = MPI.Wtick()
say("Wtick", isinstance(tick, float), 0 < tick < 1)

# constants
say("compare results", MPI.IDENT, MPI.CONGRUENT, MPI.SIMILAR, MPI.UNEQUAL)
say("UNDEFINED", MPI.UNDEFINED, "ANY_SOURCE", MPI.ANY_SOURCE, "ANY_TAG", MPI.ANY_TAG,
    "PROC_NULL", MPI.PROC_NULL, "ROOT", MPI.ROOT)
say("distinct", len({MPI.UNDEFINED, MPI.ANY_SOURCE, MPI.ANY_TAG, MPI.PROC_NULL}))
say("IN_PLACE is not BOTTOM", MPI.IN_PLACE is not MPI.BOTTOM, MPI.IN_PLACE != MPI.BOTTOM)
say("SUCCESS", MPI.SUCCESS, "error classes distinct",
    len({MPI.ERR_ROOT, MPI.ERR_RANK, MPI.ERR_TAG, MPI.ERR_COUNT, MPI.ERR_TYPE, MPI.ERR_OP,
         MPI.ERR_TRUNCATE, MPI.ERR_BUFFER, MPI.ERR_ARG, MPI.ERR_COMM, MPI.ERR_OTHER}))
say("null handles", MPI.COMM_NULL != MPI.COMM_WORLD, MPI.REQUEST_NULL == MPI.REQUEST_NULL,
    MPI.DATATYPE_NULL != MPI.INT, MPI.OP_NULL != MPI.SUM, MPI.GROUP_NULL != MPI.GROUP_EMPTY)
say("COMM_TYPE_SHARED is int", isinstance(MPI.COMM_TYPE_SHARED, int))
say("world types", type(MPI.COMM_WORLD).__name__, isinstance(MPI.COMM_WORLD, MPI.Intracomm),
    isinstance(MPI.COMM_WORLD, MPI.Comm), isinstance(MPI.COMM_SELF, MPI.Intracomm))

# sizes of the predefined datatypes
for t in ["CHAR", "SIGNED_CHAR", "UNSIGNED_CHAR", "BYTE", "SHORT", "UNSIGNED_SHORT", "INT",
          "UNSIGNED", "LONG", "UNSIGNED_LONG", "LONG_LONG", "UNSIGNED_LONG_LONG", "FLOAT",
          "DOUBLE", "LONG_DOUBLE", "C_BOOL", "INT8_T", "INT16_T", "INT32_T", "INT64_T",
          "UINT8_T", "UINT16_T", "UINT32_T", "UINT64_T", "C_FLOAT_COMPLEX",
          "C_DOUBLE_COMPLEX", "WCHAR", "AINT", "OFFSET", "COUNT", "FLOAT_INT",
          "DOUBLE_INT", "LONG_INT", "TWOINT", "SHORT_INT"]:
    dt = getattr(MPI, t)
    say("Get_size", t, dt.Get_size(), dt.Get_extent()[1])

# Finalize, then the flags say so
comm.Barrier()
MPI.Finalize()
say("after Finalize", MPI.Is_initialized(), MPI.Is_finalized())
