"""Judge readouts against human labels and length baselines.

For each UltraFeedback test pair (ties dropped; the two responses in a seeded order, so the
better one is first half the time), score what every readout of `setllm.readouts` needs,
under the untrained Set-LLM reading (`setmask-setpe`, no adapter), the shipped judge adapter
and the untrained causal model (`causal-pe`, both orders), then report per judge:
accuracy, position consistency, first-slot rate, and accuracy on the pairs where the better
response is the longer one and where it is the shorter one; beside pick-the-longer and
pick-the-shorter (by characters). Resumable: raw scores go to ``--out/<judge>.jsonl`` one pair
per line, a rerun scores only what is missing (``--readouts`` limits what is scored: the
verdict prompts repeat the whole set once per candidate and cost more than the rest together).

Usage: python research/judge_readouts.py --data ../shared/data/ultrafeedback/test.jsonl
       --out research/results/judge_readouts [--limit N --subset-seed S] [--judges set,causal,set-judge]
       [--adapter NAME=PATH (one more judge: that adapter, read as the variant it was trained as)]
       [--readouts likelihood,mean,pmi] [--skip N] [--report-only]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
from pathlib import Path

from tqdm.auto import tqdm

from setllm import SetLLM, readouts
from setllm.core.layout.variants import get_variant
from setllm.loading import AdapterInfo
from setllm.policy import ranking
from setllm.tasks.judge import judge_prompt, pair_row

JUDGES = {  # name -> (variant, adapter, orders scored)
    "set": ("setmask-setpe", "none", 1),
    "set-judge": ("setmask-setpe", "auto", 1),  # the shipped judge adapter (kind="judge"); before 2026-11-26 the SFT one, now sft-judge.jsonl
    "causal": ("causal-pe", "none", 2),
}


def load_pairs(path: str, limit: int | None, subset_seed: int | None) -> list[dict]:
    rows = [pair_row(json.loads(line), f"{path}:{i + 1}") for i, line in enumerate(open(path, encoding="utf-8"))]
    rows = [r for r in rows if r is not None]
    if subset_seed is not None:  # shuffled, then the first N: a larger --limit extends a smaller one (resumable)
        random.Random(subset_seed).shuffle(rows)
    return rows if limit is None else rows[:limit]


# readout -> raw parts; "pmi-mean" (pmi per response token) is measured here before it is offered in the library
NEEDS = {"likelihood": ("judged",), "mean": ("judged",), "pmi": ("judged", "alone"), "pmi-mean": ("judged", "alone"), "verdict": ("yes_no",)}


def raw_scores(lm: SetLLM, pair: dict, orders: int, parts: set[str]) -> dict:
    """The raw ``parts`` the readouts combine, per order (0: the data's order, 1: swapped)."""
    out = {}
    for k in range(orders):
        cands = pair["candidates"] if k == 0 else pair["candidates"][::-1]
        row = readouts.JudgeRow(pair["instruction"], tuple(c.strip() for c in cands))
        asks = {"judged": [(judge_prompt(row.instruction, list(row.candidates)), list(row.candidates))],
                "alone": [(readouts.alone_prompt(row), list(row.candidates))],
                "yes_no": [(readouts.verdict_prompt(row, i), [readouts.YES, readouts.NO]) for i in range(len(cands))]}
        # The instruction alone does not depend on the candidates' order: the swapped order
        # reuses it (the same (prompt, option) computations: bit-identical, see setllm.core.forward.scoring).
        names = [n for n in asks if n in parts and not (n == "alone" and k == 1)]
        flat = [a for n in names for a in asks[n]]
        got = iter(lm.score_many([p for p, _ in flat], [o for _, o in flat]))
        rec = {}
        for n in names:
            scores = [next(got) for _ in asks[n]]
            if n == "yes_no":
                rec[n] = [[s.logprob for s in g] for g in scores]
            else:
                rec[n] = [s.logprob for s in scores[0]]
                if n == "judged":
                    rec["tokens"] = [s.n_tokens for s in scores[0]]
        if k == 1 and "alone" in parts:
            rec["alone"] = out["0"]["alone"][::-1]
        out[str(k)] = rec
    return out


def has(raw: dict, parts: set[str]) -> bool:
    return all(parts <= set(r) for r in raw.values())


def readout_scores(raw: dict, readout: str) -> list[float]:
    if readout == "likelihood":
        return raw["judged"]
    if readout == "mean":
        return [lp / n for lp, n in zip(raw["judged"], raw["tokens"])]
    if readout == "pmi":
        return [a - b for a, b in zip(raw["judged"], raw["alone"])]
    if readout == "pmi-mean":
        return [(a - b) / n for a, b, n in zip(raw["judged"], raw["alone"], raw["tokens"])]
    return [y - n for y, n in raw["yes_no"]]


def run_judge(name: str, pairs: list[dict], out: Path, parts: set[str], score: bool = True, model: str | None = None) -> dict[str, dict]:
    path = out / f"{name}.jsonl"
    done = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                done[rec["id"]] = rec["raw"]  # a later line (more parts scored) replaces an earlier one
    todo = [p for p in pairs if not (p["id"] in done and has(done[p["id"]], parts))]
    if todo and score:
        variant, adapter, orders = JUDGES[name]
        lm = SetLLM.from_pretrained(model, adapter=adapter, variant=variant, kind="judge")
        print(f"{name}: {lm.origin.model}, adapter {lm.origin.adapter or 'none'}, variant {lm.variant.name}", file=sys.stderr)
        check_same_weights(path, lm, bool(done))
        with path.open("a", encoding="utf-8") as f:
            for p in tqdm(todo, desc=name, file=sys.stderr):
                done[p["id"]] = raw_scores(lm, p, orders, parts)
                f.write(json.dumps({"id": p["id"], "raw": done[p["id"]]}) + "\n")
                f.flush()
    return done


def check_same_weights(path: Path, lm: SetLLM, resuming: bool) -> None:
    """A judge's raw scores are resumed only under the weights that gave them (a shipped
    adapter replaced under the same judge name must not mix with its predecessor's scores):
    ``<name>.weights`` beside them holds the fingerprint; a file older than that record is
    taken as given once, with a warning."""
    from setllm.core.model.fingerprint import weights_fingerprint

    stamp, now = path.with_suffix(".weights"), weights_fingerprint(lm.model)
    if stamp.exists() and stamp.read_text().strip() != now:
        sys.exit(f"error: {path} holds scores of other weights ({stamp.read_text().strip()}, now {now}): "
                 "name this judge differently (--adapter NAME=PATH) or move the file away")
    if resuming and not stamp.exists():
        print(f"warning: {path} has no weights record; assuming its scores came from these weights ({now})", file=sys.stderr)
    stamp.write_text(now + "\n")


def pick(scores: list[float], cands: list[str]) -> int:
    """The library's verdict rule: the best score, equal scores by text."""
    return ranking(scores, cands)[0]


def metrics(picks: list[tuple[int, int | None]], pairs: list[dict]) -> dict:
    """``picks``: (pick in the data's order, pick in the swapped order or None) per pair, as
    indices into the data's order."""
    n = len(pairs)
    acc = sum(a == p["label"] for (a, _), p in zip(picks, pairs)) / n
    longer = [i for i, p in enumerate(pairs) if len(p["candidates"][p["label"]]) > len(p["candidates"][1 - p["label"]])]
    shorter = [i for i, p in enumerate(pairs) if len(p["candidates"][p["label"]]) < len(p["candidates"][1 - p["label"]])]
    row = {"accuracy": acc, "se": math.sqrt(acc * (1 - acc) / n), "n": n,
           "acc_better_longer": sum(picks[i][0] == pairs[i]["label"] for i in longer) / max(1, len(longer)),
           "acc_better_shorter": sum(picks[i][0] == pairs[i]["label"] for i in shorter) / max(1, len(shorter)),
           "n_longer": len(longer), "n_shorter": len(shorter)}
    if all(b is not None for _, b in picks):
        row["accuracy_swapped"] = sum(b == p["label"] for (_, b), p in zip(picks, pairs)) / n
        row["consistency"] = sum(a == b for a, b in picks) / n
        row["first_slot"] = (sum(a == 0 for a, _ in picks) + sum(b == 1 for _, b in picks)) / (2 * n)  # b: index in data order; shown first when swapped is 1
        row["both_agree"] = sum(a == b == p["label"] for (a, b), p in zip(picks, pairs)) / n
    return row


def table(pairs: list[dict], raws: dict[str, dict], names: list[str]) -> list[tuple[str, dict]]:
    rows = []
    by_len = lambda p, longer: max(range(2), key=lambda i: (len(p["candidates"][i]) if longer else -len(p["candidates"][i]), -i))  # noqa: E731
    rows.append(("pick the longer response (no model)", metrics([(by_len(p, True), None) for p in pairs], pairs)))
    rows.append(("pick the shorter response (no model)", metrics([(by_len(p, False), None) for p in pairs], pairs)))
    for name, raw in raws.items():
        for readout in names:
            picks = []
            summed = []
            for p in pairs:
                cands = [c.strip() for c in p["candidates"]]
                a = pick(readout_scores(raw[p["id"]]["0"], readout), cands)
                if "1" in raw[p["id"]]:
                    s1 = readout_scores(raw[p["id"]]["1"], readout)[::-1]  # back to the data's order
                    b = pick(s1, cands)
                    summed.append(pick([x + y for x, y in zip(readout_scores(raw[p["id"]]["0"], readout), s1)], cands))
                else:
                    b = None
                picks.append((a, b))
            rows.append((f"{name}, {readout}", metrics(picks, pairs)))
            if summed:
                rows.append((f"{name}, {readout}, both orders summed", metrics([(s, None) for s in summed], pairs)))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--limit", type=int)
    p.add_argument("--subset-seed", type=int)
    p.add_argument("--skip", type=int, default=0, help="report without the first N pairs (e.g. those a readout was chosen on)")
    p.add_argument("--judges", default="set,causal,set-judge")
    p.add_argument("--adapter", action="append", default=[], metavar="NAME=PATH",
                   help="one more judge NAME: the adapter at PATH read as the variant it was trained as (repeatable; name it in --judges)")
    p.add_argument("--readouts", default=",".join(NEEDS), help="the readouts to score and report (comma-separated)")
    p.add_argument("--json", help="write the table as JSON here too")
    p.add_argument("--model", help="a --model name (default: the embedded SmolLM2); give each model its own --out")
    p.add_argument("--report-only", action="store_true", help="score nothing: report the pairs every judge has scored so far")
    args = p.parse_args()
    for spec in args.adapter:
        name, sep, path = spec.partition("=")
        if not sep or not name or name in JUDGES:
            p.error(f"--adapter {spec!r}: give NAME=PATH with a new NAME (not {', '.join(JUDGES)})")
        variant = AdapterInfo.read(path).variant or "setmask-setpe"  # read as trained; an order-sensitive one in both orders
        JUDGES[name] = (variant, path, 1 if get_variant(variant).invariant else 2)
    unknown = [j for j in args.judges.split(",") if j not in JUDGES]
    if unknown:
        p.error(f"unknown judge(s) {', '.join(unknown)}; choose from {', '.join(JUDGES)} (or add one with --adapter)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = args.readouts.split(",")
    unknown = [n for n in names if n not in NEEDS]
    if unknown:
        p.error(f"unknown readout(s) {', '.join(unknown)}; choose from {', '.join(NEEDS)}")
    parts = {part for n in names for part in NEEDS[n]}
    pairs = load_pairs(args.data, args.limit, args.subset_seed)[args.skip :]
    raws = {name: run_judge(name, pairs, out, parts, not args.report_only, args.model) for name in args.judges.split(",")}
    pairs = [p for p in pairs if all(p["id"] in raw and has(raw[p["id"]], parts) for raw in raws.values())]
    rows = table(pairs, raws, names)
    import torch

    print(f"# judge readouts ({platform.machine()}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; "
          f"model {args.model or 'embedded SmolLM2-135M-Instruct'}; {len(pairs)} pairs of {args.data}, limit {args.limit}, "
          f"subset seed {args.subset_seed}, skip {args.skip})\n")
    print("| judge, readout | accuracy | ± se | swapped | both agree | consistency | first slot | better is longer | better is shorter |")
    print("|---|---|---|---|---|---|---|---|---|")
    pct = lambda r, k: f"{100 * r[k]:.1f}" if k in r else ""  # noqa: E731
    for name, r in rows:
        print(f"| {name} | {pct(r, 'accuracy')} | {100 * r['se']:.1f} | {pct(r, 'accuracy_swapped')} | {pct(r, 'both_agree')} | "
              f"{pct(r, 'consistency')} | {pct(r, 'first_slot')} | {pct(r, 'acc_better_longer')} (n={r['n_longer']}) | "
              f"{pct(r, 'acc_better_shorter')} (n={r['n_shorter']}) |")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(rows), indent=1))


if __name__ == "__main__":
    main()
