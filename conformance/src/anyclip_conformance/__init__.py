"""anyclip's conformance suite: TensorFlow 2.21 reference data and the checks against it.

``pip install anyclip anyclip-conformance``, then ``python -m anyclip_conformance --backends
numpy,torch`` (see ``README.md``). The names below are what anyclip's own tests use.
"""

from __future__ import annotations

from anyclip_conformance.backends import BACKEND_IDS, Backend, BackendId, load_backend
from anyclip_conformance.compare import Mismatch, assert_array, assert_same_bits, ulp_distance
from anyclip_conformance.harness import check_case

__all__ = [
    "BACKEND_IDS",
    "Backend",
    "BackendId",
    "Mismatch",
    "assert_array",
    "assert_same_bits",
    "check_case",
    "load_backend",
    "ulp_distance",
]

__version__ = "0.1.0"
