"""gloocy as a torch.distributed backend.

    import gloocy.torch                     # registers the backend "gloocy"
    torch.distributed.init_process_group("gloocy")   # or "cpu:gloocy"

Importing this package registers the backend (and imports the gloocy
package itself, not the backend's modules): the communicator is built when
torch creates a process group. An installed gloocy also registers it when
torch is imported (the "torch.backends" entry point, which
TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns off), so a script needs no import of
its own.
"""

from __future__ import annotations

__all__ = ["BACKEND_NAME", "register", "monitored_barrier", "communicator"]

BACKEND_NAME = "gloocy"


def _create(opts, backend_options=None):
    from ._process_group import create
    return create(opts, backend_options)


def register():
    """Register the backend with torch.distributed (again is harmless)."""
    import torch.distributed as dist
    if not dist.is_available():
        return
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True,
                                  devices=["cpu"])
    _route_monitored_barrier(dist)


def _route_monitored_barrier(dist):
    """torch's ``dist.monitored_barrier`` refuses every backend but gloo
    by name; wrapped here so that on a gloocy group it runs gloocy's (the
    same contract: rank 0 names the ranks that did not come), and on any
    other group torch's own, unchanged."""
    from torch.distributed import distributed_c10d as c10d
    torch_own = c10d.monitored_barrier
    if getattr(torch_own, "_gloocy_routed", False):
        return

    def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
        pg = _gloocy_group(dist, group)
        if pg is None:
            return torch_own(group, timeout, wait_all_ranks)
        from ._process_group import monitored_barrier as barrier
        return barrier(pg, timeout, wait_all_ranks)

    monitored_barrier.__doc__ = torch_own.__doc__
    monitored_barrier.__wrapped__ = torch_own
    monitored_barrier._gloocy_routed = True
    c10d.monitored_barrier = dist.monitored_barrier = monitored_barrier


def _gloocy_group(dist, group):
    """The gloocy ProcessGroup serving CPU tensors in `group` (default:
    the world), or None when gloocy does not (or the caller is no member:
    torch's own call says so)."""
    if not dist.is_initialized() or group is dist.GroupMember.NON_GROUP_MEMBER:
        return None
    pg = group if group is not None else dist.group.WORLD
    if BACKEND_NAME not in str(dist.get_backend(pg)):
        return None
    if hasattr(pg, "comm"):
        return pg
    import torch    # a group of several backends: gloocy's is the CPU one
    backend = pg._get_backend(torch.device("cpu"))
    return backend if hasattr(backend, "comm") else None


def autoload():
    """The "torch.backends" entry point: registering must never break
    ``import torch``."""
    try:
        register()
    except Exception as e:      # pragma: no cover - torch without distributed
        import warnings
        warnings.warn(f"gloocy could not register its torch backend: {e}",
                      stacklevel=2)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """gloo's ``dist.monitored_barrier`` for a gloocy group (what
    ``dist.monitored_barrier`` itself runs on one once this package
    registered the backend): rank 0 names the ranks that did not arrive
    within `timeout`."""
    import torch.distributed as dist
    from ._process_group import monitored_barrier as barrier
    pg = _gloocy_group(dist, group)
    if pg is None:
        raise ValueError("gloocy.torch.monitored_barrier: the group is not "
                         "a gloocy group of this rank")
    return barrier(pg, timeout, wait_all_ranks)


def communicator(group=None):
    """The gloocy Communicator of a gloocy process group (default: the
    world), to mix gloocy's own calls with torch.distributed's."""
    import torch.distributed as dist
    pg = group if group is not None else dist.group.WORLD
    return pg.comm


register()
