"""mpi4py's constants and markers that every layer needs (it imports only
gloocy.memory's address constants, so anything may import it)."""

# BOTTOM: displacements are absolute addresses; IN_PLACE: the receive buffer
# is also the send buffer (gloocy.memory imports nothing when it is loaded)
from gloocy.memory import BOTTOM, IN_PLACE

__all__ = ["ANY_SOURCE", "ANY_TAG", "PROC_NULL", "UNDEFINED", "IN_PLACE",
           "BOTTOM", "COMM_TYPE_SHARED", "COMM_TYPE_HW_GUIDED",
           "COMM_TYPE_HW_UNGUIDED", "COMM_TYPE_RESOURCE_GUIDED", "KEYVAL_INVALID",
           "TAG_UB", "ROOT", "LASTUSEDCODE"]

# mpi4py's (MPICH's) values
ANY_SOURCE = -2
ANY_TAG = -1
PROC_NULL = -1
ROOT = -3                         # the root, in its group of an intercommunicator
UNDEFINED = -32766
COMM_TYPE_SHARED = 1              # Split_type: ranks sharing memory (a host)
COMM_TYPE_HW_GUIDED = 2           # ... the level named by info's mpi_hw_resource_type
COMM_TYPE_HW_UNGUIDED = 3         # ... the next level down that splits the ranks
COMM_TYPE_RESOURCE_GUIDED = 4     # ... as HW_GUIDED (MPI-4.1)
KEYVAL_INVALID = -1
TAG_UB = 1681915905               # Get_attr key: the largest tag
LASTUSEDCODE = 1681915915         # Get_attr key: the last error class/code added

