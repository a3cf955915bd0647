"""Process topologies: a 2-D periodic heat stencil on a Cartcomm (halo
exchange with Sendrecv along Shift, and the same with Neighbor_alltoall),
a ring graph's neighbour exchange, a distributed graph, and what the
topology inquiry functions say."""
import numpy as np

from _world import MPI, comm, rank, say, size


say("Compute_dims", MPI.Compute_dims(size, 2), MPI.Compute_dims(size, [0, 1]),
    MPI.Compute_dims(12, 3))

# -- a 2-D periodic grid ---------------------------------------------------------
dims = MPI.Compute_dims(size, 2)
cart = comm.Create_cart(dims, periods=[True, True])
say("cart", type(cart).__name__, cart.Get_topology() == MPI.CART, cart.topo,
    cart.inoutedges, [cart.Shift(d, 1) for d in range(2)],
    [cart.Shift(d, -2) for d in range(2)], cart.Get_cart_rank([-1, 5]))

# a heat stencil: each rank owns an N x N tile of a global field with a halo
N = 4
rows, cols = dims[0] * N, dims[1] * N
y0, x0 = cart.coords[0] * N, cart.coords[1] * N
yy, xx = np.mgrid[y0:y0 + N, x0:x0 + N]
tile = np.zeros((N + 2, N + 2))
tile[1:-1, 1:-1] = np.sin(yy * 0.7) + np.cos(xx * 1.3) + 0.1 * yy * xx


def halo_sendrecv(t):
    for d in range(2):
        src, dst = cart.Shift(d, 1)
        if d == 0:
            lo, hi = np.ascontiguousarray(t[1, :]), np.ascontiguousarray(t[-2, :])
            a, b = np.empty(N + 2), np.empty(N + 2)
            cart.Sendrecv(hi, dst, 1, a, src, 1)     # my last row goes up
            cart.Sendrecv(lo, src, 2, b, dst, 2)
            t[0, :], t[-1, :] = a, b
        else:
            lo, hi = np.ascontiguousarray(t[:, 1]), np.ascontiguousarray(t[:, -2])
            a, b = np.empty(N + 2), np.empty(N + 2)
            cart.Sendrecv(hi, dst, 3, a, src, 3)
            cart.Sendrecv(lo, src, 4, b, dst, 4)
            t[:, 0], t[:, -1] = a, b


def halo_neighbor(t):
    # neighbour order: dim 0 source, dim 0 dest, dim 1 source, dim 1 dest;
    # block 2d goes to the source (towards -1), 2d+1 to the dest
    send = np.empty((4, N + 2))
    recv = np.empty((4, N + 2))
    send[0], send[1] = t[1, :], t[-2, :]
    send[2], send[3] = t[:, 1], t[:, -2]
    cart.Neighbor_alltoall(send, recv)
    t[0, :], t[-1, :] = recv[0], recv[1]
    t[:, 0], t[:, -1] = recv[2], recv[3]


def step(t):
    new = t.copy()
    new[1:-1, 1:-1] = t[1:-1, 1:-1] + 0.1 * (
        t[:-2, 1:-1] + t[2:, 1:-1] + t[1:-1, :-2] + t[1:-1, 2:] - 4 * t[1:-1, 1:-1])
    return new


a, b = tile.copy(), tile.copy()
for it in range(5):
    halo_sendrecv(a)
    a = step(a)
    halo_neighbor(b)
    b = step(b)
    total = cart.allreduce(float(a[1:-1, 1:-1].sum()))
    say("stencil", it, round(total, 6), np.allclose(a[1:-1, 1:-1], b[1:-1, 1:-1]),
        round(float((b[1:-1, 1:-1] ** 2).sum()), 6))

req = cart.Ineighbor_allgather(np.array([rank], "i8"), got := np.full(4, -1, "i8"))
req.Wait()
say("Ineighbor_allgather", got.tolist())
say("neighbor_allgather", cart.neighbor_allgather(("rank", rank)))
say("neighbor_alltoall", cart.neighbor_alltoall([rank * 10 + i for i in range(4)]))

sub = cart.Sub([False, True])
say("Sub", type(sub).__name__, sub.dims, sub.coords, sub.allgather(rank))
sub.Free()
dup = cart.Dup()
say("Dup", type(dup).__name__, dup.topo == cart.topo)
dup.Free()
cart.Free()

# a line, not periodic: the ends have PROC_NULL neighbours and keep their blocks
line = comm.Create_cart([size], periods=[False])
recv = np.full(2, -7, "i8")
line.Neighbor_alltoall(np.array([rank * 2, rank * 2 + 1], "i8"), recv)
say("line", line.inoutedges, recv.tolist())
line.Free()

# -- a ring graph with a chord to rank 0 -------------------------------------------
nbrs = [[(i - 1) % size, (i + 1) % size] for i in range(size)]
for i in range(1, size):
    nbrs[0].append(i)
    nbrs[i].append(0)
index = list(np.cumsum([len(n) for n in nbrs]))
edges = [e for n in nbrs for e in n]
graph = comm.Create_graph([int(i) for i in index], edges)
say("graph", graph.Get_topology() == MPI.GRAPH, graph.Get_dims(), graph.neighbors,
    graph.Get_neighbors_count(0))
n = graph.nneighbors
send = np.array([rank * 100 + i for i in range(n)], "i8")
recv = np.full(n, -1, "i8")
graph.Neighbor_alltoall(send, recv)
say("graph alltoall", recv.tolist())
recvv = np.full(2 * n, -1, "i8")           # one item every other slot
graph.Neighbor_allgatherv(np.array([rank], "i8"),
                          [recvv, ([1] * n, [2 * j for j in range(n)])])
say("graph allgatherv", recvv.tolist())
say("graph neighbor_allgather", graph.neighbor_allgather(rank * rank))
graph.Free()

# -- a distributed graph: each rank sends to the next two ----------------------------
sources = [(rank - 1) % size, (rank - 2) % size]
dests = [(rank + 1) % size, (rank + 2) % size]
dist = comm.Create_dist_graph_adjacent(sources, dests, [1, 2], [3, 4])
say("dist", dist.Get_topology() == MPI.DIST_GRAPH, dist.Get_dist_neighbors(),
    dist.Get_dist_neighbors_count())
recv = np.full(2, -1, "i8")
dist.Neighbor_alltoall(np.array([rank * 10 + 1, rank * 10 + 2], "i8"), recv)
say("dist alltoall", recv.tolist())
dist.Free()
say("done")
