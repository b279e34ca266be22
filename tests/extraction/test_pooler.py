"""The layer pooler (acute.extraction.pooler) against an independent reference: the
``output_hidden_states=True`` states of the very forwards it pools (index 0 the embedding
output, ``L`` the final norm's output). Pooled means over chosen positions equal the weighted
means of those states; picked states equal the chosen positions' states; a negative pick keeps
the row's earlier state; a forward over a subset of rows adds to those rows only."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from acute.errors import InputError
from acute.extraction.pooler import LayerPooler
from acute.testing import make_tiny_model

B, S, V = 3, 7, 320


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def model(request):
    return make_tiny_model(request.param, initializer_range=0.3)


def _ids(seed: int, rows: int = B, length: int = S) -> torch.Tensor:
    return torch.randint(3, V, (rows, length), generator=torch.Generator().manual_seed(seed))


def _hidden(model, ids) -> np.ndarray:
    """float64 [rows, L+1, length, d]: every recorded state of one forward over ``ids``."""
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    return torch.stack(out.hidden_states, dim=1).double().numpy()


def _forward(model, pooler, ids, weights, rows=None, picks=None) -> np.ndarray:
    """Pool one forward over ``ids`` and return its reference states."""
    pooler.set_weights(weights, rows=rows, picks=picks)
    try:
        return _hidden(model, ids)
    finally:
        pooler.set_weights(None)


def assert_close(actual, desired):
    scale = np.maximum(1.0, np.abs(desired).max(axis=-1, keepdims=True))
    assert (np.abs(actual - desired) / scale).max() <= 1e-5


def test_weights_over_every_fed_position_and_picks(model):
    # teacher forcing: weights over all S fed positions, one picked position per row
    ids = _ids(0)
    weights = torch.zeros(B, S)
    weights[0, 2:5] = 1.0
    weights[1, :] = 1.0
    weights[2, 6] = 1.0
    positions = torch.tensor([4, 0, 6])
    with LayerPooler(model) as pooler:
        pooler.reset(B)
        hidden = _forward(model, pooler, ids, weights, picks={"last": positions})
        counts = weights.sum(1).long().tolist()
        means, last = pooler.means(counts), pooler.states("last")
    w = weights.double().numpy()
    expected = np.einsum("rs,rlsd->rld", w, hidden) / w.sum(1)[:, None, None]
    assert means.shape == (B, model.config.num_hidden_layers + 1, hidden.shape[-1])
    assert_close(means, expected)
    assert_close(last, hidden[np.arange(B), :, positions.numpy()])


def test_a_window_of_the_last_positions_and_a_negative_pick_keeps_the_earlier_state(model):
    # two forwards (as two decoding steps): weights and picks over the last k fed positions only
    first, second = _ids(1), _ids(2)
    w1 = torch.ones(B, 1)  # k = 1: the last position, every row
    w2 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])  # k = 2: the last two positions
    with LayerPooler(model, dtype=torch.float64) as pooler:
        pooler.reset(B)
        h1 = _forward(model, pooler, first, w1, picks={"kept": torch.zeros(B, dtype=torch.long)})
        h2 = _forward(model, pooler, second, w2, picks={"kept": torch.tensor([-1, 1, 0])})
        assert all(s.dtype == torch.float64 for s in pooler.sums)
        means, kept = pooler.means([2, 2, 1]), pooler.states("kept")
    expected = np.stack([(h1[0, :, -1] + h2[0, :, -2]) / 2, (h1[1, :, -1] + h2[1, :, -1]) / 2,
                         h1[2, :, -1]])
    assert_close(means, expected)
    # row 0 keeps the first forward's state; rows 1 and 2 take the window's positions 1 and 0
    assert_close(kept, np.stack([h1[0, :, -1], h2[1, :, -1], h2[2, :, -2]]))


def test_a_forward_over_a_subset_of_rows_adds_to_those_rows(model):
    first, subset = _ids(3), _ids(4, rows=2, length=4)
    rows = torch.tensor([2, 0])
    with LayerPooler(model) as pooler:
        pooler.reset(B)
        h1 = _forward(model, pooler, first, torch.ones(B, 1),
                      picks={"last": torch.zeros(B, dtype=torch.long)})
        # subset rows: [row 2, row 0]; row 2 pooled and picked, row 0 neither
        h2 = _forward(model, pooler, subset, torch.tensor([[1.0], [0.0]]), rows=rows,
                      picks={"last": torch.tensor([0, -1])})
        means, last = pooler.means([1, 1, 2]), pooler.states("last")
    assert_close(means, np.stack([h1[0, :, -1], h1[1, :, -1], (h1[2, :, -1] + h2[0, :, -1]) / 2]))
    assert_close(last, np.stack([h1[0, :, -1], h1[1, :, -1], h2[0, :, -1]]))


def test_hooks_are_inert_until_weights_are_set_and_removed_on_exit(model):
    def hook_count():
        return sum(len(m._forward_hooks) for m in model.modules())

    before = hook_count()
    with pytest.raises(KeyError):
        with LayerPooler(model) as pooler:
            assert pooler.active and hook_count() > before
            pooler.reset(B)
            _hidden(model, _ids(5))  # nothing set: nothing pooled
            assert all(s is None for s in pooler.sums) and pooler.picked == {}
            with pytest.raises(RuntimeError, match="never reached"):
                pooler.means([1] * B)
            raise KeyError("boom")
    assert hook_count() == before and not pooler.active
    with pytest.raises(InputError, match="dtype"):
        LayerPooler(model, dtype=torch.float16).__enter__()
