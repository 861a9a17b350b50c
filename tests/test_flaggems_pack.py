"""The FlagGems pack on a machine without GPU or triton: registration, vendor choice, fallbacks.

The kernels themselves are tested in Triton's CPU interpreter
(``test_flaggems_interpret.py``) and on a GPU (``test_flaggems_gpu.py``); here the
pack must cost nothing where it is not chosen, take its targets where it is, and
hand every call it cannot run back to upstream, saying so once.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

import fl_patch
from fl_patch import Status
from fl_patch._vendors import vendor_priority
from fl_patch.impls.flaggems import _runtime

from .conftest import clean_env

NORM = "megatron.core.transformer.torch_norm.WrappedTorchNorm"


def test_registry_imports_no_torch_triton_flag_gems_or_megatron(run_python) -> None:
    code = (
        "import sys, json; import fl_patch.impls.flaggems.registry as r; "
        "print(json.dumps({'heavy': sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'triton', 'flag_gems', 'megatron')), 'n': len(r.PATCHES) + len(r.CREATED)}))"
    )
    out = json.loads(run_python("-c", code).stdout)
    assert out == {"heavy": [], "n": 10}


def test_flaggems_first_then_the_detected_platform() -> None:
    # MG_FL_PREFER=flaggems on a GPU machine: the pack, then any cuda impl, then upstream
    assert vendor_priority(("flaggems",), "cuda") == ("flaggems", "cuda", "default")
    assert vendor_priority(("flaggems",), "cpu") == ("flaggems", "cpu", "default")


@pytest.fixture
def pack(megatron_core, engine, monkeypatch: pytest.MonkeyPatch):
    """The pack's registrations (FL_PATCH_PACKS=none keeps the shipped registry out of the engine fixture)."""
    from fl_patch.impls.flaggems.registry import CREATED, FLAGGEMS, PATCHES

    for target, impl in PATCHES:
        fl_patch.register(target, impl, vendor=FLAGGEMS)
    for target, impl in CREATED:
        fl_patch.register(target, impl, vendor=FLAGGEMS, create=True)
    _runtime.reset_fallbacks()
    yield PATCHES + CREATED
    _runtime.reset_fallbacks()


def _record(target: str) -> fl_patch.PatchRecord:
    (record,) = [r for r in fl_patch.report() if r.target == target and r.vendor == "flaggems"]
    return record


def test_not_chosen_without_mg_fl_prefer(pack) -> None:
    from megatron.core.transformer import torch_norm

    fl_patch.install()
    assert _record(NORM).status is Status.OTHER_VENDOR
    config = _config()
    assert type(torch_norm.WrappedTorchNorm(config=config, hidden_size=16)) is torch.nn.RMSNorm


def _config():
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(num_layers=1, hidden_size=16, num_attention_heads=2, normalization="RMSNorm")


def test_chosen_with_mg_fl_prefer_and_cpu_tensors_run_upstream_said_once(
    pack, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from megatron.core.transformer import torch_norm
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    from fl_patch.impls.flaggems import norm

    monkeypatch.setenv("MG_FL_PREFER", "flaggems")
    fl_patch.install()
    for target, _ in pack:
        record = _record(target)
        assert record.status in (Status.APPLIED, Status.WAITING), (target, record.status, record.detail)
    assert _record(NORM).status is Status.APPLIED
    assert DotProductAttention.forward.__module__ == "fl_patch.impls.flaggems.attention"

    module = torch_norm.WrappedTorchNorm(config=_config(), hidden_size=16, eps=1e-5)
    assert type(module) is norm.FlagGemsRMSNorm
    x = torch.randn(3, 16)
    with caplog.at_level(logging.WARNING, logger="fl_patch.flaggems"):
        for _ in range(3):
            assert torch.equal(module(x), torch.nn.functional.rms_norm(x, (16,), module.weight, 1e-5))
    assert _runtime.FALLBACKS == {("rms_norm", "input on cpu (the kernels need CUDA)"): 3}
    assert [r.getMessage() for r in caplog.records if "rms_norm" in r.getMessage()] == [
        "fl_patch flaggems: rms_norm runs upstream megatron-core: input on cpu (the kernels need CUDA) (logged once)"
    ]

    fl_patch.uninstall()
    assert type(torch_norm.WrappedTorchNorm(config=_config(), hidden_size=16)) is torch.nn.RMSNorm


def test_pack_on_a_cpu_machine_end_to_end(run_python) -> None:
    """``MG_FL_PREFER=flaggems`` on a CPU: flaggems, then the cpu pack (megatron imports), then upstream."""
    code = (
        "import json, fl_patch; fl_patch.install()\n"
        "from fl_patch._activation import ENGINE\n"
        "import megatron.core, torch\n"
        "from megatron.core.models.common.embeddings import rope_utils\n"
        "print(json.dumps({'vendors': ENGINE.vendors(), 'status': {r.target.rsplit('.', 1)[-1]: "
        "r.status.value for r in fl_patch.report() if r.chosen_vendor == r.vendor}}))\n"
    )
    out = json.loads(run_python("-c", code, env=clean_env(MG_FL_PREFER="flaggems")).stdout.splitlines()[-1])
    assert out["vendors"] == ["flaggems", "cpu", "default"]
    assert out["status"]["apply_rotary_pos_emb"] == "applied"
    assert out["status"]["paged_stash"] == "applied"  # the cpu pack still serves what flaggems does not register


def test_backend_override_is_parsed_and_validated(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    monkeypatch.setenv("FL_GEMS_BACKEND", "rms_norm=flaggems, rope=flaggems, nonsense, attention=TRITON")
    _runtime.reset_fallbacks()
    try:
        with caplog.at_level(logging.WARNING, logger="fl_patch.flaggems"):
            assert _runtime.backend("rms_norm") == "flaggems"
            assert _runtime.backend("attention") == "triton"
            assert _runtime.backend("rope") == "triton"  # FlagGems has no training RoPE: entry ignored
        ignored = [r.getMessage() for r in caplog.records]
        assert len(ignored) == 2 and "rope=flaggems" in ignored[0] and "nonsense" in ignored[1]
        with _runtime.use_backend("rms_norm", "triton"):
            assert _runtime.backend("rms_norm") == "triton"
        assert _runtime.backend("rms_norm") == "flaggems"
        with pytest.raises(ValueError, match="no backend"):
            with _runtime.use_backend("rope", "flaggems"):
                pass
    finally:
        monkeypatch.delenv("FL_GEMS_BACKEND")
        _runtime.reset_fallbacks()
