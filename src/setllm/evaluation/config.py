"""``setllm eval``'s options: one dataclass, one field per flag, validated on creation."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.doccache.options import cache_dir_field, cache_dir_mb_field, cache_mb_field, check_flags
from ..errors import InputError
from ..readouts import READOUTS
from ..tasks import DOCUMENT_TASKS, JUDGE_TASKS, TASKS, TEMPLATES, get_task
from ..tasks.documents import parse_positions
from .metrics import MODES, plan_for
from .orderings import ORDERING_CHOICES


def _help(text: str, **extra) -> dict:
    return {"help": text, **extra}


@dataclass
class EvalConfig:
    """One ``setllm eval`` run (the model flags are :class:`setllm.LoadOptions`)."""

    dataset: str | None = field(default=None, metadata=_help(
        "benchmark to evaluate; 'ultrafeedback-pairs' / 'judge' (with --data-file) evaluate a judge; 'documents' (with --data-file) "
        "answers from documents read as a set", choices=[*TASKS, *JUDGE_TASKS, *DOCUMENT_TASKS]))
    split: str | None = field(default=None, metadata=_help("split; default: the paper's (ARC test, others validation)", metavar="S"))
    data_dir: str | None = field(default=None, metadata=_help(
        "read <D>/<dataset>/<split>.jsonl (setllm's record format) instead of the HF hub; default: $SETLLM_DATA_DIR if set",
        metavar="D"))
    data_file: str | None = field(default=None, metadata=_help(
        "your own JSONL of {question, choices, label, context?} (with --dataset: that benchmark's templates)", metavar="F"))
    template: str = field(default="modified", metadata=_help(
        "'modified': options in the prompt as a set; 'original': the paper's original prompt; "
        "'held-out': options as a set in wording no training mix uses", choices=list(TEMPLATES)))
    modes: str = field(default="single,random,adversarial,majority", metadata=_help(
        "comma-separated modes: " + ", ".join(MODES), metavar="M[,M...]"))
    max_orderings: int | None = field(default=None, metadata=_help(
        "test at most N orderings per question (the dataset's order always included); default: all k!", metavar="N"))
    ordering_choice: str = field(default="random", metadata=_help(
        "which orderings under --max-orderings: 'random' (seeded per question) or 'first' (lexicographic; the paper's CSQA choice)",
        choices=list(ORDERING_CHOICES)))
    gold_positions: str | None = field(default=None, metadata=_help(
        "--dataset documents: move the gold document to each of these positions (negative: from the end); default: every one",
        metavar="P[,P...]"))
    verify_invariance: bool = field(default=False, metadata=_help(
        "for invariant variants: run every tested ordering anyway, unsorted, and count answer changes (expected 0)"))
    cache_mb: float = cache_mb_field()
    cache_dir: str | None = cache_dir_field()
    cache_dir_mb: float = cache_dir_mb_field()
    normalize: bool = field(default=False, metadata=_help("pick by mean per-token log-likelihood instead of the sum (the paper: sum)"))
    readout: str | None = field(default=None, metadata=_help(
        "judge datasets: how candidates are scored (setllm.readouts); default: the one the adapter was trained for, else likelihood", choices=list(READOUTS)))
    skip_bad: bool = field(default=False, metadata=_help("skip malformed records (counted, the first named) instead of stopping"))
    limit: int | None = field(default=None, metadata=_help("evaluate at most N questions", metavar="N"))
    subset_seed: int | None = field(default=None, metadata=_help("with --limit: a seeded random subset instead of the first N", metavar="S"))
    seed: int = field(default=0, metadata=_help("seed for sampled orderings and majority-vote tie-breaks", metavar="S"))
    label: str | None = field(default=None, metadata=_help("row name in `setllm report`; default: the variant's paper name", metavar="TEXT"))
    out: str = field(default="", metadata=_help("run directory: run.json, predictions.jsonl, summary.json (required)", metavar="DIR"))
    overwrite: bool = field(default=False, metadata=_help("discard an earlier run in --out instead of resuming it"))
    log_samples: bool = field(default=False, metadata=_help("also write each question's prompt (dataset order) and choices to predictions.jsonl"))
    progress: bool = field(default=True, metadata=_help("show a progress bar"))

    def __post_init__(self) -> None:
        check_flags(self.cache_mb, self.cache_dir, self.cache_dir_mb)
        if not self.out:
            raise InputError("no output directory: pass --out DIR")
        if self.dataset is None and not self.data_file:
            raise InputError("pass --dataset (one of: " + ", ".join([*TASKS, *JUDGE_TASKS, *DOCUMENT_TASKS]) + ") or --data-file FILE.jsonl")
        if self.gold_positions is not None:
            if self.dataset not in DOCUMENT_TASKS:
                raise InputError("--gold-positions is for --dataset documents")
            parse_positions(self.gold_positions)
        if self.dataset is not None:
            get_task(self.dataset)
        if self.readout is not None and self.dataset not in JUDGE_TASKS:
            raise InputError(f"--readout is for the judge datasets ({', '.join(JUDGE_TASKS)}), not --dataset {self.dataset}")
        if isinstance(self.modes, (list, tuple)):  # from a config file
            self.modes = ",".join(self.modes)
        if not self.mode_list:
            raise InputError("--modes is empty; choose from: " + ", ".join(MODES))
        plan_for(self.mode_list)
        if self.template not in TEMPLATES:
            raise InputError(f"--template must be one of {', '.join(TEMPLATES)}, got {self.template!r}")
        if self.ordering_choice not in ORDERING_CHOICES:
            raise InputError(f"--ordering-choice must be one of {', '.join(ORDERING_CHOICES)}, got {self.ordering_choice!r}")
        if self.subset_seed is not None and self.limit is None:
            raise InputError("--subset-seed picks a random subset of --limit questions; pass --limit N too")
        for name in ("max_orderings", "limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {value}")

    @property
    def mode_list(self) -> list[str]:
        return [m.strip() for m in self.modes.split(",") if m.strip()]
