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
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CHECK_EVERY", "decode_chunks", "preallocated_layer", "row_uniforms"]

#: decode steps between two host checks of the finished rows
CHECK_EVERY = 8


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


def decode_chunks(eng: Any, ids: list[list[int]], seeds: list[int], n: int, temperature: float,
                  max_new_tokens: int, logprobs: int | None) -> list[list[Any]]:
    """The batched decode of ``eng`` (a ``TransformersEngine``) in chunks of ``eng.batch_prompts``."""
    out: list[list[Any]] = []
    k = eng.batch_prompts
    for i in range(0, len(ids), k):
        out.extend(_decode_chunk(eng, ids[i:i + k], seeds[i:i + k], n, temperature, max_new_tokens, logprobs))
    return out


def _decode_chunk(eng: Any, ids: list[list[int]], seeds: list[int], n: int, temperature: float,
                  max_new_tokens: int, logprobs: int | None) -> list[list[Any]]:
    import torch
    from transformers import DynamicCache

    dev, q, T = eng.device, len(ids), max_new_tokens
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
        cache = DynamicCache(ddp_cache_data=[(lay.keys.repeat_interleave(n, 0), lay.values.repeat_interleave(n, 0))
                                             for lay in pkv.layers])
        cache.layers = [preallocated_layer(lay.keys, lay.values, T) for lay in cache.layers]
        logits = o.logits[:, -1].float().repeat_interleave(n, 0)
        del o, pkv
        mask = mask.repeat_interleave(n, 0)
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
                if not bool(live.all()):  # prompts whose n rows all finished leave the batch
                    rows = live.repeat_interleave(n).nonzero()[:, 0]
                    for layer in cache.layers:
                        layer.select_rows(rows)
                    mask, pos, nt, unfinished, alive = mask[rows], pos[rows], nt[rows], unfinished[rows], alive[rows]
            mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype, device=dev)], dim=1)
            o = eng.lm(input_ids=nt[:, None], attention_mask=mask, position_ids=pos, use_cache=True,
                       **{eng._cache_kw: cache})
            pos = pos + 1
            logits = o.logits[:, -1].float()
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
