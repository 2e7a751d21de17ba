"""Scoring continuations on the llamacpp backend: many continuations of one prompt in one decode call
(`LlamaCppBackend.score` drives it; the director scores speaker names this way every turn)."""

from __future__ import annotations

from typing import Any

import numpy as np

from mascot.errors import BackendError

SCORE_SEQS = 16  # continuations decoded together in one scoring batch (sequence 0 holds the prompt)


def score_groups(lengths: list[int], limit: int, seqs: int = SCORE_SEQS) -> list[list[int]]:
    """Continuation indices in decode groups: at most `seqs - 1` per group and `limit` new tokens (`lengths`)."""
    groups: list[list[int]] = [[]]
    size = 0
    for i, n in enumerate(lengths):
        if groups[-1] and (len(groups[-1]) == seqs - 1 or size + n > limit):
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += n
    return groups


class Scoring:
    """`LlamaCppBackend`'s scoring context and its one-decode scoring of a group of continuations."""

    SCORE_SEQS = SCORE_SEQS

    def _scoring_context(self) -> Any:
        """A second context on the same weights, with one unified KV buffer: the prompt is decoded once into
        sequence 0 and shared with every continuation's sequence by `seq_cp` (a tag, not a copy), so all
        continuations are scored in one decode call. It keeps its prompt across calls, so a director that
        scores each turn re-decodes only what the dialogue added."""
        if self._scorer is None:
            self._scorer = self._unified_context(self.n_ctx_seq + self.n_batch, self.SCORE_SEQS, self.SCORE_SEQS)
        return self._scorer

    def _score_group(self, ctx: Any, mem: Any, batch: Any, fulls: list[list[int]], starts: list[int], common: int,
                     tail: list[int], tail_pos: int) -> list[float]:
        """One decode: the prompt's uncached `tail` (from `tail_pos`) into sequence 0 and every continuation's
        sequence at once, and each continuation (from position `common`) in its own sequence 1..n, the rest of
        the prompt shared from sequence 0. Returns the summed log-probabilities; only sequence 0 stays cached."""
        seqs = list(range(1, len(fulls) + 1))
        for k in seqs:
            self.ll.llama_memory_seq_cp(mem, 0, k, -1, -1)  # unified cache: tags the cells, copies nothing
        b = batch
        j = 0
        for p, tok in enumerate(tail, start=tail_pos):
            b.token[j], b.pos[j], b.logits[j], b.n_seq_id[j] = tok, p, False, len(seqs) + 1
            for m, s in enumerate([0, *seqs]):
                b.seq_id[j][m] = s
            j += 1
        rows: list[tuple[int, int]] = []  # (batch row holding the logits, token they must predict)
        bounds = []
        for k, (f, start) in zip(seqs, zip(fulls, starts)):
            first = j
            for p in range(common, len(f)):
                b.token[j], b.pos[j], b.logits[j], b.n_seq_id[j] = f[p], p, p >= start - 1, 1
                b.seq_id[j][0] = k
                j += 1
            bounds.append(len(rows))
            rows += [(first + t - 1 - common, f[t]) for t in range(start, len(f))]
        b.n_tokens = j
        try:
            rc = self.ll.llama_decode(ctx, b)
            if rc != 0:
                raise BackendError(f"llama.cpp decode failed (code {rc}) while scoring: the KV cache is full.")
            logits = np.stack([self._logits(r, ctx) for r, _ in rows])  # by batch row (llama.cpp maps it)
            top = logits.max(axis=1, keepdims=True)
            lse = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
            picked = logits[np.arange(len(rows)), [t for _, t in rows]] - lse
            bounds.append(len(rows))
            return [float(picked[bounds[i]:bounds[i + 1]].sum(dtype=np.float64)) for i in range(len(fulls))]
        finally:
            for k in seqs:
                self.ll.llama_memory_seq_rm(mem, k, -1, -1)

