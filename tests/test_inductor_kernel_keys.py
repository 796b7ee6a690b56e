"""The test run's key for Inductor's compiled C++: the torch build, not the venv's folder.

The root ``conftest.py`` (``_stable_inductor_kernel_keys``) makes ``torch._inductor.codecache``
key a kernel by its source and its compile command with the torch folder written as the torch
build, so that a fresh clone (another ``.venv``) finds the kernels an earlier clone compiled.
"""

from __future__ import annotations

import pytest

SOURCE = 'extern "C" void kernel(float* out) { out[0] = 1.0f; }'


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
def test_kernel_key_names_the_torch_build_not_its_folder(backend, tmp_path, monkeypatch):
    torch = backend.module
    codecache = pytest.importorskip("torch._inductor.codecache")
    from torch.utils import cpp_extension

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # not the machine's cache
    folder = cpp_extension._TORCH_PATH
    build = f"<torch {torch.__version__} {torch.version.git_version}>"

    def key(torch_folder: str) -> str:
        command = f"g++ -I{torch_folder}/include -shared -L{torch_folder}/lib -ltorch"
        name, path = codecache.write(SOURCE, "cpp", extra=command)
        assert path.startswith(str(tmp_path))
        return name

    here = key(folder)
    assert here == key(build)  # this venv's torch keys as its build would anywhere
    assert here != key("/another/venv/lib/python3/site-packages/torch")  # another folder
    # a sibling folder that starts with the torch folder's name keeps its own path
    vision = f"-I{folder}vision/include"
    assert (
        codecache.write(SOURCE, "cpp", vision)[0]
        != codecache.write(SOURCE, "cpp", f"-I{build}vision/include")[0]
    )
    # keywords as torch's own callers pass them (the precompiled header's key)
    by_keyword, _ = codecache.write(content=SOURCE, extension="cpp", extra=f"-I{folder}/x")
    assert by_keyword == codecache.write(SOURCE, "cpp", f"-I{build}/x")[0]
