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


@pytest.fixture(scope="session", autouse=True)
def _example_kernels_compiled(request):
    """The examples' kernels in every mode (and with 2 and 4 CTAs per SM, and with the device
    library settings of test_examples_with_device_library_settings), compiled in parallel
    into the cache before the first test needs one (when the session runs test_megakernel)."""
    if not _has_gpu() or not any(item.module.__name__.endswith("test_megakernel")
                                 for item in request.session.items):
        return
    from eventtensor.backends.cuda.codegen import GPU_MODES, generate, kernel_name
    from eventtensor.backends.cuda.compiler import compile_many
    from eventtensor.examples import EXAMPLES
    from eventtensor.schedule import prepare
    kernels = []
    for ex in EXAMPLES.values():
        for mode in GPU_MODES:
            p = prepare(ex.build(), mode)
            for ctas in ((1, 2, 4) if mode == "static" else (1, 2) if mode != "unfused"
                         else (1,)):
                kernels.append((generate(p, mode, ctas), kernel_name(p, mode, ctas)))
    from test_megakernel import KNOB_CASES, KNOB_MODES
    for ex in EXAMPLES.values():
        for mode in KNOB_MODES:
            p = prepare(ex.build(), mode)
            kernels += [(generate(p, mode, 1, knobs), kernel_name(p, mode))
                        for knobs in KNOB_CASES]
    compile_many(kernels)
