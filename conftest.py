"""pytest wiring of a source checkout: the ``anyclip_conformance`` plugin for every test.

The plugin (``conformance/src/anyclip_conformance/plugin.py``) provides the ``backend``,
``grad_backend`` and ``xp`` fixtures, the ``xfail_backend`` and ``conformance`` markers, the
xfail lists of the conformance suite, ``--anyclip-backends``, ``--live-tf`` and the
``ANYCLIP_REQUIRE_BACKENDS`` rule, for ``tests/`` and the suite alike.
"""

pytest_plugins = ["anyclip_conformance.plugin"]
