"""Host data given beside an array on another device goes to that array's device.

On CUDA (torch 2.11, an H200) a Python-list ``t`` beside a bound on ``cuda:0`` was made on the
CPU ("Expected all tensors to be on the same device, cuda:0 and cpu"), and so were list ``ids``
beside a table on the GPU ("index is on cpu") and the bool lists of ``clip_by_global_norm``
beside a GPU ``use_norm``. TF places such values with the op. Here every entry point that
converts host data runs with its array argument on a device other than the default: on
array-api-strict's ``device1`` (a real second device that refuses mixed devices, so the values
are checked too, against hand-derived results), and on torch's ``cuda`` under
``FakeTensorMode`` (no GPU needed: device, dtype and shape). A ``meta`` tensor, which has no
values, keeps data off it: the call is refused as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import anyclip
from anyclip import constraints
from anyclip._api import bind
from anyclip._kernels import GENERIC

#: name -> (call taking ``on`` (values -> float32 array on the other device) and ``api`` (the
#: functions to call for a global norm), expected, dtype).
CASES: dict[str, tuple[Callable[[Any, Any], Any], Any, str]] = {
    "clip_by_value": (
        lambda on, api: anyclip.clip_by_value([0.5, 9.0], on(0.0), 1.0),
        [0.5, 1.0],
        "float32",
    ),
    "clip_by_value-numpy-scalar": (
        lambda on, api: anyclip.clip_by_value(np.float32(9.0), -1.0, on(1.0)),
        1.0,
        "float32",
    ),
    "clip_by_norm": (
        lambda on, api: anyclip.clip_by_norm([3.0, 4.0], on(1.0)),
        [0.6, 0.8],
        "float32",
    ),
    "clip_by_average_norm": (
        # t * c * minimum(rsqrt(25) * 2, 1 / c) = [3, 4] * 0.4
        lambda on, api: anyclip.clip_by_average_norm([3.0, 4.0], on(1.0)),
        [1.2, 1.6],
        "float32",
    ),
    "l2_normalize": (
        lambda on, api: anyclip.l2_normalize([3.0, 4.0], epsilon=on(1e-12)),
        [0.6, 0.8],
        "float32",
    ),
    "global_norm": (
        lambda on, api: api.global_norm([[3.0, 4.0], on([0.0])]),
        5.0,
        "float32",
    ),
    "clip_by_global_norm": (
        lambda on, api: api.clip_by_global_norm([[3.0, 4.0], on([0.0])], 1.0)[0][0],
        [0.6, 0.8],
        "float32",
    ),
    "clip_by_global_norm-bools": (
        # factor 0 * minimum(1 / 2, 1 / 0) = 0, cast to bool: False; `*` on bools is `and`
        lambda on, api: anyclip.clip_by_global_norm([[True, False], True], 0.0, use_norm=on(2.0))[
            0
        ][0],
        [False, False],
        "bool",
    ),
    "embedding_lookup": (
        lambda on, api: anyclip.embedding_lookup(
            on([[3.0, 4.0], [1.0, 0.0]]), [1, 0], max_norm=1.0
        ),
        [[1.0, 0.0], [0.6, 0.8]],
        "float32",
    ),
    "embedding_lookup-shards": (
        lambda on, api: anyclip.embedding_lookup([on([[3.0, 4.0]]), on([[1.0, 0.0]])], [1, 0]),
        [[1.0, 0.0], [3.0, 4.0]],
        "float32",
    ),
    "max_norm": (
        # w * clip(5, 0, 1) / (1e-7 + 5): 1e-7 vanishes in float32's 5
        lambda on, api: constraints.max_norm([[3.0, 4.0]], on(1.0), axis=1),
        [[0.6, 0.8]],
        "float32",
    ),
}


class Placement:
    """Arrays on a device other than the library's default, and how to check a result there."""

    def __init__(self, name: str) -> None:
        self.name = name

    #: The functions the global-norm cases call.
    api: Any = anyclip

    def on(self, values: Any) -> Any:
        raise NotImplementedError

    def context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def check(self, out: Any, expected: Any, dtype: str) -> None:
        raise NotImplementedError


class StrictDevice1(Placement):
    """array-api-strict's ``device1``: refuses arrays of two devices, keeps values."""

    def __init__(self) -> None:
        super().__init__("array_api_strict-device1")
        self.xp = pytest.importorskip("array_api_strict")
        self.device = self.xp.Device("device1")

    def on(self, values: Any) -> Any:
        return self.xp.asarray(values, dtype=self.xp.float32, device=self.device)

    def check(self, out: Any, expected: Any, dtype: str) -> None:
        assert type(out).__module__.startswith("array_api_strict")
        assert out.device == self.device
        assert str(out.dtype).rsplit(".", 1)[-1] == dtype
        want = np.asarray(expected, dtype=dtype)
        assert tuple(out.shape) == want.shape
        # read through DLPack: array-api-strict's `to_device` calls NumPy 2's `asarray(copy=)`,
        # which NumPy 1.26 (the floor) does not have
        got = np.from_dlpack(out)
        if dtype == "bool":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=2e-7)


class FakeCuda(Placement):
    """torch tensors on ``cuda`` made under ``FakeTensorMode`` (shapes, dtypes, devices)."""

    def __init__(self) -> None:
        super().__init__("torch-fake-cuda")
        self.torch = pytest.importorskip("torch")
        from torch._subclasses.fake_tensor import FakeTensorMode

        self.mode = FakeTensorMode()
        # the global norms through the generic kernels: the torch fast path's norms of fake
        # CUDA tensors need a CUDA build (the conversions under test are the same code)
        self.api = bind(GENERIC)

    def on(self, values: Any) -> Any:
        return self.torch.tensor(values, dtype=self.torch.float32, device="cuda")

    def context(self) -> contextlib.AbstractContextManager[Any]:
        return self.mode

    def check(self, out: Any, expected: Any, dtype: str) -> None:
        assert isinstance(out, self.torch.Tensor)
        assert out.device.type == "cuda"
        assert out.dtype == getattr(self.torch, dtype)
        assert tuple(out.shape) == np.shape(expected)


@pytest.fixture(params=["array_api_strict-device1", "torch-fake-cuda"])
def placement(request: pytest.FixtureRequest) -> Iterator[Placement]:
    yield StrictDevice1() if request.param.startswith("array_api_strict") else FakeCuda()


@pytest.mark.parametrize("name", list(CASES))
def test_host_data_goes_to_the_arrays_device(placement: Placement, name: str):
    call, expected, dtype = CASES[name]
    with placement.context():
        out = call(placement.on, placement.api)
        placement.check(out, expected, dtype)


def test_data_beside_a_meta_tensor_stays_and_is_refused():
    torch = pytest.importorskip("torch")
    meta = torch.tensor(0.0, device="meta")
    with pytest.raises(TypeError, match=r"`clip_value_min` is a tensor on the meta device"):
        anyclip.clip_by_value([0.5, 9.0], meta, 1.0)
