"""Seeded data generators (``setllm data ...``): documents for key-value retrieval and
benchmark lookups, key-value facts in many phrasings, benchmark questions in several
training frames. Each is a function and a :class:`GeneratorConfig` of its flags."""
