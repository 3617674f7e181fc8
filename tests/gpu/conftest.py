"""GPU tests run only where torch sees a CUDA device (sm_90); elsewhere they are skipped."""
import pytest


def _has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU (GPU tests run via scripts/gpu_check.sh)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
