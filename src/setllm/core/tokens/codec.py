"""The one way a prompt and a response become token ids, shared by the API, training and
evaluation: canonical element order, the soundness and length checks, response ids, pad id.

Everything a permutation could touch is derived from the *canonical* prompt under exact
mode: the tokens, and also the character the response is joined to (a leading space or
not). Reading any of it from the prompt as given would let the element order leak back in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ...errors import InputError
from ..layout.variants import Variant
from ..model.fit import check_fits
from ..text.prompt import PromptError, PromptLike, PromptTooLong, Set, SetPrompt, as_prompt  # noqa: F401  (PromptTooLong: the codec's refusal)
from ..text.templates import response_text
from .encoding import EncodedPrompt, PromptEncoder


def refuse_a_final_set(prompt: SetPrompt, variant: Variant, chat: bool) -> None:
    """Refuse a prompt that ends with a set under an invariant reading. The first response
    token is predicted from the last prompt token; inside a set that token sees only its own
    element, so the answer would depend on which element happens to come last. (In chat mode
    the template's text follows.) Needs no model: the CLI says it before loading one."""
    if variant.invariant and not chat and isinstance(prompt.segments[-1], Set):
        raise PromptError("the prompt ends with a set: the response would be read from inside whichever element comes last; "
                          "put text after the set, e.g. \"Answer:\"")


@dataclass(frozen=True)
class Codec:
    """Encodes prompts and responses for one tokenizer, variant and reading mode.

    Attributes:
        tokenizer: a Hugging Face tokenizer.
        variant: how the prompt is read; decides whether the order must not matter.
        exact: sort set elements before encoding (bit-identical outputs under permutation);
            a ``canonical`` variant sorts them always.
        chat: wrap prompts in the tokenizer's chat template.
        config: the model's config, whose context a prompt must fit (None: unchecked).
    """

    tokenizer: object
    variant: Variant
    exact: bool = False
    chat: bool = False
    config: object = field(default=None, repr=False, compare=False)
    encoder: PromptEncoder = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.exact and not self.variant.invariant:
            raise InputError(f"exact mode sorts set elements, which would hide the order sensitivity of {self.variant.name}; "
                             "it applies only to invariant variants")
        object.__setattr__(self, "encoder", PromptEncoder(self.tokenizer, chat=self.chat))

    @classmethod
    def for_model(cls, model, tokenizer, variant: Variant, exact: bool, chat: bool) -> Codec:
        return cls(tokenizer, variant, exact, chat, model.config)

    @property
    def pad_id(self) -> int:
        tok = self.tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)

    @property
    def eos_id(self) -> int | None:
        return self.tokenizer.eos_token_id

    def prepare(self, prompt: PromptLike) -> SetPrompt:
        """The prompt as it will be read: validated, canonical in exact mode, and sound."""
        prompt = as_prompt(prompt)
        prompt = prompt.canonical() if self.exact or self.variant.canonical else prompt
        refuse_a_final_set(prompt, self.variant, self.chat)
        return prompt

    def encode(self, prompt: PromptLike) -> EncodedPrompt:
        """Tokenize a prompt (see :meth:`prepare`) and check it fits the model with room for
        a response (:meth:`check_fits`)."""
        return self.request(prompt, [])[0]

    def check_fits(self, enc: EncodedPrompt, response: int = 0, what: str = "response") -> None:
        """Refuse (:class:`PromptTooLong`) an encoded prompt that, with ``response`` tokens of
        response after it, does not fit the model: the one fit rule,
        :func:`setllm.core.model.fit.check_fits`, in this reading's positions."""
        if self.config is not None:
            check_fits(self.config, len(enc), enc.positions(self.variant.positions)[1], self.variant.positions, response, what)

    def request(self, prompt: PromptLike, texts: Sequence[str], eos: bool = True) -> tuple[EncodedPrompt, list[list[int]]]:
        """``prompt`` encoded (:meth:`encode`) and each of ``texts`` as its response
        (:meth:`response_ids`), the prompt prepared once."""
        prepared = self.prepare(prompt)
        enc = self.encoder.encode(prepared)
        self.check_fits(enc)
        return enc, [self._response(prepared, t, eos) for t in texts]

    def tokenize(self, text: str) -> list[int]:
        """Token ids of plain text tokenized on its own, as every segment and response is."""
        return self.encoder.tokenize(text)

    @property
    def bos(self) -> bool:
        """Whether the tokenizer starts a prompt with BOS (a chat template writes its own)."""
        return bool(self.encoder.bos)

    def response_ids(self, prompt: PromptLike, text: str, eos: bool = True) -> list[int]:
        """Token ids of ``text`` as the response to ``prompt``, then EOS if ``eos``.

        The paper scores an option as its text + EOS, and training appends EOS: without it an
        option that is a token prefix of another ("New" vs "New York") can never lose. A
        response that starts with whitespace is kept as written; otherwise it is joined to
        the prompt's last character as running text would join it.
        """
        return self._response(self.prepare(prompt), text, eos)

    def _response(self, prepared: SetPrompt, text: str, eos: bool) -> list[int]:
        after = "\n" if self.chat else prepared.text()[-1:]
        ids = self.encoder.tokenize(text if text[:1].isspace() else response_text(text, after))
        return ids + [self.eos_id] if eos and self.eos_id is not None else ids
