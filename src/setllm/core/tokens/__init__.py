"""A prompt's tokens for one model: each segment and element tokenized alone, with set and
element ids and positions (:mod:`.encoding`), the one way a prompt and a response become
ids, canonical order and the fit check included (:mod:`.codec`), padded batches (:mod:`.batch`)."""
