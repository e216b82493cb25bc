"""Where the pipeline's models run: a classifier loaded onto its device, and the CPU kernels a run
dispatches to (paper Appendix L: compute; DESIGN 2.7, the manifest's ``environment.cpu``).

* :func:`load_sequence_classifier` - the NLI scorer's and the cross-encoder re-ranker's one way
  to load a sequence classifier (safetensors only, ``trust_remote_code`` off unless asked).
* :func:`cpu_fingerprint` - what a byte-identical re-run of a CPU release must share with the
  machine that made it; the real release's manifest records it and its regeneration test reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["cpu_fingerprint", "load_sequence_classifier"]


def load_sequence_classifier(model: str, device: str | None, trust_remote_code: bool = False) -> tuple[Any, Any, str]:
    """Tokenizer and ``AutoModelForSequenceClassification`` in eval mode (safetensors only).

    Shared by the NLI scorer and the cross-encoder reranker; ``device`` None picks CUDA when
    available.  Returns ``(tokenizer, model, device)``.
    """
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
    net = AutoModelForSequenceClassification.from_pretrained(
        model, use_safetensors=True, trust_remote_code=trust_remote_code
    ).to(device).eval()
    return tokenizer, net, device


def cpu_fingerprint() -> dict[str, str]:
    """What fixes the CPU arithmetic of a torch run besides its inputs and settings.

    torch's vectorized kernels (``capability``: AVX2, AVX512, ...) and MKL's matmul code are
    chosen by the CPU's instruction set, so two machines agree bit for bit only when these
    agree: the torch build, the capability it dispatches to, and the CPU's model and feature
    flags (``/proc/cpuinfo``, hashed, they are long; "unknown" and the hash of nothing where
    there is no such file).  Only that file is read; no command is run.
    """
    import hashlib

    import torch

    model, flags = "unknown", ""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        info = ""
    for line in info.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            model = value.strip()
        elif key.strip() in ("flags", "Features"):
            flags = " ".join(sorted(value.split()))
            break
    return {"torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability(),
            "cpu_model": model, "cpu_flags_sha256": hashlib.sha256(flags.encode()).hexdigest()[:16]}
