"""Score candidate responses by log-likelihood: encode -> prefill -> score the options.

:func:`score_requests` is the one driver every surface calls (the library, the server, the
lm-eval backend). It runs each distinct prompt once, many prompts per forward, and every
option row after its prompt: the first rows in the prompts' own forward (each reads its
prompt's keys from that forward), any further ones on the prompts' KV cache, which holds
the very same keys: one forward where two were, with the same bits.

Why fixed shapes: a request's scores must not depend on what else is in its batch, on any
CPU. A BLAS picks its kernel, blocking and thread split by the shape of a matrix product,
so a row multiplied among 8 rows can get other low bits than the same row alone (measured
here: 15 of 22 row counts differ from a subset, at 1 and 2 threads; on Intel even 4+ rows
differ). Within one shape the rows are computed alike wherever they sit (measured here: 0
differences when rows move). So:

- the tokens of all prompts and option rows of a forward are packed into one row of real
  tokens, padded once (:func:`packed_forward`) to whole blocks of exactly :func:`matmul_rows`
  rows, one size per device type, and every linear layer multiplies a view of it as
  ``[blocks, rows, width]`` in one batched product (the output head: blocks of
  ``HEAD_ROWS``; :func:`setllm.core.model.install.blocked_linear`), whatever the batch. A batched
  product of fp32 on the CPU computes each block of a batch of several by its own product of
  that one shape (measured here, at 1 and 2 threads: every block of batches of 2 to 40
  bit-identical); a batch of one block is not (at 2 threads, 1,536 inputs, the library splits
  the one product's sum over the threads), so on more than one thread a lone block is read as
  a batch of its two halves of output columns, a narrow layer's as two copies of it
  (:func:`setllm.core.model.install.batched_product`; on
  one thread a lone block runs the kernel every block of a batch runs): a block's rows get the
  bits of the same block in any forward;
- attention, the one place tokens meet, runs per request (:mod:`setllm.core.attention.packed_attention`) on a block
  whose shape the request alone fixes: its prompt left-padded to a multiple of
  ``PROMPT_BUCKET`` tokens (a long prompt on flex attention: to a flex length,
  :func:`setllm.core.attention.flex.padded_length`; a long prompt with a large set, on the CPU, in
  blocks per element, :mod:`setllm.core.attention.element_blocks`, whose choice and shapes the prompt
  alone fixes too), each option right-padded to a multiple of ``OPTION_BUCKET``. A padded slot gathers packed row 0, whatever token that is: as a key
  it is masked (0 / -inf added before the softmax), so its weight is exactly 0 and it adds
  exactly 0 to every real row's sum; as a query, nothing reads its row. The padding after
  the last block's tokens is no block's query or key.

A (prompt, option) pair alone and among any others then runs the very same kernels on its
rows: bit-identical by construction, not by a property of one CPU. (The thread count is
part of the kernel choice: compare within one thread count.) Products of 64 rows run at
full speed on a CPU (measured here: 116 GFLOP/s, as 128 to 1024 rows); padding goes through
every layer only to the end of the last row block, as the last block's zeros did before.

The model is not changed by a call: the linear layers and the attention were installed
once (:mod:`setllm.core.model.install`), and a forward's row blocks and attention plan are
context of the call, so calls on several threads run at once with these same bits.

Shapes: B prompts, V vocab; packed rows are ``[1, S]``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ...errors import InputError
from ..attention import element_blocks, packed_attention
from ..attention.flex import padded_length
from ..layout.masks import TokenLayout
from ..layout.positions import NOT_IN_SET, response_positions
from ..layout.variants import Variant
from ..model import install
from ..model.fit import check_fits, sliding_window
from ..model.install import fixed_row_linears
from ..model.kvcache import cache_kwarg, new_cache, output_cache, truncate_cache
from ..model.owner import active_adapters
from ..tokens.batch import Batch, padded_layout, round_up
from ..tokens.encoding import EncodedPrompt
from . import graphs
from .runtime import forward, uses_flex
from .values import OptionScore  # its home is torch-free; exported here as before

# The fixed shapes of every scoring forward (see the module docstring). One block size per
# device type, still a fixed shape there: 64 rows run a CPU at full speed; a GPU needs larger
# products to stay busy (a 32k-token prompt in 64-row blocks is 512 products per linear layer,
# each too small to fill an H100), so 512 there. Another device type takes the CPU's.
MATMUL_ROWS = 64
DEVICE_MATMUL_ROWS = {"cpu": MATMUL_ROWS, "cuda": 512}
HEAD_ROWS = 16  # the output head's blocks (see install.fixed_row_linears)
# A wide head (Gemma 3: 262k words x 640, 670 MB in fp32) is read from memory once per
# block: the option forwards, which read every token's logits, take it in blocks of 64 rows
# (measured here: 720 rows through Gemma 3's head, 16-row blocks 11.5 s, 64-row 6.6 s). The
# prefill, one row per prompt, keeps 16. Fixed by the model, so still the same bits alone
# or batched.
WIDE_HEAD_ROWS, WIDE_VOCAB = 64, 65536
PROMPT_BUCKET = 16
OPTION_BUCKET = 4
# Bounds on memory only (any split gives the same bits): packed tokens per forward. Each
# forward pays its host work once (ops per layer, mask and index making): at 2,048 tokens, 8
# prompts after a 1k-token set took 8 forwards and 4.6x plain transformers' ops; 16k tokens
# take them in one, a quarter of the tokens of lm-eval's padded forward of the same options.
PREFILL_TOKENS = 16384
OPTION_TOKENS = 256


@dataclass(frozen=True)
class ScoreRequest:
    """One prompt and the token ids of its options (each the whole response, EOS included)."""

    prompt: EncodedPrompt
    options: Sequence[Sequence[int]]


@dataclass(frozen=True)
class TokenScore:
    """One option's log-likelihood, token count and whether every token was the argmax."""

    logprob: float
    n_tokens: int
    greedy: bool


@torch.no_grad()
def score_requests(model, variant: Variant, pad_id: int, requests: Sequence[ScoreRequest]) -> list[list[TokenScore]]:
    """Score every option of every request; each (prompt, option) gets the same bits
    whatever else is scored with it (module docstring). Requests with the same encoded
    prompt share a prefill, and equal options of one prompt a row."""
    prompts: dict[tuple, int] = {}  # prompt_key -> unique prompt
    uniq: list[EncodedPrompt] = []
    rows: list[set[tuple[int, ...]]] = []
    for req in requests:
        if any(len(o) == 0 for o in req.options):
            raise InputError("an option tokenizes to nothing; options must be non-empty text")
        u = prompts.setdefault(prompt_key(req.prompt), len(uniq))
        if u == len(uniq):
            uniq.append(req.prompt)
            rows.append(set())
        rows[u].update(tuple(o) for o in req.options)
    done: dict[tuple[int, tuple[int, ...]], TokenScore] = {}
    for chunk in _chunks(range(len(uniq)), lambda u: len(uniq[u]), PREFILL_TOKENS):
        done.update(_score_prompts(model, variant, pad_id, [uniq[u] for u in chunk], [sorted(rows[u]) for u in chunk], chunk))
    return [[done[(prompts[prompt_key(r.prompt)], tuple(o))] for o in r.options] for r in requests]


def prompt_key(enc: EncodedPrompt) -> tuple:
    """What makes two encoded prompts the same computation."""
    return tuple(enc.input_ids), tuple(enc.set_ids), tuple(enc.element_ids)


def _chunks(items, size, limit: int) -> list[list]:
    """``items`` in order, cut into runs of at most ``limit`` total ``size`` (an item larger
    than ``limit`` alone)."""
    out, total = [[]], 0
    for item in items:
        if out[-1] and total + size(item) > limit:
            out.append([])
            total = 0
        out[-1].append(item)
        total += size(item)
    return out if out[-1] else []


class _Prompts:
    """Prompts packed into one row: where each one's tokens are and its own padded layout.

    Layouts are Python lists here (``valid, is_prompt, set_ids, element_ids, positions``,
    as :class:`setllm.core.layout.masks.TokenLayout`): a forward's blocks become tensors once per
    group of blocks (:func:`setllm.core.attention.packed_attention.plan`), not once per block."""

    def __init__(self, model, variant: Variant, pad_id: int, encs: Sequence[EncodedPrompt]):
        self.variant, self.encs, self.window = variant, encs, sliding_window(model.config)
        self.device_type = model.device.type
        self.starts = [0, *itertools.accumulate(map(len, encs))][:-1]
        self.total = sum(map(len, encs))
        # A long prompt is read on flex attention (its length alone decides), padded to a flex bucket.
        self.flex = [uses_flex(model, len(e)) for e in encs]
        # Each prompt alone, left-padded to its bucket: the layout its masks are read from.
        lengths = [padded_length(len(e), model.device) if f else round_up(len(e), PROMPT_BUCKET) for e, f in zip(encs, self.flex)]
        self.layouts, self.next_positions = zip(*(padded_layout(e, variant.positions, n) for e, n in zip(encs, lengths)))

    def keys(self, i: int) -> list[int]:
        """Prompt ``i``'s packed token indices, left-padded to its bucket."""
        n = len(self.encs[i])
        return [packed_attention.PAD] * (len(self.layouts[i][0]) - n) + list(range(self.starts[i], self.starts[i] + n))

    def prompt_blocks(self, i: int) -> list[packed_attention.AttentionBlock]:
        """Prompt ``i``'s own attention: one block, or, for a long prompt with a large set on
        the CPU, one block per element and the other rows in blocks of an option row's shape
        (:mod:`setllm.core.attention.element_blocks`)."""
        keys = self.keys(i)
        rest = (OPTION_BUCKET, len(keys) + OPTION_BUCKET)  # the shape of an option row of up to OPTION_BUCKET tokens
        parts = None if self.flex[i] else element_blocks.split(self.variant.mask, self.layouts[i], keys, PROMPT_BUCKET, self.window,
                                                               self.device_type, rest)
        if parts is None:
            return [self.block(i, keys, keys)]
        return [packed_attention.dense_block(q, k, self.variant.mask, layout, None) for q, k, layout in parts]

    def block(self, i: int, queries: list[int], keys: list[int], response: int = 0, length: int = 0) -> packed_attention.AttentionBlock:
        """Prompt ``i``'s attention block (a ``response`` of that many tokens after it, padded
        to ``length``), with its masks read off the prompt's own layout."""
        layout = self.layouts[i]
        if length:
            after = ([True] * response + [False] * (length - response), [False] * length, [NOT_IN_SET] * length, [NOT_IN_SET] * length,
                     response_positions(self.variant.positions, self.next_positions[i], length))
            layout = tuple(a + list(b) for a, b in zip(layout, after))
        if not length and self.flex[i]:  # the prompt's own block: a predicate, never a dense N x N mask
            tensors = TokenLayout(*(torch.tensor([f]) for f in layout))
            return packed_attention.AttentionBlock(queries, keys, flex=packed_attention.FlexMask(self.variant.mask, tensors, self.window))
        return packed_attention.dense_block(queries, keys, self.variant.mask, layout, self.window)


def matmul_rows(model) -> int:
    """The row block of every linear layer on ``model``'s device (see :data:`DEVICE_MATMUL_ROWS`)."""
    return DEVICE_MATMUL_ROWS.get(model.device.type, MATMUL_ROWS)


def row_plan(model) -> install.RowPlan:
    """The row blocks of a packed scoring forward: every linear layer's for the device, the
    output head's by the width of its vocabulary."""
    wide = model.get_output_embeddings().weight.shape[0] > WIDE_VOCAB
    return install.RowPlan(matmul_rows(model), WIDE_HEAD_ROWS if wide else HEAD_ROWS, model.get_output_embeddings())


def fixed_rows(model):
    """Inside, the model's linear layers multiply in :func:`row_plan`'s blocks
    (:func:`setllm.core.model.install.fixed_row_linears`)."""
    plan = row_plan(model)
    return fixed_row_linears(model, plan.rows, plan.head_rows)


def _score_prompts(model, variant: Variant, pad_id: int, encs, options, keys) -> dict:
    """``encs`` and their option rows: the prompts and the first rows in one packed forward,
    any further rows on its cache, packed, in forwards of at most :data:`OPTION_TOKENS`."""
    packed = _Prompts(model, variant, pad_id, encs)
    for i, e in enumerate(encs):
        check_fits(model.config, len(e), packed.next_positions[i], variant.positions, max(map(len, options[i])), "longest option")
    flat = [(i, o) for i, opts in enumerate(options) for o in opts]
    chunks = _longer_rows(flat)
    cache, next_logprobs, rest = _packed_prefill(model, packed, chunks[0] if chunks else [])
    for chunk in chunks[1:]:
        truncate_cache(cache, packed.total)  # the last forward's rows go: these rows see the prompts alone
        rest += _packed_options(model, packed, cache, chunk)
    return _sum_rows(flat, keys, next_logprobs, rest)


def option_scores(next_logprobs: torch.Tensor, row_logprobs: torch.Tensor, options) -> list[TokenScore]:
    """One prompt's ``options`` (token ids) scored off log-probs already computed: its
    next-token log-probs ``[1, V]`` (each option's first token) and ``row_logprobs
    [sum(n - 1), V]``, the log-probs after each option's tokens but its last, options in
    order (:func:`setllm.core.doccache.score` reads them in one forward). One
    :class:`TokenScore` per option, in order."""
    flat = [(0, tuple(o)) for o in options]
    longer = [row for row in flat if len(row[1]) > 1]
    scores = _sum_rows(flat, [0], next_logprobs, _row_scores(row_logprobs, longer))
    return [scores[(0, o)] for _, o in flat]


def _longer_rows(flat) -> list[list]:
    """Rows of more than one token (the first is read off the prompt's last position), in
    forwards of at most :data:`OPTION_TOKENS`."""
    return _chunks([row for row in flat if len(row[1]) > 1], lambda row: len(row[1]), OPTION_TOKENS)


def _sum_rows(flat, keys, next_logprobs, rest) -> dict:
    """Each row's :class:`TokenScore`: its first token read off the prompt's last position,
    the others off ``rest`` (one ``(log-probs, argmax hits)`` per row longer than a token, in order)."""
    rows = torch.tensor([i for i, _ in flat], device=next_logprobs.device)
    firsts = torch.tensor([o[0] for _, o in flat], device=next_logprobs.device)
    first = next_logprobs[rows, firsts].tolist()  # one look from the host for every row
    hit = (next_logprobs.argmax(-1)[rows] == firsts).tolist()
    longer = iter(rest)
    out = {}
    for (i, o), lp, h in zip(flat, first, hit):
        more, more_hits = next(longer) if len(o) > 1 else ([], [])
        lps = [lp, *more]
        out[(keys[i], o)] = TokenScore(float(torch.tensor(lps).sum()), len(lps), h and all(more_hits))
    return out


def _packed_prefill(model, packed: _Prompts, rows, keep_dists: bool = False):
    """One forward of the packed prompts and, after them, option rows ``rows`` (their tokens
    1..): the KV cache of the prompts (then the rows' and padding keys, which the caller cuts
    before the cache serves another forward), each prompt's next-token log-probs ``[B, V]``,
    and each row's ``(log-probs, argmax hits)`` (``keep_dists``: and, fourth, the rows'
    log-probs ``[sum(n - 1), V]`` themselves). Each row reads its prompt's keys from the
    same forward, the very values a cache of the prompt would hold: the bits of a prefill
    and a forward of the rows on its cache, in one forward."""
    ids = [t for e in packed.encs for t in e.input_ids]
    pos = [p for e in packed.encs for p in e.positions(packed.variant.positions)[0]]
    segs = [b for i in range(len(packed.encs)) for b in packed.prompt_blocks(i)]
    keep = [s + len(e) - 1 for s, e in zip(packed.starts, packed.encs)]
    r_ids, r_pos, r_segs, r_keep, m = _option_rows(packed, rows, packed.total)
    plan = packed_attention.plan(segs + r_segs, packed.total + m, packed.total + m)
    out = packed_forward(model, plan, ids + r_ids, pos + r_pos, new_cache(), keep + r_keep)
    logp = out.logits[0].float().log_softmax(-1)
    result = output_cache(out), logp[: len(keep)], _row_scores(logp[len(keep) :], rows)
    return (*result, logp[len(keep) :]) if keep_dists else result


def _option_rows(packed: _Prompts, rows, base: int):
    """Token ids, positions, attention blocks and kept logits of option rows ``(prompt index,
    ids)`` placed after ``base`` tokens of packed prompts (or of their cache); returns them
    with the rows' token count."""
    ids, pos, segs, keep, start = [], [], [], [], 0
    for i, o in rows:
        n, length = len(o), round_up(len(o), OPTION_BUCKET)
        nxt = packed.next_positions[i]
        ids += o
        pos += response_positions(packed.variant.positions, nxt, n)
        own = list(range(start, start + n)) + [packed_attention.PAD] * (length - n)
        keys = packed.keys(i) + [packed.total + j if j != packed_attention.PAD else j for j in own]
        segs.append(packed.block(i, [j + base if j != packed_attention.PAD else j for j in own], keys, n, length))
        keep += range(base + start, base + start + n - 1)  # token j predicts token j + 1
        start += n
    return ids, pos, segs, keep, start


def _packed_options(model, packed: _Prompts, cache, rows) -> list[tuple[list[float], list[bool]]]:
    """Tokens 1.. of each option row ``(prompt index, ids)`` on the prompts' cache (cut to the
    prompts: ``packed.total`` tokens): their log-probs and whether each was the argmax. The
    forward's keys stay on the cache until the caller cuts it again."""
    ids, pos, segs, keep, m = _option_rows(packed, rows, 0)
    plan = packed_attention.plan(segs, m, packed.total + m)
    out = packed_forward(model, plan, ids, pos, cache, keep)
    return _row_scores(out.logits[0].float().log_softmax(-1), rows)


def _row_scores(logp: torch.Tensor, rows) -> list[tuple[list[float], list[bool]]]:
    """Tokens 1.. of each row read off ``logp [sum(n - 1), V]``: log-probs and argmax hits."""
    if not rows:
        return []
    targets = torch.tensor([t for _, o in rows for t in o[1:]], device=logp.device)
    got = logp.gather(1, targets[:, None]).squeeze(1).tolist()
    hits = (logp.argmax(-1) == targets).tolist()
    result, at = [], 0
    for _, o in rows:
        result.append((got[at : at + len(o) - 1], hits[at : at + len(o) - 1]))
        at += len(o) - 1
    return result


def packed_forward(model, plan, ids, pos, cache, keep):
    """One forward of a packed row ``ids [S]`` under ``plan``, keeping the logits of rows
    ``keep`` (each a list or a tensor); returns the model's output with logits
    ``[1, len(keep), V]``. The row is padded once, here, to whole row blocks of the linear
    layers (and ``keep`` to whole blocks of the head), so that every layer multiplies a view
    of ``[blocks, rows, width]`` with no padding or cutting of its own; padding tokens are
    queried by no attention block and are no block's keys, and the cache drops their keys
    with the rows'."""
    device, rows = model.device, row_plan(model)
    k = len(keep)
    ids, pos, keep = (_padded(x, step) for x, step in ((ids, rows.rows), (pos, rows.rows), (keep, rows.head_rows)))
    captured = graphs.of(model)
    if captured is not None and cache.get_seq_length() == 0 and packed_attention.capturable(plan):
        return _captured_forward(model, captured, plan, ids, pos, keep, k)
    with fixed_row_linears(model, rows.rows, rows.head_rows), packed_attention.blocks_on(model, plan):
        out = model(input_ids=ids[None].to(device), position_ids=pos[None].to(device), attention_mask=packed_attention.placeholder_mask(device),
                    use_cache=True, **{cache_kwarg(): cache}, logits_to_keep=keep.to(device))
    out.logits = out.logits[:, :k]
    return out


def _captured_forward(model, captured: graphs.Graphs, plan, ids, pos, keep, k: int):
    """:func:`packed_forward` on a fresh cache by a CUDA graph (:mod:`setllm.core.forward.graphs`): the
    plan's device tensors are made first and are inputs of the graph with the padded ``ids``,
    ``pos`` and ``keep``; the KV cache is rebuilt from the keys and values the graph returns."""
    device, rows, config = model.device, row_plan(model), model.config.get_text_config()
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    packed_attention.prime(plan, device, model.dtype, heads, kv_heads, len(ids))
    inputs = [ids[None].to(device), pos[None].to(device), keep.to(device), *packed_attention.leaves(plan)]

    def forward_on(static):  # reads what a call changes from ``static`` alone (graphs' module docstring)
        p = packed_attention.with_leaves(plan, static[3:])
        made = packed_attention.device_tensor_count(p)
        with fixed_row_linears(model, rows.rows, rows.head_rows), packed_attention.blocks_on(model, p):
            out = model(input_ids=static[0], position_ids=static[1], attention_mask=packed_attention.placeholder_mask(device),
                        use_cache=True, **{cache_kwarg(): new_cache()}, logits_to_keep=static[2])
        if packed_attention.device_tensor_count(p) != made:
            raise RuntimeError("a captured forward made a device tensor of its plan: prime() missed it")
        layers = output_cache(out).layers
        return [out.logits, *(layer.keys for layer in layers), *(layer.values for layer in layers)]

    logits, *kv = captured.run(("prefill", active_adapters(model)), inputs, forward_on)  # the adapters decide which modules run
    cache, n = new_cache(), len(kv) // 2
    for i in range(n):
        cache.update(kv[i], kv[n + i], i)
    return _Output(logits[:, :k], cache)


@dataclass
class _Output:
    """The parts of a model's output :func:`packed_forward`'s callers read."""

    logits: torch.Tensor
    cache: object

    def __contains__(self, name: str) -> bool:
        return name == "cache"


def _padded(x, step: int) -> torch.Tensor:
    """``x`` (a list or a 1-D tensor of ints) zero-padded to a multiple of ``step``, as a tensor."""
    values = x.tolist() if isinstance(x, torch.Tensor) else list(x)
    return torch.tensor(values + [0] * (-len(values) % step), dtype=torch.long)


@torch.no_grad()
def prefill(model, variant: Variant, batch: Batch):
    """Run the prompts once. Returns the KV cache and the log-probs of the next token ``[B, V]``."""
    out = forward(model, variant, batch.input_ids, batch.position_ids, batch.layout, cache=new_cache(), logits_to_keep=1)
    # Prompts are left-padded, so the last column is every prompt's last token.
    return output_cache(out), out.logits[:, -1].float().log_softmax(-1)


@dataclass(frozen=True)
class TokenDetail:
    """One response token: its log-prob and the ``top`` likeliest tokens in its place."""

    token: int
    logprob: float | None  # None: a prompt token with no log-prob of its own (SetLLM.echo_details)
    top: list[tuple[int, float]]  # (token id, log-prob), likeliest first


@torch.no_grad()
def response_logprobs(model, variant: Variant, pad_id: int, prompt: EncodedPrompt, response: Sequence[int]) -> torch.Tensor:
    """The log-probs ``[len(response), V]`` at each token of ``response`` read as the response
    to ``prompt``, exactly as an option is scored (OpenAI's ``echo`` and ``logprobs``): the
    prompt and the response as one option row in one packed forward of fixed row blocks
    (:func:`_packed_prefill`), so each token gets the very bits :func:`score_requests` sums
    for that option, alone or in any batch."""
    packed = _Prompts(model, variant, pad_id, [prompt])
    check_fits(model.config, len(prompt), packed.next_positions[0], variant.positions, len(response), "response")
    rows = [(0, list(response))] if len(response) > 1 else []
    _, next_logprobs, _, dists = _packed_prefill(model, packed, rows, keep_dists=True)
    return torch.cat([next_logprobs[:1], dists])


def token_details(response: Sequence[int], dists: torch.Tensor, top: int = 0) -> list[TokenDetail]:
    """Each token of ``response`` with its log-prob off ``dists [len(response), V]``
    (:func:`response_logprobs`, or the document cache's reading of the same row) and the
    ``top`` likeliest tokens at its place."""
    details = []
    for token, dist in zip(response, dists.cpu()):
        values, index = dist.topk(top) if top else (torch.tensor([]), torch.tensor([], dtype=torch.long))
        details.append(TokenDetail(int(token), float(dist[token]), list(zip(index.tolist(), values.tolist()))))
    return details


def to_option_scores(texts: Sequence[str], scores: Sequence[TokenScore]) -> list[OptionScore]:
    return [OptionScore(t, s.logprob, s.logprob / s.n_tokens, s.n_tokens) for t, s in zip(texts, scores)]
