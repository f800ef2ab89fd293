"""Bad input raises a clear DeepinferError and the engine keeps serving."""

import os
import subprocess
import sys

import pytest

import deepinfer
from deepinfer import Status


def still_serves(engine, tiny_ref):
    res = engine.generate(tiny_ref["prompt"], temperature=0, max_tokens=4, ignore_eos=True)
    assert res.tokens == tiny_ref["greedy"][:4]


def test_token_outside_the_vocabulary(tiny, tiny_ref):
    with pytest.raises(deepinfer.InvalidArgumentError) as info:
        tiny.submit([1, 2, 600])
    e = info.value
    assert e.status == Status.INVALID_ARGUMENT and e.status_name == "DI_ERR_INVALID_ARGUMENT"
    assert "tokens[2]" in e.message and "600" in e.message
    assert isinstance(e, ValueError)
    still_serves(tiny, tiny_ref)


@pytest.mark.parametrize(
    "field,kw",
    [
        ("temperature", dict(temperature=101.0)),
        ("top_p", dict(top_p=0.0)),
        ("top_k", dict(top_k=-1)),
        ("presence_penalty", dict(presence_penalty=3.0)),
        ("logit_bias", dict(logit_bias={5: 1000.0})),
    ],
)
def test_bad_sampling_parameter_names_the_field(tiny, tiny_ref, field, kw):
    with pytest.raises(deepinfer.InvalidArgumentError, match=field):
        tiny.submit(tiny_ref["prompt"], **kw)
    still_serves(tiny, tiny_ref)


def test_protocol_request_without_an_encoding(tiny, tiny_ref):
    with pytest.raises(deepinfer.UnsupportedError, match="encoding"):
        tiny.chat({"model": "x", "messages": [{"role": "user", "content": "hi"}]})
    with pytest.raises(deepinfer.InvalidArgumentError, match="protocol"):
        tiny.submit(protocol="smoke-signals", body={})
    with pytest.raises(TypeError):
        tiny.chat(42)
    still_serves(tiny, tiny_ref)


def test_prompt_longer_than_the_context(tiny, tiny_ref):
    with pytest.raises(deepinfer.ContextLengthError):
        tiny.submit([1] * tiny.context_length)
    still_serves(tiny, tiny_ref)


def test_missing_model_file(tmp_path):
    missing = tmp_path / "no-such-model.gguf"
    with pytest.raises(deepinfer.DeepinferIOError) as info:
        deepinfer.Engine(missing)
    assert info.value.status == Status.IO
    assert str(missing) in info.value.message
    assert isinstance(info.value, OSError)


def test_bad_engine_parameter_names_the_field():
    from conftest import TINY

    with pytest.raises(deepinfer.InvalidArgumentError, match="n_threads"):
        deepinfer.Engine(TINY, n_threads=100000)
    with pytest.raises(deepinfer.InvalidArgumentError, match="encoding"):
        deepinfer.Engine(TINY, encoding="klingon")


def test_progress_reaches_one_and_can_cancel_the_load():
    from conftest import TINY

    seen = []
    with deepinfer.Engine(TINY, n_threads=2, progress=seen.append) as e:
        assert e.vocab_size == 512
    assert seen and seen[-1] == 1.0 and seen == sorted(seen)

    with pytest.raises(deepinfer.CancelledError):
        deepinfer.Engine(TINY, progress=lambda f: True)

    class Stop(Exception):
        pass

    def boom(fraction):
        raise Stop("stop loading")

    with pytest.raises(deepinfer.CancelledError) as info:
        deepinfer.Engine(TINY, progress=boom)
    assert isinstance(info.value.__cause__, Stop)


def test_tokenizer_errors(tiny_ref, tmp_path):
    with pytest.raises(deepinfer.DeepinferIOError):
        deepinfer.Tokenizer.load(tmp_path / "missing.json")
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{ not json")
    with pytest.raises(deepinfer.ModelFormatError):
        deepinfer.Tokenizer.load(bad)


def test_smollm2_decode_and_encode_errors(smol):
    tok = smol.tokenizer
    with pytest.raises(deepinfer.InvalidArgumentError, match=r"\[1\]"):
        tok.decode([1, 10**6])
    with pytest.raises(deepinfer.InvalidUTF8Error):
        tok.encode("lone \ud800 surrogate")


def test_library_not_found_says_how_to_set_it(tmp_path):
    """A subprocess, since the library loads once per process."""
    env = dict(os.environ, DEEPINFER_LIBRARY=str(tmp_path / "libnothing.so"))
    code = (
        "import deepinfer\n"
        "try:\n"
        "    deepinfer.Engine('x')\n"
        "except deepinfer.LibraryNotFoundError as e:\n"
        "    assert isinstance(e, OSError)\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert "DEEPINFER_LIBRARY" in out and "libnothing.so" in out


def test_library_version():
    assert deepinfer.library_version().count(".") == 2
    assert deepinfer.load_library().di_version() >= 100


def test_cpu_kernels_names_what_this_cpu_runs():
    k = deepinfer.cpu_kernels()
    flags = open("/proc/cpuinfo").read().split() if os.path.exists("/proc/cpuinfo") else []
    if "avx2" in flags and "fma" in flags and "f16c" in flags:
        assert "avx2+fma+f16c" in k
        assert ("avx512-vnni" in k) == ("avx512_vnni" in flags and "avx512bw" in flags
                                         and "avx512vl" in flags)
    else:
        assert k.startswith("scalar reference")
