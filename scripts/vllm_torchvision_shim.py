"""Make PyPI's torchvision importable beside the CPU build of torch (installed into the vLLM venv only).

Every torchvision wheel on PyPI is linked against CUDA builds of torch; beside `torch==2.13.0+cpu` its C++
extension does not load, and `import torchvision` then fails on `torch.library.register_fake("torchvision::nms")`
(`operator torchvision::nms does not exist`). vLLM and transformers import torchvision for Qwen2.5-VL's
processors, which use only its pure-PyTorch transforms. `scripts/vllm_env.sh` copies this file into the vLLM
venv's site-packages with a `.pth` line that imports it at start-up. It costs nothing until something imports
torchvision: then, and only when the extension really fails to load, it declares the two operator schemas
that torchvision's fake-tensor registrations need (`nms`, `qnms`), with no kernel behind them, so calling them
still fails loudly while everything else in torchvision works.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_LIBRARIES: list = []  # keep the fragment alive for the life of the process


def _declare_missing_ops() -> None:
    import glob
    import os

    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.submodule_search_locations is None:
        return
    folder = list(spec.submodule_search_locations)[0]
    for path in glob.glob(os.path.join(folder, "_C*.so")):
        try:
            torch.ops.load_library(path)
            return  # the real extension loads: nothing to do
        except (ImportError, OSError):
            pass
    if hasattr(torch.ops.torchvision, "nms"):
        return
    library = torch.library.Library("torchvision", "FRAGMENT")
    for schema in _SCHEMAS:
        library.define(schema)
    _LIBRARIES.append(library)


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torchvision":
            sys.meta_path.remove(self)
            _declare_missing_ops()
        return None  # let the ordinary finders import it


if not any(isinstance(f, _Hook) for f in sys.meta_path) and "torchvision" not in sys.modules:
    sys.meta_path.insert(0, _Hook())
