"""The ladder every surface shares: a prompt with sets becomes tokens, positions and a mask,
and one forward pass scores options or generates. One room a rung, each importing only the
rooms listed before it (the API, tasks, training and the front ends sit above all of them):

- :mod:`.text`: a prompt with sets (segments, sets, markup, JSON), chat messages, templates;
- :mod:`.layout`: the variants, SetPE and sbp positions, the mask kinds as predicates;
- :mod:`.model`: the wrapped model: its owner, what setllm installs, its family's needs, the fit rule, KV caches;
- :mod:`.tokens`: a prompt's token ids, set ids and positions; the codec; padded batches;
- :mod:`.attention`: the attention backends' masks, packed attention per request, element blocks;
- :mod:`.forward`: one forward, the scoring driver, decoding, CUDA graphs;
- :mod:`.doccache`: documents read once under ``sbp``, in memory and on disk;
- :mod:`.drivers`: the packed driver and the document cache's, behind one interface.
"""
