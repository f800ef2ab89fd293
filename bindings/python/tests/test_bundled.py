"""The library pip bundles in the package (pyproject.toml: scikit-build-core builds
libdeepinfer into deepinfer/libdeepinfer.so.0) is the one loaded when
DEEPINFER_LIBRARY is not set, and it runs a model; DEEPINFER_LIBRARY still
overrides it. Each check runs in a subprocess, since the library loads once per
process. scripts/test.sh sets DEEPINFER_EXPECT_BUNDLED=1, so there a package
without its library fails; elsewhere (the package imported from a source
checkout) the checks skip."""
import json
import os
import subprocess
import sys

import pytest
from conftest import TINY

from deepinfer import _lib

BUNDLED = _lib.BUNDLED


def _bundled_or_skip():
    if os.path.isfile(BUNDLED):
        return
    if os.environ.get("DEEPINFER_EXPECT_BUNDLED") == "1":
        pytest.fail(f"the installed package holds no library: {BUNDLED} is missing")
    pytest.skip("the package was not installed with pip (no bundled library)")


def _run(code, **env):
    e = {k: v for k, v in os.environ.items() if k != "DEEPINFER_LIBRARY"}
    e.update(env)
    out = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_bundled_library_is_loaded_without_deepinfer_library(tiny_ref):
    _bundled_or_skip()
    code = (
        "import json, deepinfer\n"
        "from deepinfer import _lib\n"
        f"with deepinfer.Engine({str(TINY)!r}, n_threads=2) as e:\n"
        f"    ids = e.generate({tiny_ref['prompt']!r}, max_tokens=32, temperature=0,\n"
        "                     ignore_eos=True).tokens\n"
        "print(json.dumps({'path': _lib.path(), 'version': deepinfer.library_version(),\n"
        "                  'ids': ids}))\n"
    )
    got = _run(code)
    assert got["path"] == BUNDLED
    assert os.path.dirname(got["path"]) == os.path.dirname(os.path.abspath(_lib.__file__))
    assert got["version"].count(".") == 2
    # the bundled build computes what transformers computes (the committed oracle)
    assert got["ids"] == tiny_ref["greedy"]


def test_deepinfer_library_overrides_the_bundled_one(tmp_path):
    _bundled_or_skip()
    code = (
        "import json, deepinfer\n"
        "try:\n"
        "    deepinfer.load_library()\n"
        "    print(json.dumps({'loaded': deepinfer._lib.path()}))\n"
        "except deepinfer.LibraryNotFoundError as e:\n"
        "    print(json.dumps({'error': str(e)}))\n"
    )
    missing = str(tmp_path / "libnothing.so")
    got = _run(code, DEEPINFER_LIBRARY=missing)
    assert "error" in got and missing in got["error"]  # not silently the bundled one
