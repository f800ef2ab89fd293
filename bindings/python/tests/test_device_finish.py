"""Engine(device=...), Done.finish_reason / finish_text on token requests, and
the top_logprobs message in this API's words (docs/python.md)."""
import pytest

import deepinfer
from deepinfer import Done, Finish, InvalidArgumentError, UnsupportedError

from conftest import TINY


def test_bad_device_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="device: unknown device 'gpu'"):
        deepinfer.Engine(str(TINY), device="gpu")


def test_cuda_device_without_a_usable_gpu_says_why():
    # this machine has no GPU (or no CUDA module): di_engine_create's
    # DI_ERR_UNSUPPORTED names the reason (module, driver or device)
    try:
        e = deepinfer.Engine(str(TINY), device="cuda")
    except UnsupportedError as exc:
        assert exc.status_name == "DI_ERR_UNSUPPORTED"
        assert "cuda" in str(exc).lower(), str(exc)
    else:  # a machine with a usable GPU: the engine runs
        e.close()


def test_token_request_finish_reason_has_the_library_names(tiny, tiny_ref):
    done = [ev for ev in tiny.submit(tiny_ref["prompt"], temperature=0, max_tokens=2,
                                     ignore_eos=True) if isinstance(ev, Done)][0]
    assert done.finish_reason is Finish.LENGTH
    assert str(done.finish_reason) == "length" and f"{done.finish_reason}" == "length"
    assert done.finish_reason.c_name == "DI_FINISH_LENGTH"
    assert done.finish_text == "length"


def test_top_logprobs_without_logprobs_names_the_keyword(tiny, tiny_ref):
    with pytest.raises(InvalidArgumentError, match=r"top_logprobs: requires logprobs=True"):
        tiny.submit(tiny_ref["prompt"], top_logprobs=3)
