"""Positions and masks: where each token sits and what it sees. The named variants (a mask
kind + a position scheme, :mod:`.variants`), SetPE and sbp positions (:mod:`.positions`), each
mask kind as composable predicates (:mod:`.masks`). Imports nothing else of ``core``."""
