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
    """gloo's ``dist.monitored_barrier`` for a gloocy group (torch's own
    accepts gloo groups only): rank 0 names the ranks that did not arrive
    within `timeout`."""
    import torch.distributed as dist
    from ._process_group import monitored_barrier as barrier
    pg = group if group is not None else dist.group.WORLD
    return barrier(pg, timeout, wait_all_ranks)


def communicator(group=None):
    """The gloocy Communicator of a gloocy process group (default: the
    world), to mix gloocy's own calls with torch.distributed's."""
    import torch.distributed as dist
    pg = group if group is not None else dist.group.WORLD
    return pg.comm


register()
