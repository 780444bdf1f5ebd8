"""Text and prompts: a prompt with sets as the user writes it (segments, sets, markup, JSON:
:mod:`.prompt`), chat messages as one (:mod:`.chat`), multiple-choice templates
(:mod:`.templates`). Plain Python: no tokenizer, no torch; imports nothing else of ``core``."""
