"""Documents read once: exact, order-free KV caches of a set's elements under Set-Based
Prompting (``variant="sbp"``).

Under ``sbp`` attention is causal, elements of one set do not see each other, and every
element's positions start at the set's start. So an element's keys and values depend only on
the text before its set and on the element itself: computed once, they are the keys and
values it has in any set of documents, in any order, behind the same prefix. A prompt
``prefix {e1, e2, ...} suffix`` is read as: the prefix (its keys and values cached too), each
element not cached yet on the prefix's cache alone, then the suffix reading every piece where
it lies, in the prompt's order (:mod:`.attention`: on a CPU one attention call per piece,
their log-sum-exps combined in that fixed order; elsewhere the pieces joined once per layer).
Generated tokens go on from there as after a prefill (:func:`prefill`); options to score run in
the suffix's own forward, and the questions of many requests in one packed forward
(:func:`score`), so a question over cached documents costs its own tokens' share of one forward.

What is equal to what:

- a cached reading and one with the cache off: the same bits, by construction. Every reading
  that can reuse documents computes through a cache (with it off, a scratch one dropped after
  the call: :meth:`DocumentCache.scratch`), and a piece is computed one way only: the prefix
  in a forward of its own, the missing elements of a call in packed forwards
  (:func:`_compute_elements`) in which each has an attention block whose shape its prefix and
  itself fix and the linear layers multiply fixed row blocks. So an element's keys and values
  are the same bits computed alone, among others, earlier, or read back from disk;
- such a reading and the scoring driver's one forward over the whole prompt
  (:func:`setllm.core.forward.scoring.prefill`): equal up to float rounding (other shapes, other
  kernels; within 1e-5 in fp32: tests/core/test_doccache.py);
- two cached readings of one set in any order: the same bits, as exact mode sorts the elements
  (the same pieces, the same forwards), and an element's cached keys are the same tensors
  whatever set it came in;
- a scored request alone and among others: the same bits (:func:`score` packs requests in
  fixed row blocks, each request's attention over its own pieces and tokens, combined in an
  order its prompt alone fixes).

Prompt-bidirectional variants (``setmask-*``, ``prefix-*``) cannot reuse a document (it sees
the question), and neither can canonical order or the causal readings (an element sees the
ones before it): those read as before (:func:`unusable` says why).

The cache is bounded by bytes (the keys and values it holds, counted exactly), least recently
used out, and keyed by fields (:class:`.keys.PieceKey`: the base weights, each
active adapter's name and weights, the variant, dtype and tokenizer, the prefix's tokens and the
element's tokens); under ``sbp`` one of :data:`DEFAULT_MB` is made when a model is wrapped (:func:`on_by_default`).
The weights' fingerprint is taken again after any in-place write to a parameter (training).
With a folder, pieces are also kept on disk (:mod:`.tier`).

One job a module: :mod:`.store` (the memory store, one per model's weights), :mod:`.tier` (the
disk tier), :mod:`.keys` (what names a piece), :mod:`.driver` (a prompt read through the
store: the cache's driver), :mod:`.attention` (a question's attention over the pieces where they lie),
:mod:`.options` (a command's cache flags), :mod:`.sizes` (its bounds in MB), :mod:`.stats` (what it did, and its gauges).
"""

from ...lazy import exports

# Imported on first use: the server's config checks its cache flags (:mod:`.options`,
# :mod:`.sizes`) without torch, which the store and the readings need.
__all__, __getattr__, __dir__ = exports(__name__, {
    "keys": ["PieceKey", "ReadingKey", "reading_key"],
    "options": ["CacheOptions", "reuse_line"],
    "driver": ["generate", "prefill", "read_options", "score", "unusable", "variant_problem"],
    "sizes": ["DEFAULT_DISK_MB", "DEFAULT_MB", "megabytes"],
    "stats": ["CacheStats", "gauges"],
    "store": ["DocumentCache", "apart", "attach", "for_reading", "forget", "of", "on_by_default", "share"],
})
