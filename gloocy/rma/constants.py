"""One-sided communication's constants (MPICH's numbers, as mpi4py on
MPICH shows them). Imports nothing from gloocy."""

__all__ = ["WIN_BASE", "WIN_SIZE", "WIN_DISP_UNIT", "WIN_CREATE_FLAVOR",
           "WIN_FLAVOR", "WIN_MODEL", "WIN_FLAVOR_CREATE", "WIN_FLAVOR_ALLOCATE",
           "WIN_FLAVOR_DYNAMIC", "WIN_FLAVOR_SHARED", "WIN_SEPARATE", "WIN_UNIFIED",
           "LOCK_EXCLUSIVE", "LOCK_SHARED", "MODE_NOCHECK", "MODE_NOSTORE",
           "MODE_NOPUT", "MODE_NOPRECEDE", "MODE_NOSUCCEED"]

# Get_attr keys of a window's predefined attributes
WIN_BASE, WIN_SIZE, WIN_DISP_UNIT = 1711276033, 1711276035, 1711276037
WIN_CREATE_FLAVOR = WIN_FLAVOR = 1711276039
WIN_MODEL = 1711276041
WIN_KEYVALS = (WIN_BASE, WIN_SIZE, WIN_DISP_UNIT, WIN_CREATE_FLAVOR, WIN_MODEL)

# how a window was made
WIN_FLAVOR_CREATE, WIN_FLAVOR_ALLOCATE, WIN_FLAVOR_DYNAMIC, WIN_FLAVOR_SHARED = 1, 2, 3, 4
# memory models: gloocy's windows are unified (one copy of the memory)
WIN_SEPARATE, WIN_UNIFIED = 1, 2

LOCK_EXCLUSIVE, LOCK_SHARED = 234, 235

# assertions (hints: gloocy accepts them; MODE_NOCHECK skips a lock's
# round trip, MODE_NOSUCCEED ends the fence epoch)
MODE_NOCHECK, MODE_NOSTORE, MODE_NOPUT = 1024, 2048, 4096
MODE_NOPRECEDE, MODE_NOSUCCEED = 8192, 16384
