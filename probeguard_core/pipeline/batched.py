"""Batched reproducible decoding for the transformers engine (paper §3, Appendix L; issue 26).

The prompts of one ``generate`` call are cut into fixed chunks of ``batch_prompts`` in their
order; a chunk is prefilled in ONE left-padded forward pass, its cache is repeated for the n
samples of each prompt, and every decode step is one forward pass over all rows of the chunk.
Sampling is per row and one batched step: inverse-CDF sampling (softmax of logits /
temperature, cumulative sum, ``searchsorted``) with a uniform that depends only on (the
prompt's seed, the sample index, the step) - numpy's PCG64 stream seeded with ``[seed,
sample]`` - so a question's noise never depends on the other prompts of its chunk.  Finished
rows are checked on the host every ``CHECK_EVERY`` steps only (no host synchronisation per
prompt per step); at those checks prompts whose n rows have all finished leave the batch.

A record depends on its chunk's composition in the last bits of floating point (padding and
batch shape change the matmul / attention reductions), so a rerun reproduces the records with
the same chunking (``batch_prompts``, the stage's ``batch_size``), hardware and versions; the
stages record both in ``<out>.run.json``.  Byte-identical records across any chunking are the
engine's batch-invariant mode (``batch_prompts=None``, the default).

Static cache and compiled decode (``static_cache=True``, ``compile_decode=True``; CLI
``--compile-decode``; off by default).  The decode runs over transformers' ``StaticCache``
(its length the call's longest prompt plus ``max_new_tokens``, rounded up to ``STATIC_BUCKET``
positions, so the chunks of a call share one shape and calls few), with a fixed-shape attention mask and every row kept in the
batch until all have finished (a shape that changes would recompile), and with
``compile_decode`` each decode step is ``torch.compile``'d (``model.get_compiled_call``: the
compiled forward ``generate`` itself uses with a static cache; the prefill stays eager).  The
records are the dynamic path's within floating-point tolerance (attention over the masked
tail of the static buffer and fused kernels change the last bits: the tests hold greedy tokens
equal and log-probs within 1e-4 on the tiny model); the manifest records the mode that ran
(``decode``: :func:`resolve_decode`).  Where the model's cache cannot be static (a sliding-window
or hybrid layer, the reference path) or this torch build cannot compile (no dynamo, no C++
compiler for inductor on CPU), :func:`resolve_decode` falls back and says so in one line.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["CHECK_EVERY", "DECODE_MODES", "STATIC_BUCKET", "decode_chunks", "preallocated_layer", "resolve_decode",
           "row_uniforms"]

#: decode steps between two host checks of the finished rows
CHECK_EVERY = 8
#: a static cache's length is rounded up to a multiple of this (fewer shapes to compile)
STATIC_BUCKET = 64
#: the batched decode's cache modes: the preallocated dynamic cache, the static cache, compiled
DECODE_MODES = ("dynamic", "static", "static-compiled")


def resolve_decode(eng: Any, static_cache: bool, compile_decode: bool) -> str:
    """The decode mode ``eng`` (a ``TransformersEngine`` with ``batch_prompts`` set) will run:
    what was asked for where the model and the torch build support it, else the nearest that
    runs, with a one-line note on stderr."""
    if not (static_cache or compile_decode):
        return "dynamic"
    asked = "compile_decode" if compile_decode else "static_cache"
    why = _static_unsupported(eng)
    if why:
        print(f"{asked}: {why}; decoding with the dynamic cache", file=sys.stderr)
        return "dynamic"
    if not compile_decode:
        return "static"
    why = _compile_unsupported(eng.device)
    if why:
        print(f"compile_decode: torch.compile does not run here ({why}); decoding with the static cache, "
              "uncompiled", file=sys.stderr)
        return "static"
    return "static-compiled"


def _static_unsupported(eng: Any) -> str | None:
    """Why the model cannot decode over a ``StaticCache`` here, or None."""
    if not (eng.fast and eng._cache_ok()):
        return (f"{eng.name} decodes on the reference path (fast=False, a sliding-window or non-full-attention "
                "layer, or top-k / top-p sampling)")
    try:
        from transformers import StaticCache
        from transformers.cache_utils import StaticLayer

        cache = StaticCache(config=eng.lm.config, max_cache_len=STATIC_BUCKET)
    except Exception as exc:  # a model config the static cache does not know
        return f"{eng.name} has no static cache in this transformers ({type(exc).__name__}: {exc})"
    if not all(type(layer) is StaticLayer for layer in cache.layers):
        return f"{eng.name}'s static cache is not all full-attention layers"
    return None


def _compile_unsupported(device: str) -> str | None:
    """Why ``torch.compile`` cannot run on ``device`` in this build (a tiny function compiled and
    run once: a missing C++ compiler or an unsupported Python shows here), or None."""
    import torch

    try:
        if not torch._dynamo.is_dynamo_supported():
            return "dynamo is not supported on this Python / platform"
        f = torch.compile(lambda x: x * 2 + 1, dynamic=False)
        f(torch.ones(4, device=device))
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    return None


def row_uniforms(seeds: list[int], n: int, steps: int) -> np.ndarray:
    """``(len(seeds) * n, steps)`` uniforms in [0, 1): row ``p * n + r`` is the stream of
    ``numpy.random.default_rng([seeds[p], r])`` (a prefix of it for fewer steps)."""
    return np.stack([np.random.default_rng([int(s), r]).random(steps) for s in seeds for r in range(n)])


def preallocated_layer(keys: Any, values: Any, extra: int) -> Any:
    """A full-attention cache layer holding ``keys``/``values`` (batch, heads, length, dim) in a
    buffer with room for ``extra`` more positions, updated in place.

    ``DynamicLayer.update`` concatenates, copying the whole cache at every decode step; on a CPU
    with 16 rows of ~1,200 cached positions that copy costs more than the step's matmuls. The
    layer exposes the filled prefix as ``keys``/``values`` views, so the model code and the mask
    sizes see exactly what a ``DynamicLayer`` would.
    """
    from transformers.cache_utils import DynamicLayer

    class _Preallocated(DynamicLayer):
        def __init__(self) -> None:
            super().__init__()
            b, h, n, d = keys.shape
            self._k = keys.new_empty((b, h, n + extra, d))
            self._v = values.new_empty((b, h, n + extra, d))
            self._k[:, :, :n], self._v[:, :, :n] = keys, values
            self._n, self.dtype, self.device, self.is_initialized = n, keys.dtype, keys.device, True
            self._view()

        def _view(self) -> None:
            self.keys, self.values = self._k[:, :, :self._n], self._v[:, :, :self._n]

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            m = key_states.shape[-2]
            if self._n + m > self._k.shape[-2]:
                raise RuntimeError(f"preallocated cache full ({self._k.shape[-2]} positions)")
            self._k[:, :, self._n:self._n + m] = key_states
            self._v[:, :, self._n:self._n + m] = value_states
            self._n += m
            self._view()
            return self.keys, self.values

        def select_rows(self, rows: Any) -> None:
            self._k, self._v = self._k[rows], self._v[rows]
            self._view()

    return _Preallocated()


def _static_decode(eng: Any, pkv: Any, mask: Any, length: int) -> tuple[Any, Any, Any]:
    """The static cache of a chunk (the prefill's ``pkv`` repeated to the mask's rows, ``length``
    positions), its fixed-shape attention mask (zeros over the unfilled tail) and the decode
    step's call (compiled with ``static-compiled``)."""
    import torch
    from transformers import StaticCache

    rows, filled = mask.shape
    cache = StaticCache(config=eng.lm.config, max_cache_len=length)
    n = rows // pkv.layers[0].keys.shape[0]
    for layer, src in zip(cache.layers, pkv.layers):
        layer.update(src.keys.repeat_interleave(n, 0), src.values.repeat_interleave(n, 0))
    full = torch.zeros((rows, length), dtype=mask.dtype, device=mask.device)
    full[:, :filled] = mask
    if eng.decode != "static-compiled":
        return cache, full, eng.lm
    from transformers.generation.configuration_utils import CompileConfig

    return cache, full, eng.lm.get_compiled_call(CompileConfig(dynamic=False))


def decode_chunks(eng: Any, ids: list[list[int]], seeds: list[int], n: int, temperature: float,
                  max_new_tokens: int, logprobs: int | None) -> list[list[Any]]:
    """The batched decode of ``eng`` (a ``TransformersEngine``) in chunks of ``eng.batch_prompts``."""
    out: list[list[Any]] = []
    k = eng.batch_prompts
    # the static cache's length: one per call (its longest prompt + max_new_tokens, bucketed)
    length = -(-(max(map(len, ids), default=0) + max_new_tokens) // STATIC_BUCKET) * STATIC_BUCKET
    for i in range(0, len(ids), k):
        out.extend(_decode_chunk(eng, ids[i:i + k], seeds[i:i + k], n, temperature, max_new_tokens, logprobs, length))
    return out


def _decode_chunk(eng: Any, ids: list[list[int]], seeds: list[int], n: int, temperature: float,
                  max_new_tokens: int, logprobs: int | None, length: int) -> list[list[Any]]:
    import torch
    from transformers import DynamicCache

    dev, q, T = eng.device, len(ids), max_new_tokens
    static = eng.decode != "dynamic"
    R = q * n
    lens = [len(x) for x in ids]
    lmax = max(lens)
    with torch.inference_mode():
        x = torch.full((q, lmax), eng._pad, dtype=torch.long)
        mask = torch.zeros((q, lmax), dtype=torch.long)
        for p, t in enumerate(ids):
            x[p, lmax - len(t):] = torch.tensor(t)
            mask[p, lmax - len(t):] = 1
        x, mask = x.to(dev), mask.to(dev)
        pos0 = (mask.cumsum(-1) - 1).clamp(min=0)
        o = eng.lm(input_ids=x, attention_mask=mask, position_ids=pos0, use_cache=True, logits_to_keep=1)
        pkv = o.cache if eng._cache_kw == "cache" else o.past_key_values
        if static:
            cache, mask, step_call = _static_decode(eng, pkv, mask.repeat_interleave(n, 0), length)
        else:
            cache = DynamicCache(ddp_cache_data=[(lay.keys.repeat_interleave(n, 0), lay.values.repeat_interleave(n, 0))
                                                 for lay in pkv.layers])
            cache.layers = [preallocated_layer(lay.keys, lay.values, T) for lay in cache.layers]
            mask, step_call = mask.repeat_interleave(n, 0), eng.lm
        logits = o.logits[:, -1].float().repeat_interleave(n, 0)
        del o, pkv
        pos = torch.tensor([L for L in lens for _ in range(n)], device=dev)[:, None]
        eos = torch.tensor(eng._eos, device=dev)
        U = torch.tensor(row_uniforms(seeds, n, T), dtype=torch.float32, device=dev)
        kk = None if logprobs is None else min(logprobs, logits.shape[-1])
        toks = torch.full((R, T), eng._pad, dtype=torch.long, device=dev)
        lp = torch.zeros((R, T), device=dev) if kk else None
        tv = torch.zeros((R, T, kk), device=dev) if kk else None
        ti = torch.zeros((R, T, kk), dtype=torch.long, device=dev) if kk else None
        alive = torch.arange(R, device=dev)  # original row of each batch row
        unfinished = torch.ones(R, dtype=torch.bool, device=dev)
        V = logits.shape[-1]
        for step in range(T):
            if temperature > 0:
                cdf = torch.softmax(logits / temperature, dim=-1).cumsum(-1)
                u = (U[alive, step] * cdf[:, -1])[:, None]
                nt = torch.searchsorted(cdf, u, right=True)[:, 0].clamp_max(V - 1)
            else:
                nt = torch.argmax(logits, dim=-1)
            nt = torch.where(unfinished, nt, torch.full_like(nt, eng._pad))
            toks[alive, step] = nt
            if kk:
                lsm = torch.log_softmax(logits, dim=-1)
                v, j = torch.topk(lsm, kk, dim=-1)
                lp[alive, step] = lsm.gather(-1, nt[:, None])[:, 0]
                tv[alive, step], ti[alive, step] = v, j
            unfinished = unfinished & ~torch.isin(nt, eos)
            if step == T - 1:
                break
            if (step + 1) % CHECK_EVERY == 0:  # the only host synchronisation of the loop
                live = unfinished.view(-1, n).any(1)
                if not bool(live.any()):
                    break
                if not static and not bool(live.all()):  # prompts whose n rows all finished leave the batch
                    rows = live.repeat_interleave(n).nonzero()[:, 0]
                    for layer in cache.layers:
                        layer.select_rows(rows)
                    mask, pos, nt, unfinished, alive = mask[rows], pos[rows], nt[rows], unfinished[rows], alive[rows]
            if static:  # fixed shapes: the new token's slot of the static buffer opens in place
                mask[:, lmax + step] = 1
            else:
                mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype, device=dev)], dim=1)
            o = step_call(input_ids=nt[:, None], attention_mask=mask, position_ids=pos, use_cache=True,
                          **{eng._cache_kw: cache})
            pos = pos + 1
            logits = o.logits[:, -1].float().clone()  # a copy: a compiled call may reuse its output buffer
            del o
        seqs = toks.tolist()
        host = None if not kk else (lp.double().cpu().numpy(), tv.double().cpu().numpy(), ti.cpu().numpy())
    out = []
    for p in range(q):
        sl = slice(p * n, (p + 1) * n)
        if host is None:
            out.append(eng._rows_to_generations(seqs[sl], None, None, None))
        else:
            out.append(eng._rows_to_generations(seqs[sl], host[0][sl], host[1][sl], host[2][sl]))
    return out
