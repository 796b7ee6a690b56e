"""pytest wiring of a source checkout: the conformance suite's plugin serves every test.

``anyclip_conformance.plugin`` provides the ``backend``/``grad_backend``/``xp`` fixtures, the
markers, the xfail lists, ``--anyclip-backends``, ``--live-tf`` and ``ANYCLIP_REQUIRE_BACKENDS``.
"""

pytest_plugins = ["anyclip_conformance.plugin"]
