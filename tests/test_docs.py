"""The documentation cannot go stale.

* Every public name is used in a runnable example of ``docs/porting.md``. (The API page is
  rendered from the docstrings by mkdocstrings; ``tests/test_docs_site.py`` builds the site and
  checks in a browser that it lists every public name.)
* Every ```python block of ``README.md`` and of every page in ``docs/`` runs, except the
  TensorFlow reference blocks (the tests never import TensorFlow). A block's output must be
  exactly what its ``# ->`` comments say, one comment per printed line, so the outputs shown in
  the docs are the ones anyclip gives.
* A block that uses torch.distributed (a process group: DDP, FSDP2, tensor parallel, ...) runs
  in a Python of its own (``tests/conftest.py``'s ``DocsBlockRunner``), in the same globals,
  folder, environment and warning filters as a block run here, its output compared the same
  way. It gets minutes, not forever: a gloo group's teardown once hung the test process (its
  threads joined from a DDP reducer freed after the group), which no time limit could stop
  in-process; there the Python is killed and the test fails naming the block.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

import pytest

import anyclip

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: The pages whose python blocks are executed: the README and every page of the site.
PAGES = (ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "_ext" not in p.parts))
#: Pages the site must have (the nav of mkdocs.yml; ``mkdocs build --strict`` fails on a page
#: missing from it).
REQUIRED_PAGES = (
    ROOT / "README.md",
    *(
        DOCS / f"{name}.md"
        for name in (
            "index",
            "quickstart",
            "porting",
            "api/index",
            "tf-behaviour",
            "beyond-tf",
            "conformance",
            "performance",
            "faq",
            "distributed",
        )
    ),
)

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_EXPECTED = re.compile(r"#\s*->\s?(.*)$")
_TORCH_DISTRIBUTED = re.compile(
    r"\btorch\.distributed\b|^\s*from torch import [^\n]*\bdistributed\b", re.MULTILINE
)


def is_tf_reference(code: str) -> bool:
    """TensorFlow reference code: shown for comparison, never run by the tests."""
    return "tensorflow" in code or "tf." in code


def uses_torch_distributed(code: str) -> bool:
    """The block uses torch.distributed: it may start a process group, so it runs out of process."""
    return _TORCH_DISTRIBUTED.search(code) is not None


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """(line number, code) of every ```python block in ``page`` (none if it is missing)."""
    if not page.exists():
        return []
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _FENCE.finditer(text)]


def _block_ids() -> list[pytest.param]:
    params = []
    for page in PAGES:
        for line, code in python_blocks(page):
            if not is_tf_reference(code):
                params.append(pytest.param(page, code, id=f"{page.name}:{line}"))
    return params


# ------------------------------------------------------------------ pages
@pytest.mark.parametrize("page", REQUIRED_PAGES, ids=lambda p: p.name)
def test_page_exists(page):
    assert page.is_file(), f"{page} is missing"


# ------------------------------------------------------------ public names
@pytest.mark.parametrize("name", anyclip.__all__)
def test_public_name_is_used_in_porting_guide(name):
    runnable = [code for _, code in python_blocks(DOCS / "porting.md") if not is_tf_reference(code)]
    used = re.compile(rf"\banyclip\.{re.escape(name)}[(.]")
    assert any(used.search(code) for code in runnable), (
        f"docs/porting.md has no runnable example that uses anyclip.{name}"
    )


# ------------------------------------------------------------ code blocks
def test_tf_reference_blocks_do_not_use_anyclip():
    """A block is skipped as TF reference code only if it is pure TF, so no anyclip example is
    ever skipped by accident (for instance by mentioning ``tf.`` in a comment)."""
    for page in PAGES:
        for line, code in python_blocks(page):
            if is_tf_reference(code):
                assert "anyclip" not in code, f"{page.name}:{line} mixes TF and anyclip"


def test_pages_have_runnable_examples():
    assert len(_block_ids()) >= 20


def test_process_group_blocks_run_out_of_process():
    """Every block that starts a process group runs in a Python of its own, whichever way it
    imports torch.distributed."""
    starts = [
        (page.name, line)
        for page in PAGES
        for line, code in python_blocks(page)
        if not is_tf_reference(code) and re.search(r"init_process_group|init_device_mesh", code)
        if not uses_torch_distributed(code)
    ]
    assert not starts, f"blocks that start a process group would run in the test process: {starts}"
    assert uses_torch_distributed("from torch import nn, distributed as dist")
    assert not uses_torch_distributed("import torch\nprint(torch.ones(2))")


@pytest.mark.parametrize(("page", "code"), _block_ids())
def test_code_block_runs_and_prints_what_it_says(page, code, request):
    for module in ("numpy", "torch", "jax", "optax"):
        if re.search(rf"^\s*(import|from) {module}\b", code, re.MULTILINE):
            pytest.importorskip(module)
    expected = [m.group(1).rstrip() for m in map(_EXPECTED.search, code.splitlines()) if m]
    if uses_torch_distributed(code):
        runner = request.getfixturevalue("docs_runner")  # tests/conftest.py
        name = request.node.callspec.id  # page.md:line
        try:
            lines = runner.run(name, code, runner.warning_filters_here())
        except runner.Failed as exc:
            failed = f"{page.relative_to(ROOT)}: {exc}"
        else:
            failed = ""
        if failed:  # raised here, not in the except clause: the message alone, no chain
            pytest.fail(failed, pytrace=False)
    else:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, f"<{page.name}>", "exec"), {"__name__": "__docs__"})
        finally:
            # blocks print torch tensors with more decimals (torch.set_printoptions): not for
            # others
            if sys.modules.get("torch") is not None:
                sys.modules["torch"].set_printoptions(profile="default")
        lines = out.getvalue().splitlines()
    printed = [line.rstrip() for line in lines]
    assert printed == expected, (
        f"the block prints\n{printed}\nbut its `# ->` comments say\n{expected}"
    )
