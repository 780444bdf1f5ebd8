"""The verbs a user calls on a model: :class:`SetLLM` (score / choose / judge / answer /
generate, and loading), each built as a request by :mod:`setllm.verbs` and run by the
encoded reader beneath it (:class:`setllm.reader.Reader`). Immutable: ``with_variant`` /
``with_options`` give new views that share the loaded weights."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import torch

from . import structured, verbs
from .answering import AnswerMixin, DocumentsReading
from .core.forward import generation, scoring
from .core.text.prompt import PromptLike, Set, SetPrompt, as_prompt, template_prompt
from .core.tokens.encoding import EncodedPrompt
from .errors import InputError
from .loading import Origin
from .loading.model import build
from .loading.options import LoadOptions
from .loading.plan import LoadPlan, plan_load
from .loading.shipped import default_adapter  # noqa: F401  (setllm.default_adapter)
from .policy import Choice, Verdict, verdict
from .reader import Reader, ReadOptions
from .readouts import JudgeRow, candidate_scores, trained_readout
from .structured import decode as structured_decode
from .structured import tools as structured_tools
from .structured import toolset

SCORING_WINDOW = 8  # batches of prompts handed to the scoring driver at once (see SetLLM.score; the lm-eval backend too)


class SetLLM(AnswerMixin, Reader):
    """Order-invariant prompting on a Hugging Face causal LM: the verbs a user calls (score,
    choose, judge, answer, generate), each built as a request (:mod:`setllm.verbs`) and run
    by the :class:`setllm.reader.Reader` beneath.

    Args:
        model, tokenizer: a loaded model (PEFT-wrapped is fine) and its tokenizer.
        variant, exact, chat, eos, batch_size, progress: see :class:`ReadOptions`.
        allow_untested: run a model type setllm has not verified.
        origin: which model and adapter were loaded (set by :meth:`from_pretrained`).
        threads: the torch thread count every computation runs on (None: the thread's own).
        documents: the plan of the documents reading :meth:`answer` uses (set by :meth:`build`).
    """

    def __init__(self, model, tokenizer, *args, documents: LoadPlan | None = None, **kwargs):
        """``documents``: the plan of the reading :meth:`answer` uses where ``adapter="auto"``
        picks another adapter for documents (set by :meth:`build`; loaded on the first answer)."""
        super().__init__(model, tokenizer, *args, **kwargs)
        if documents is not None:
            object.__setattr__(self, "_documents", DocumentsReading(documents, self.options, self.options.progress, type(self), self.model))

    def _init(self, model, tokenizer, options: ReadOptions, origin: Origin, switch: Callable[[], AbstractContextManager] | None = None,
              threads: int | None = None) -> None:
        super()._init(model, tokenizer, options, origin, switch, threads)
        object.__setattr__(self, "_documents", None)  # another reading answer() uses (see documents_reader)

    def _view(self, options: ReadOptions, switch) -> SetLLM:
        view = super()._view(options, switch)
        object.__setattr__(view, "_documents", self._documents)
        return view

    @classmethod
    def from_pretrained(cls, model: str | None = None, adapter: str | None = "auto", variant: str | None = None, *,
                        dtype=torch.float32, attn_implementation: str = "auto", device: str | None = None, progress: bool = False,
                        kind: str = "choose", **options) -> SetLLM:
        """Load a model (default: the embedded SmolLM2-135M-Instruct) and wrap it; the
        arguments are those of :class:`setllm.LoadOptions` (``dtype`` may be a torch dtype,
        ``attn_implementation`` is its ``attn``). :meth:`load` takes a ``LoadOptions`` as is.

        ``adapter="auto"`` uses the Set-LLM adapter shipped for ``kind`` of task with the
        embedded model, unless an order-sensitive ``variant`` is asked for (the base model is
        the model without the adapter); ``None`` or ``"none"`` means no adapter. The adapter's
        ``setllm.json`` (or, with no adapter, the model directory's, as a full fine-tune
        writes it) restores the variant, chat mode and EOS scoring it was trained with; an
        explicit different choice is allowed with a warning. An adapter trained on another
        base model is refused unless ``allow_base_mismatch``. ``attn_implementation="auto"``:
        sdpa, and flex attention for a prompt of :data:`setllm.core.forward.runtime.LONG_PROMPT_TOKENS`
        tokens or more.
        """
        dtype = str(dtype).removeprefix("torch.")
        return cls.load(LoadOptions(model, adapter, variant, attn_implementation, device, dtype, **options), kind, progress)

    @classmethod
    def load(cls, options: LoadOptions, kind: str = "choose", progress: bool = False) -> SetLLM:
        """Load what ``options`` say (the one loader of the library, the CLI, the server and
        the lm-eval backend); ``kind`` picks the shipped adapter ``adapter="auto"`` means.
        The decisions are made first, without torch (:func:`setllm.loading.plan.plan_load`),
        then :meth:`build` loads them."""
        plan = plan_load(options, kind)  # decided first, without torch; then built
        return build(cls, plan, progress)

    @classmethod
    def build(cls, plan: LoadPlan, progress: bool = False) -> SetLLM:
        """Load what ``plan`` decided: its model and adapter, read as it says
        (:func:`setllm.loading.model.build`)."""
        return build(cls, plan, progress)

    @property
    def judge_readout(self) -> str:
        """The readout :meth:`judge` uses unless told: the one the adapter was trained for
        (``setllm.json``), else :data:`setllm.readouts.DEFAULT_READOUT`."""
        return trained_readout(self.origin.trained_as)

    def score(self, prompt: PromptLike, options: Sequence[str] | None = None, eos: bool | None = None) -> list[scoring.OptionScore]:
        """Log-likelihood of each option as the response to one prompt (markup text, a list
        holding a set, a :class:`SetPrompt`...), in the options' order, as HTTP ``/v1/score``
        scores: ``lm.score("Pick one:\n{{apple\n||dog\n}}Answer:", ["apple", "dog"])``.
        Options default to the elements of the prompt's set. Each option is scored as its
        text + EOS (``eos=False``: the text alone). Many prompts: :meth:`score_many`.
        """
        if not _is_single_prompt(prompt) or _nested(options):
            _check_prompt_list(prompt, options)
            warnings.warn("SetLLM.score takes one prompt and a flat list of options; for a list of prompts (or options given "
                          "one list per prompt) call SetLLM.score_many(prompts, options), which returns one list per prompt",
                          FutureWarning, stacklevel=2)
            return self.score_many([prompt] if _is_single_prompt(prompt) else prompt, options, eos)
        return self._score_many([as_prompt(prompt)], None if options is None else [options], eos, single=True)[0]

    def score_many(self, prompts: Sequence[PromptLike], options: Sequence[Sequence[str]] | None = None,
                   eos: bool | None = None) -> list[list[scoring.OptionScore]]:
        """:meth:`score` for a list of prompts, ``options[i]`` prompt ``i``'s (default: the
        elements of each prompt's set): one list of scores per prompt, batched."""
        return self._score_many(_prompt_sequence(prompts, "score"), options, eos)

    def _score_many(self, prompts: list[SetPrompt], options: Sequence[Sequence[str]] | None, eos: bool | None,
                    single: bool = False, blank: bool = False) -> list[list[scoring.OptionScore]]:
        """``blank``: an empty option is scored (EOS alone: a judge's empty candidate); a
        user's score refuses it, as every surface does (:func:`setllm.verbs.score_options`)."""
        # Default options keep the caller's element order; the scores come back in it.
        if options is not None and (isinstance(options, str) or not isinstance(options, Sequence)):
            raise InputError(f"options must be one list of options per prompt, got {type(options).__name__}")
        if options is not None and len(options) != len(prompts):
            raise InputError(f"got options for {len(options)} prompts, but {len(prompts)} prompts")
        names = ["options" if single else f"options[{i}]" for i in range(len(prompts))]
        options = [o if blank else verbs.score_options(p, o, n)
                   for p, o, n in zip(prompts, options if options is not None else [None] * len(prompts), names)]
        results: list[list[scoring.OptionScore]] = []
        # The driver packs prompts into forwards of fixed row blocks: give it several batches
        # at once, so that the blocks fill (a lone short prompt pays a whole 64-row block).
        window = self.batch_size * SCORING_WINDOW
        for lo in self._chunks(len(prompts), "scoring", window):
            chunk = range(lo, min(lo + window, len(prompts)))
            requests = [self.score_request(prompts[i], options[i], eos, names[i]) for i in chunk]
            sums = self.score_encoded(requests)
            results += [scoring.to_option_scores(options[i], s) for i, s in zip(chunk, sums)]
        return results

    def choose(self, question: str, options: Sequence[str], context: str | None = None, normalize: bool = False) -> Choice:
        """Answer a multiple-choice question with the options given as a set.

        ``normalize`` picks by mean per-token log-likelihood instead of the sum. Many
        questions: :meth:`choose_many`.
        """
        return self._choices([verbs.choose(question, options, context)], normalize, single=True)[0]

    def choose_many(self, rows: Sequence[tuple[str, Sequence[str]] | tuple[str, Sequence[str], str | None]], *,
                    normalize: bool = False) -> list[Choice]:
        """:meth:`choose` for many ``(question, options)`` or ``(question, options, context)``
        rows in one call, batched: one :class:`Choice` per row, the same bits as :meth:`choose`
        gives that row alone (the scoring driver's shapes are fixed per request, whatever
        the batch). ``lm.choose_many([("Capital of France?", ["Paris", "Rome"]), ...])``."""
        requests = []
        for i, (question, options, context) in enumerate(verbs.rows_of(rows, "choose", ("question", "options", "context"), 2)):
            requests.append(verbs.choose(question, options, context, verbs.row_field(i)))  # a loop: the whitespace warning names the caller
        return self._choices(requests, normalize)

    def _choices(self, requests: Sequence[verbs.Choose], normalize: bool, single: bool = False) -> list[Choice]:
        """The one reading of :meth:`choose` and :meth:`choose_many`: every question's options
        scored in one :meth:`_score_many` (``single``: named as one prompt's)."""
        scores = self._score_many([r.prompt for r in requests], [list(r.options) for r in requests], None, single=single)
        return [r.choice(s, normalize) for r, s in zip(requests, scores)]

    def judge(self, instruction: str, candidates: Sequence[str], *, input: str | None = None, tie_margin: float = 0.0,
              readout: str | None = None) -> Verdict:
        """Which candidate response to ``instruction`` is best (see :mod:`setllm.tasks.judge`).

        The candidates are one set with identical, unnamed framing, and ``readout`` (one of
        :data:`setllm.readouts.READOUTS`; default: :attr:`judge_readout`) gives each the same
        computation: under an invariant variant the verdict and every score are the same in
        any order. Two best scores within ``tie_margin`` are a tie. Many: :meth:`judge_many`.
        """
        _check_tie_margin(tie_margin)
        return self._verdicts([verbs.judge(instruction, candidates, input)], tie_margin, readout)[0]

    def judge_many(self, rows: Sequence[tuple[str, Sequence[str]] | tuple[str, Sequence[str], str | None]], tie_margin: float = 0.0,
                   readout: str | None = None) -> list[Verdict]:
        """:meth:`judge` for many ``(instruction, candidates)`` or ``(instruction, candidates,
        input)`` rows in one call, batched: one :class:`Verdict` per row, the same bits as
        :meth:`judge` gives that row alone."""
        _check_tie_margin(tie_margin)
        judged = []
        for i, (instruction, candidates, input) in enumerate(verbs.rows_of(rows, "judge", ("instruction", "candidates", "input"), 2)):
            judged.append(verbs.judge(instruction, candidates, input, verbs.row_field(i)))
        return self._verdicts(judged, tie_margin, readout)

    def _verdicts(self, judged: Sequence[JudgeRow], tie_margin: float, readout: str | None) -> list[Verdict]:
        """The one reading of :meth:`judge` and :meth:`judge_many`: every row's asks scored at once."""
        scores = candidate_scores(self._judge_scores, judged, readout or self.judge_readout)
        return [verdict(s, list(r.candidates), tie_margin) for s, r in zip(scores, judged)]

    def _judge_scores(self, prompts: Sequence[SetPrompt], options: Sequence[Sequence[str]]) -> list[list[scoring.OptionScore]]:
        """A judge's asks scored: as :meth:`score_many`, an empty candidate included (EOS alone)."""
        return self._score_many(list(prompts), options, None, blank=True)

    def generate(self, prompt: PromptLike, config: generation.GenerationConfig | None = None, *, schema=None, regex: str | None = None,
                 choice: Sequence[str] | None = None, grammar: str | None = None, show_schema: bool = False, **kwargs):
        """Generate a response for one prompt.

        Decoding options come as a :class:`GenerationConfig` or as its fields by keyword
        (``max_new_tokens=32, temperature=0.7, ...``), as in transformers, whose ``do_sample``
        and ``stop_strings`` are taken too; any other transformers option is refused by name
        (:func:`setllm.verbs.generation_config`). For many prompts, :meth:`generate_many`.

        Structured: with ``schema`` (a JSON schema dict or a pydantic model class), ``regex``,
        ``choice`` (a list of strings) or ``grammar`` (Lark) the answer follows it and comes back
        parsed (a dict or list, the pydantic model, or the text); every finite set of values
        in it (an enum, a ``Literal``, a boolean, the choices) is decided by scoring each value,
        so their order cannot change the answer (:mod:`setllm.structured`). ``show_schema``:
        show the constraint before the prompt, its lists as sets (off by default: the embedded
        135M model answers worse with a JSON schema in its prompt, docs/structured.md).
        """
        constraint = {"schema": schema, "regex": regex, "choice": choice, "grammar": grammar}
        if any(v is not None for v in constraint.values()):
            spec = structured.spec(**constraint)
            return self.generate_structured(prompt, spec, config, show_schema, **kwargs).value(spec)
        if not _is_single_prompt(prompt):
            _prompt_sequence(prompt, "generate")  # neither one prompt nor a list: said before the warning
            warnings.warn("SetLLM.generate takes one prompt; for a list of prompts call SetLLM.generate_many(prompts), "
                          "which returns one text per prompt", FutureWarning, stacklevel=2)
            return self.generate_many(prompt, config, **kwargs)
        return self.generate_many([prompt], config, **kwargs)[0]

    def generate_structured(self, prompt: PromptLike | EncodedPrompt, spec: structured.Spec, config: generation.GenerationConfig | None = None,
                            show: bool = False, on_piece=None, **kwargs) -> structured_decode.Answer:
        """The structured answer to ``prompt`` under ``spec`` (:func:`setllm.structured.spec`)
        with its text, tokens and finish reason, as the server and the CLI use it
        (``on_piece(text)``: each piece as it is decided); :meth:`generate` parses it."""
        if config is not None and kwargs:
            raise InputError("pass either a GenerationConfig or keyword arguments, not both")
        return structured_decode.answer(self, prompt, spec, config or verbs.generation_config(**kwargs), show, on_piece)

    def call_tool(self, prompt: PromptLike | EncodedPrompt, tools: Sequence, tool_choice: str = "auto", config: generation.GenerationConfig | None = None,
                  on_call=None, on_piece=None, show: bool = True, **kwargs) -> structured_tools.Call | None:
        """A tool call for ``prompt``: ``tools`` (OpenAI's function tools, or
        :class:`setllm.structured.toolset.Tool`) shown before it as one set, whether to call
        (``tool_choice="auto"``; ``"required"``; a tool's name) and which decided by scoring, the
        arguments generated under the tool's parameters; None where ``auto`` answers with text.
        ``on_call(name)`` once the tool is chosen, ``on_piece(text)`` with each piece of the
        arguments (the server streams them). ``show=False``: the prompt shows the tools already
        (the server's chat prompt, in a system message)."""
        if config is not None and kwargs:
            raise InputError("pass either a GenerationConfig or keyword arguments, not both")
        offered = list(tools) if all(isinstance(t, toolset.Tool) for t in tools) else toolset.tools_of(tools)
        if show:  # else the prompt as given: an EncodedPrompt (the server's, sized already) is read as is
            prompt = template_prompt([*toolset.shown(offered, self.exact), *as_prompt(prompt).segments])
        request = self.generate_request(prompt, config or verbs.generation_config(**kwargs))
        return structured_tools.call(self, request.prompt, offered, tool_choice, request.config, on_call, on_piece)

    def generate_many(self, prompts: Sequence[PromptLike], config: generation.GenerationConfig | None = None,
                      **kwargs) -> list[str]:
        """:meth:`generate` for a list of prompts, ``batch_size`` at a time: one text per prompt."""
        if config is not None and kwargs:
            raise InputError("pass either a GenerationConfig or keyword arguments, not both")
        config = config or verbs.generation_config(**kwargs)
        requests = [self.generate_request(p, config) for p in _prompt_sequence(prompts, "generate")]  # every one fits: then decode
        out: list[str] = []
        for lo in self._chunks(len(requests), "generating"):
            out += [text for text, _ in self.generate_encoded([r.prompt for r in requests[lo : lo + self.batch_size]], config)]
        return out


def _check_tie_margin(tie_margin: float) -> None:
    if tie_margin < 0:
        raise InputError(f"tie_margin must be >= 0, got {tie_margin}")


def _check_prompt_list(prompts, options) -> None:
    """A list of plain strings is a list of prompts (one per string); given one flat list of
    options, it was meant as one prompt: say how it was read, and the fix."""
    if (isinstance(prompts, (list, tuple)) and prompts and all(isinstance(p, str) for p in prompts)
            and options is not None and not _nested(options)):
        raise InputError(f"a list of {len(prompts)} strings is read as {len(prompts)} prompts, which take one list of options "
                         f"each (options=[[...], ...]); for one prompt, pass one string (markup: 'Q:\\n{{{{a\\n||b\\n}}}}Answer:') "
                         f"or a list holding a Set (['Q:\\n', Set(['a\\n', 'b\\n']), 'Answer:'])")



def _is_single_prompt(obj) -> bool:
    """One prompt: text, a SetPrompt, a JSON-style dict, or a list that holds a set."""
    if isinstance(obj, (str, SetPrompt, dict)):
        return True
    return isinstance(obj, (list, tuple)) and any(isinstance(x, (set, frozenset, Set)) or (isinstance(x, dict) and "set" in x) for x in obj)


def _nested(options) -> bool:
    """Options given one list per prompt (``[["a", "b"]]``), not one flat list (``["a", "b"]``)."""
    return (isinstance(options, Sequence) and not isinstance(options, str) and len(options) > 0
            and all(isinstance(o, Sequence) and not isinstance(o, str) for o in options))


def _prompt_sequence(prompts, call: str) -> list[SetPrompt]:
    """The prompts of ``{call}_many``: a list, never one prompt (that is ``{call}``'s)."""
    if isinstance(prompts, (str, SetPrompt, dict)) or not isinstance(prompts, Sequence):
        raise InputError(f"{call}_many takes a list of prompts, got {type(prompts).__name__}; for one prompt (text, a list "
                         f"holding a Set, a SetPrompt) call {call}")
    return [as_prompt(p) for p in prompts]
