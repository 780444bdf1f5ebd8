"""Masks and positions against literal tensors for the docstring example, every backend.

Example: ``Q {a1 a2, b1} A`` then a one-token response ``R`` (one token per letter).
"""

import pytest
import torch

from setllm.core.attention.renderers import RENDERERS, MaskSpec, render
from setllm.core.layout.masks import TokenLayout, variant_mask
from setllm.core.layout.positions import sbp_positions, setpe_positions
from setllm.core.tokens.encoding import EncodedPrompt

LAYOUT = TokenLayout(
    valid=torch.tensor([[1, 1, 1, 1, 1, 1]], dtype=torch.bool),
    is_prompt=torch.tensor([[1, 1, 1, 1, 1, 0]], dtype=torch.bool),
    set_ids=torch.tensor([[-1, 0, 0, 0, -1, -1]]),
    element_ids=torch.tensor([[-1, 0, 0, 1, -1, -1]]),
    positions=torch.tensor([[0, 1, 2, 1, 3, 4]]),  # SetPE: both elements start at 1
)
# ■ = 1, ⬚ = 0; rows are queries   Q  a1 a2 b1 A  R
EXPECTED = {
    "setmask": [[1, 1, 1, 1, 1, 0],  # Q
                [1, 1, 1, 0, 1, 0],  # a1: does not see b1
                [1, 1, 1, 0, 1, 0],  # a2
                [1, 0, 0, 1, 1, 0],  # b1: does not see a1 a2
                [1, 1, 1, 1, 1, 0],  # A
                [1, 1, 1, 1, 1, 1]],  # R: whole prompt + itself
    "prefix": [[1, 1, 1, 1, 1, 0]] * 5 + [[1, 1, 1, 1, 1, 1]],
    "causal": [[1 if k <= q else 0 for k in range(6)] for q in range(6)],
    "sbp": [[1, 0, 0, 0, 0, 0],  # Q
            [1, 1, 0, 0, 0, 0],  # a1
            [1, 1, 1, 0, 0, 0],  # a2
            [1, 0, 0, 1, 0, 0],  # b1: causal, but does not see a1 a2
            [1, 1, 1, 1, 1, 0],  # A: every element
            [1, 1, 1, 1, 1, 1]],  # R: whole prompt + itself
}


def literal(kind):
    return torch.tensor(EXPECTED[kind], dtype=torch.bool).view(1, 1, 6, 6)


def allowed_by(backend: str, spec: MaskSpec) -> torch.Tensor:
    """What ``backend``'s rendering of ``spec`` allows, ``[B, 1, Q, K]`` bool, read off the
    form the backend takes: a bool mask as it is, an additive one where it adds 0 (and only
    0 or -inf), a BlockMask by its own predicate on every pair (as flex evaluates it)."""
    got = render(backend, spec, torch.float32)
    if isinstance(got, torch.Tensor) and got.dtype == torch.bool:
        return got
    if isinstance(got, torch.Tensor):
        assert set(got.unique().tolist()) <= {0.0, float("-inf")}
        return got == 0
    batch, kv_len = spec.layout.shape
    z = torch.tensor(0)
    return torch.tensor([[[[bool(got.mask_mod(torch.tensor(b), z, torch.tensor(q), torch.tensor(k))) for k in range(kv_len)]
                           for q in range(spec.q_len)]] for b in range(batch)])


@pytest.mark.parametrize("backend", list(RENDERERS))
@pytest.mark.parametrize("kind", ["causal", "prefix", "setmask", "sbp"])
def test_every_backend_renders_what_the_predicate_allows(backend, kind):
    assert torch.equal(allowed_by(backend, MaskSpec(kind, LAYOUT, 6)), literal(kind))


def test_eager_and_sdpa_read_the_one_additive_form():
    got = render("sdpa", MaskSpec("setmask", LAYOUT, 6), torch.bfloat16)
    assert got.dtype == torch.bfloat16 and torch.equal(got, render("eager", MaskSpec("setmask", LAYOUT, 6), torch.bfloat16))


# Window 2 counted in SetPE positions (Q=0, a1=1, a2=2, b1=1, A=3, R=4): |dpos| < 2.
WINDOWED_SETMASK = [[1, 1, 0, 1, 0, 0],  # Q (0) sees a1 (1), b1 (1); not a2 (2), A (3)
                    [1, 1, 1, 0, 0, 0],  # a1 (1): Q, a2; b1 is another element; A is 2 away
                    [0, 1, 1, 0, 1, 0],  # a2 (2): a1, A (3)
                    [1, 0, 0, 1, 0, 0],  # b1 (1): Q; the same distance from A as a1 (both 2)
                    [0, 0, 1, 0, 1, 0],  # A (3): a2 (2)
                    [0, 0, 0, 0, 1, 1]]  # R (4): A, itself


def test_a_window_counts_positions_so_elements_are_cut_alike():
    got = MaskSpec("setmask", LAYOUT, 6, window=2).allowed()[0, 0]
    assert got.int().tolist() == WINDOWED_SETMASK
    # a1 and b1 stand at the same position: every token outside the set sees both or neither.
    assert torch.equal(got[[0, 4, 5]][:, 1], got[[0, 4, 5]][:, 3])
    # Under the causal mask it is the one-sided window transformers applies (kv > q - window).
    causal = MaskSpec("causal", LAYOUT, 6, window=2).allowed()[0, 0]
    pos = LAYOUT.positions[0]
    want = [[int(k <= q and pos[q] - pos[k] < 2) for k in range(6)] for q in range(6)]
    assert causal.int().tolist() == want


@pytest.mark.parametrize("backend", list(RENDERERS))
def test_query_offset_renders_the_last_rows(backend):
    """With a cache, only the new queries are rendered: the same rows of the full mask."""
    full = allowed_by(backend, MaskSpec("setmask", LAYOUT, 6, window=2))
    assert torch.equal(allowed_by(backend, MaskSpec("setmask", LAYOUT, 2, window=2)), full[:, :, 4:])


def test_padding_is_never_attended_and_pad_rows_are_not_empty():
    # Left-padded copy of the example: two pads in front.
    pad = lambda t, v: torch.cat([torch.full((1, 2), v, dtype=t.dtype), t], 1)  # noqa: E731
    layout = TokenLayout(pad(LAYOUT.valid, False), pad(LAYOUT.is_prompt, False), pad(LAYOUT.set_ids, -1), pad(LAYOUT.element_ids, -1),
                         pad(LAYOUT.positions, 0))
    got = MaskSpec("setmask", layout, 8).allowed()[0, 0]
    assert torch.equal(got[2:, 2:], literal("setmask")[0, 0])
    assert not got[2:, :2].any()  # real tokens never see padding
    assert torch.equal(got[:2, :2], torch.eye(2, dtype=torch.bool))  # pads see only themselves
    assert got.any(-1).all()


def test_positions_literal():
    enc = EncodedPrompt([10, 11, 12, 13, 14], [-1, 0, 0, 0, -1], [-1, 0, 0, 1, -1])
    assert enc.positions("pe") == ([0, 1, 2, 3, 4], 5)
    assert enc.positions("nope") == ([0, 0, 0, 0, 0], 0)
    # a1 a2 start at 1, b1 starts at 1 too; A resumes at 1 + 3 set tokens = 4.
    assert enc.positions("setpe") == ([0, 1, 2, 1, 4], 5)
    # SBP: the same starts, but A resumes at 1 + the longest element (2 tokens) = 3.
    assert enc.positions("sbp") == ([0, 1, 2, 1, 3], 4)


def test_sbp_positions_resume_after_the_longest_element():
    # "Q" {x1, y1 y2 y3, z1 z2} "A" {u1 u2, v1} "B": the first set starts at 1 and spans 3 (A at
    # 4), the second starts at 5 and spans 2; B at 7, the response at 8.
    sets = [-1, 0, 0, 0, 0, 0, 0, -1, 1, 1, 1, -1]
    elems = [-1, 0, 1, 1, 1, 2, 2, -1, 0, 0, 1, -1]
    assert sbp_positions(sets, elems) == ([0, 1, 1, 2, 3, 1, 2, 4, 5, 6, 5, 7], 8)
    # Where SetPE would resume after all 6 + 3 set tokens.
    assert setpe_positions(sets, elems) == ([0, 1, 1, 2, 3, 1, 2, 7, 8, 9, 8, 11], 12)
    # The longest element decides, wherever it stands; two adjacent sets; a set at the end.
    assert sbp_positions([0, 0, 0, 1, 1, 1], [0, 1, 1, 0, 0, 1]) == ([0, 0, 1, 2, 3, 2], 4)
    for order in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):  # element lengths 1, 3, 2 in any order: the same end
        lengths = [[1, 3, 2][i] for i in order]
        elems = [j for j, n in enumerate(lengths) for _ in range(n)]
        assert sbp_positions([0] * 6 + [-1], elems + [-1])[0][-1] == 3


def test_setpe_two_adjacent_sets_and_set_at_end():
    # {x1 x2, y1} {z1, w1 w2 w3}: second set starts at 0 + 3; the response after it at 3 + 4.
    sets = [0, 0, 0, 1, 1, 1, 1]
    elems = [0, 0, 1, 0, 1, 1, 1]
    assert setpe_positions(sets, elems) == ([0, 1, 0, 3, 3, 4, 5], 7)
    # Duplicate neighbouring elements are still separate elements.
    assert setpe_positions([0, 0], [0, 1]) == ([0, 0], 2)


def test_every_mask_kind_is_defined_once_by_its_parts_and_an_unknown_kind_is_refused():
    import typing

    from setllm.core.layout.masks import MASK_KINDS
    from setllm.core.layout.variants import MaskKind

    assert set(MASK_KINDS) == set(typing.get_args(MaskKind))
    assert len(set(MASK_KINDS.values())) == len(MASK_KINDS)  # no two kinds alike
    with pytest.raises(ValueError, match="unknown mask kind"):
        variant_mask("sets", LAYOUT)
