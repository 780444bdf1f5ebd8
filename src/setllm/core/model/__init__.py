"""The model setllm wraps: one owner per model's weights (:mod:`.owner`) and their hash
(:mod:`.fingerprint`), what setllm installs on it once (:mod:`.install`), what each family
needs (:mod:`.families`), the fit rule of its context (:mod:`.fit`), its KV cache
(:mod:`.kvcache`). Below the tokens: it knows positions, never a tokenizer."""
