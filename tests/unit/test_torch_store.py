"""gloocy's Store interface over torch's c10d stores (gloocy/torch/_store.py),
which the torch backend uses to build its mesh; and the reduce-op table."""

import time

import pytest

torch = pytest.importorskip("torch", reason="needs torch (pip install torch, the CPU build)")
dist = pytest.importorskip("torch.distributed")

from gloocy.errors import RendezvousTimeout  # noqa: E402
from gloocy.torch._store import C10dStore  # noqa: E402
from gloocy.torch import _tensors  # noqa: E402
from gloocy import ops  # noqa: E402


@pytest.fixture
def store():
    # A TCPStore's server threads outlive the test (the leak check objects);
    # the ranks of tests/system/test_torch.py meet through real TCPStores.
    return C10dStore(dist.PrefixStore("pg0/", dist.HashStore()), timeout=5)


def test_set_get_add_check_delete(store):
    store.set("a", b"\x00\x01")
    assert store.get("a") == b"\x00\x01"
    assert store.add("n", 2) == 2 and store.add("n", 3) == 5
    assert store.check(["a", "n"]) and not store.check(["a", "missing"])
    assert store.delete("a") and not store.check(["a"])


def test_compare_set(store):
    assert store.compare_set("k", None, b"first") == b"first"
    assert store.compare_set("k", None, b"second") == b"first"
    assert store.compare_set("k", b"first", b"third") == b"third"


def test_a_missing_key_times_out_with_gloocys_error(store):
    began = time.monotonic()
    with pytest.raises(RendezvousTimeout, match="missing"):
        store.get("missing", timeout=0.3)
    assert time.monotonic() - began < 4


def test_bad_keys_are_refused_before_torch_sees_them(store):
    with pytest.raises(TypeError, match="key must be a str"):
        store.set(b"k", b"v")
    with pytest.raises(TypeError, match="encode it first"):
        store.set("k", "text")


R = dist.ReduceOp


@pytest.mark.parametrize("op, dtype, want", [
    (R.SUM, torch.float32, ops.SUM), (R.PRODUCT, torch.int64, ops.PROD),
    (R.MIN, torch.bfloat16, ops.MIN), (R.MAX, torch.float16, ops.MAX),
    (R.BAND, torch.int8, ops.BAND), (R.BOR, torch.uint8, ops.BOR),
    (R.BXOR, torch.int32, ops.BXOR), (R.AVG, torch.float64, ops.AVG),
    (R.SUM, torch.bool, ops.LOR), (R.PRODUCT, torch.bool, ops.LAND)])
def test_reduce_ops(op, dtype, want):
    assert _tensors.reduce_op(op, dtype) == (want, None)


def test_premul_sum_carries_its_factor():
    op = torch._C._distributed_c10d._make_nccl_premul_sum(0.25)
    assert _tensors.reduce_op(op, torch.float32) == (ops.SUM, 0.25)
    with pytest.raises(ValueError, match="PREMUL_SUM needs a floating"):
        _tensors.reduce_op(op, torch.int32)


@pytest.mark.parametrize("op, dtype, match", [
    (R.AVG, torch.int32, "AVG needs a floating"),
    (R.BXOR, torch.float32, "BXOR needs an integer")])
def test_ops_that_do_not_apply_are_refused(op, dtype, match):
    with pytest.raises(ValueError, match=match):
        _tensors.reduce_op(op, dtype)


def test_tensor_buffers_share_memory():
    t = torch.arange(6, dtype=torch.bfloat16)
    (array, datatype) = _tensors.spec(t)
    assert array.ctypes.data == t.data_ptr() and array.nbytes == 12
    assert datatype.Get_name() == "MPIX_BFLOAT16"
    chunks = list(torch.zeros(12).chunk(3))
    flat = _tensors.adjacent(chunks)
    assert flat.data_ptr() == chunks[0].data_ptr() and flat.numel() == 12
    assert _tensors.adjacent([torch.zeros(4), torch.zeros(4)]) is None


DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64",
               torch.float16: "float16", torch.bfloat16: "bfloat16",
               torch.int8: "int8", torch.uint8: "uint8", torch.int32: "int32",
               torch.int64: "int64", torch.bool: "bool"}


@pytest.mark.parametrize("dtype", list(DTYPE_NAMES))
@pytest.mark.parametrize("op", [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND])
def test_raw_allreduce_uses_the_general_paths_dtype_and_op(op, dtype):
    from gloocy import _core
    if op == R.BAND and dtype.is_floating_point:
        assert _tensors.raw_entry(dtype, R(op)) == ()     # the general path refuses it
        return
    want_op, _ = _tensors.reduce_op(op, dtype)
    assert _tensors.raw_entry(dtype, R(op)) == (
        _core.DTYPE_CODES[DTYPE_NAMES[dtype]], dtype.itemsize, want_op.code)


@pytest.mark.parametrize("op, dtype", [
    (R.AVG, torch.float32), (R.SUM, torch.complex64),
    (torch._C._distributed_c10d._make_nccl_premul_sum(0.5), torch.float32)])
def test_raw_allreduce_leaves_what_needs_more_to_the_general_path(op, dtype):
    assert _tensors.raw_entry(dtype, op if isinstance(op, R) else R(op)) == ()
