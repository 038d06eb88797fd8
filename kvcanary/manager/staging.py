"""Static int64 input buffers of one forward slot, filled in place from each CanaryBatch.

The launchers want contiguous int64 tensors; engines hand int32 or int64 ones. Copying into buffers
allocated at attach time is a device op (capturable) and keeps the captured launches pointing at fixed
addresses. SWA write locations are translated here through the LUT, also in place.

For the manager's own graphs (:mod:`kvcanary.manager.graphs`) a forward is padded to its bucket and staged
into one packed buffer by a single ``torch.cat`` (one device copy, padding included): a bucket's views of the
packed buffer are fixed, so its graph reads each forward's inputs where the copy put them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvcanary.manager.batch import CanaryBatch
from kvcanary.manager.capacities import CanaryCapacities
from kvcanary.ops.write import WriteLaunch

_check_expected = WriteLaunch.rule_checker(
    "required_if:enable_write_input_assert+expected_input_tokens+expected_input_positions")


@dataclass(frozen=True)
class StepViews:
    """Views of the staged inputs for the current forward."""

    req_pool_indices: torch.Tensor
    prefix_lens: torch.Tensor
    extend_lens: torch.Tensor
    valid_lens: torch.Tensor
    input_ids: torch.Tensor
    positions: torch.Tensor
    out_cache_loc: torch.Tensor
    swa_out_cache_loc: torch.Tensor | None
    expected_input_tokens: torch.Tensor | None
    expected_input_positions: torch.Tensor | None


def translate_slots(slots: torch.Tensor, lut: torch.Tensor, *, out: torch.Tensor, tmp: torch.Tensor,
                    mask: torch.Tensor, oob: torch.Tensor) -> torch.Tensor:
    """``out = lut[slots]``; negative slots pass through; slots past the LUT become ``oob`` (a 1-element
    tensor: an index the kernels report as INDEX_OUT_OF_RANGE). All in preallocated buffers."""
    n = int(lut.shape[0])
    torch.clamp(slots, 0, n - 1, out=tmp)
    torch.index_select(lut, 0, tmp, out=out)
    torch.ge(slots, n, out=mask)
    torch.where(mask, oob, out, out=out)
    torch.lt(slots, 0, out=mask)
    torch.where(mask, slots, out, out=out)
    return out


class StepStaging:
    """The buffers of one forward slot (HEAD and TAIL of one forward share them)."""

    def __init__(self, capacities: CanaryCapacities, device: torch.device, *, swa_lut: torch.Tensor | None,
                 swa_num_slots: int, write_input_assert: bool) -> None:
        r, t = capacities.write_req_capacity, capacities.write_token_capacity

        def i64(n: int) -> torch.Tensor:
            return torch.zeros(n, dtype=torch.int64, device=device)

        self._rows, self._tokens = r, t
        self.rpi, self.valid_lens = i64(r), i64(r)  # what prepare's expected-token scatter stages (load_expected)
        self.swa_lut = swa_lut
        self.swa_loc = i64(t) if swa_lut is not None else None
        self._tmp = i64(t)
        self._mask = torch.zeros(t, dtype=torch.bool, device=device)
        self._oob = torch.full((1,), swa_num_slots, dtype=torch.int64, device=device)
        self._expected = write_input_assert  # the expected tokens and positions are staged too
        self._token_arrays = 5 if write_input_assert else 3
        self.packed = i64(3 * r + self._token_arrays * t)
        """The padded inputs of a bucketed forward: rows (``rpi``, prefix, extend) then tokens (ids,
        positions, write slots, and the expected tokens and positions with the input assert)."""
        self._zeros = i64(max(r, t))
        self._minus_one = torch.full((t,), -1, dtype=torch.int64, device=device)
        self._pads: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        """Per padding length: the views of the zeros and the -1s that pad it (made once, not per forward)."""
        self._buckets: dict[tuple[int, int], tuple[StepViews, torch.Tensor]] = {}
        """Per bucket (rows, tokens): its views of :attr:`packed` and the part of it they cover (made once, not
        per forward)."""
        self._last_padded: tuple[CanaryBatch, int, int, list[torch.Tensor], torch.Tensor, StepViews] | None = None
        """The previous :meth:`load_padded`'s batch, bucket, parts, packed part and views."""

    def load(self, batch: CanaryBatch) -> StepViews:
        """Copy ``batch`` in (device-to-device, dtype cast included) and return views sized to it.

        The inputs go into :attr:`packed` laid out as a bucket of exactly the batch (:meth:`_views_of`) by one
        ``torch.cat``: one device copy when every input is int64 (a GPU's cat casts no dtype in its one-launch
        path: int32 inputs are copied one by one). Inside an engine's captured forward that is one node of its
        graph instead of one per input. ``valid_lens`` is not touched: :meth:`load_expected` fills it, outside
        the graph, before the forward.
        """
        bs, n = batch.batch_size, batch.num_tokens
        parts = self._parts(batch, 0, 0)
        torch.cat(parts, out=self.packed[: 3 * bs + self._token_arrays * n])
        v = self._views_of(bs, n)
        if v.swa_out_cache_loc is not None and self.swa_lut is not None:
            translate_slots(v.out_cache_loc, self.swa_lut, out=v.swa_out_cache_loc, tmp=self._tmp[:n],
                            mask=self._mask[:n], oob=self._oob)
        return v

    def load_padded(self, batch: CanaryBatch, rows: int, tokens: int) -> StepViews:
        """Stage ``batch`` padded to ``rows`` request rows and ``tokens`` tokens with one copy into
        :attr:`packed`; return the bucket's views (fixed per bucket). Padding is neutral: rows get
        ``req_pool_indices`` 0 (the padding row) and zero lengths, tokens ``out_cache_loc`` -1 (not written)
        and zero ids and positions. SWA slots are not translated here: :meth:`translate` does it, inside the
        bucket's HEAD graph. The very batch of the previous call, to the same bucket, is staged again from the
        parts listed then (an engine may hand the same batch object while its tensors' values change; one whose
        tensors were resized in place is forgotten first, :meth:`forget`, and staged anew)."""
        last = self._last_padded
        if last is not None and last[0] is batch and last[1] == rows and last[2] == tokens:
            torch.cat(last[3], out=last[4])
            return last[5]
        bs, n = batch.batch_size, batch.num_tokens
        if not (0 <= bs <= rows <= self._rows and 0 <= n <= tokens <= self._tokens):
            raise ValueError(f"kv-canary: a forward of {bs} rows and {n} tokens does not fit the bucket of {rows} "
                             f"rows and {tokens} tokens within the capacities ({self._rows} rows, "
                             f"{self._tokens} tokens)")
        parts = self._parts(batch, rows - bs, tokens - n)
        views, packed = self._bucket(rows, tokens)
        torch.cat(parts, out=packed)
        self._last_padded = (batch, rows, tokens, parts, packed, views)
        return views

    def _parts(self, batch: CanaryBatch, pad_rows: int, pad_tokens: int) -> list[torch.Tensor]:
        """``batch``'s inputs in :attr:`packed`'s order, each followed by its padding: ``pad_rows`` zeros after
        each row array, ``pad_tokens`` zeros (-1s after ``out_cache_loc``) after each token array; a length of
        0 adds no empty part (a full bucket, or :meth:`load`, copies the inputs alone)."""
        if pad_rows:
            zr = self._pad(pad_rows)[0]
            parts = [batch.req_pool_indices, zr, batch.prefix_lens, zr, batch.extend_lens, zr]
        else:
            parts = [batch.req_pool_indices, batch.prefix_lens, batch.extend_lens]
        zt, mt = self._pad(pad_tokens)
        if pad_tokens:
            parts += [batch.input_ids, zt, batch.positions, zt, batch.out_cache_loc, mt]
        else:
            parts += [batch.input_ids, batch.positions, batch.out_cache_loc]
        if self._expected:
            # the write launch's own rule (KVC-W083), checked before anything of this forward is launched
            _check_expected(enable_write_input_assert=True, expected_input_tokens=batch.expected_input_tokens,
                            expected_input_positions=batch.expected_input_positions)
            assert batch.expected_input_tokens is not None and batch.expected_input_positions is not None
            parts += [batch.expected_input_tokens, zt, batch.expected_input_positions, zt] if pad_tokens else \
                [batch.expected_input_tokens, batch.expected_input_positions]
        return parts

    def forget(self, batch: CanaryBatch) -> None:
        """``batch``, if the previous :meth:`load_padded` staged it, is staged anew (its parts listed again, with
        their padding) at its next call: its tensors were resized in place."""
        last = self._last_padded
        if last is not None and last[0] is batch:
            self._last_padded = None

    def kept(self, batch: CanaryBatch, rows: int, tokens: int) -> tuple[list[torch.Tensor], torch.Tensor] | None:
        """What the previous :meth:`load_padded` staged when it was ``batch`` into the bucket (``rows``,
        ``tokens``): the parts and the part of :attr:`packed` their copy fills; None otherwise."""
        last = self._last_padded
        if last is None or last[0] is not batch or last[1] != rows or last[2] != tokens:
            return None
        return last[3], last[4]

    def _pad(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` zeros and ``n`` -1s (views of fixed buffers, made on the length's first use)."""
        pad = self._pads.get(n)
        if pad is None:
            pad = self._pads[n] = (self._zeros[:n], self._minus_one[:n])
        return pad

    def padded_views(self, rows: int, tokens: int) -> StepViews:
        """The views of :attr:`packed` a bucket of ``rows`` and ``tokens`` reads (what :meth:`load_padded`
        fills): the same objects at every forward of the bucket."""
        return self._bucket(rows, tokens)[0]

    def _bucket(self, rows: int, tokens: int) -> tuple[StepViews, torch.Tensor]:
        """The bucket's views and the part of :attr:`packed` they cover (made on the bucket's first use)."""
        b = self._buckets.get((rows, tokens))
        if b is None:
            b = self._buckets[(rows, tokens)] = (self._views_of(rows, tokens),
                                                 self.packed[: 3 * rows + self._token_arrays * tokens])
        return b

    def _views_of(self, rows: int, tokens: int) -> StepViews:
        p, r, t = self.packed, rows, tokens
        at = 3 * r

        def tok(i: int) -> torch.Tensor:
            return p[at + i * t : at + (i + 1) * t]

        exp = self._expected
        return StepViews(p[:r], p[r : 2 * r], p[2 * r : 3 * r], self.valid_lens[:r], tok(0), tok(1), tok(2),
                         self.swa_loc[:t] if self.swa_loc is not None else None, tok(3) if exp else None,
                         tok(4) if exp else None)

    def translate(self, v: StepViews) -> None:
        """The SWA write slots of a padded forward, ``swa_out_cache_loc = lut[out_cache_loc]`` (device ops, in
        place; nothing without an SWA group)."""
        if self.swa_lut is None or v.swa_out_cache_loc is None:
            return
        t = int(v.out_cache_loc.shape[0])
        translate_slots(v.out_cache_loc, self.swa_lut, out=v.swa_out_cache_loc, tmp=self._tmp[:t],
                        mask=self._mask[:t], oob=self._oob)

    def load_expected(self, batch: CanaryBatch, lens: torch.Tensor) -> torch.Tensor:
        """Stage the rows and each row's valid expected-token length; return the staged row indices."""
        bs = batch.batch_size
        self.rpi[:bs].copy_(batch.req_pool_indices)
        self.valid_lens[:bs].copy_(lens)
        return self.rpi[:bs]
