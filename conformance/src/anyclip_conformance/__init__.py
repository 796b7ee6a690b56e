"""anyclip's conformance suite: TensorFlow 2.21 reference data and the checks against it.

Install it next to anyclip and run it on your own backends and devices::

    pip install anyclip anyclip-conformance
    python -m anyclip_conformance --backends numpy,torch

Modules: ``backends`` (the backend ids and the one loader), ``compare`` (the one comparison,
in ulps), ``budgets`` (the ulp budgets), ``reference`` (the data and the xfail lists),
``specs`` (the data format), ``harness`` (:func:`check_case`: one case on one backend),
``cases`` and ``generate`` (the catalogue and the TensorFlow generator, for maintainers),
``plugin`` (the pytest plugin), ``report`` (the matrix) and ``suite`` (the tests).

The names below are what anyclip's own tests use.
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
