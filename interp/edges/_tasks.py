"""Tasks for circuit discovery: clean/corrupt prompt pairs with a logit-difference metric, generated offline.

A :class:`Task` is a list of clean prompts, a corrupt prompt per clean one (the same token length), and
per prompt the answer token and the wrong token, so that its metric is

    M = logit[answer] − logit[wrong]       at each prompt's last token          (:class:`interp.LogitDiff`)

Users build one from their own prompts (``Task(name, clean, corrupt, answer, wrong, model=model)``, which checks
every pair's token lengths and tokens when built) or from a JSON Lines file (:meth:`Task.from_jsonl`, one object per
pair with ``clean``, ``corrupt``, ``answer``, ``wrong`` and an optional ``metric``, checked line by line); three are
shipped:

* ``ioi`` — indirect object identification (Wang et al. 2022, arXiv 2211.00593): templates in ABBA and BABA
  order ("When Mary and John went to the store, John gave a drink to" → " Mary", wrong " John"); the corrupt
  prompt is the same sentence with three other names (A, B, B → C, D, E), so no name is repeated; names are
  kept only if they are one token (with their leading space) for the model's tokenizer;
* ``induction`` — ``<bos>`` + n random tokens + the first n − 1 of them again, answer the n-th token (an
  induction head copies it); the corrupt prompt has a different first half, so the repeat has no
  earlier occurrence; wrong is the corrupt half's n-th token;
* ``factual`` — country → capital ("The capital of France is" → " Paris"), corrupt = another country of the
  same token length, wrong = that country's capital (first token of each capital).

Every prompt of a generated task has the same token length (the most common length among the candidates),
so mean and resample ablations work position by position.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import InitVar, dataclass, field, replace
from typing import Optional, Sequence, Union

import torch
from torch import Tensor

from interp._validate import check_int, check_int_min, check_positive_int, is_int
from interp.causal import Logit, LogitDiff, LogProb, Metric, Prob
from interp.errors import ArgumentError, UnsupportedOperationError
from interp.models.internal import ordinary_tokens, text_ids
from interp.models import tokenize
from interp.models import Model
from interp.stream.internal import require_model

__all__ = ["Task", "load_task", "read_pairs", "TASKS", "TASK_METRICS", "IOI_NAMES", "IOI_TEMPLATES", "CAPITALS"]

TASKS = ("ioi", "induction", "factual")
#: a task's metric, by name: what :attr:`Task.metric` reads at each prompt's last token
TASK_METRICS = {
    "logit_diff": "logit[answer] − logit[wrong]",
    "logprob": "log softmax(logits)[answer] (wrong unused)",
    "prob": "softmax(logits)[answer] (wrong unused)",
    "logit": "logit[answer] (wrong unused)",
}
#: the metric of a pairs line that gives none
DEFAULT_TASK_METRIC = "logit_diff"
MULTI_TOKEN = ("error", "first")
_PAIR_KEYS = ("clean", "corrupt", "answer", "wrong")

IOI_NAMES = (
    "Mary",
    "John",
    "Tom",
    "James",
    "Alice",
    "Bob",
    "Sarah",
    "David",
    "Michael",
    "Emma",
    "Anna",
    "Paul",
    "Mark",
    "Lisa",
    "Kate",
    "Jack",
    "Peter",
    "Laura",
    "Daniel",
    "Rachel",
    "Sam",
    "Ben",
    "Dan",
    "Max",
    "Alex",
    "Chris",
    "Steve",
    "Rose",
    "Amy",
    "Emily",
    "Grace",
    "Jane",
    "Ryan",
    "Kevin",
    "Brian",
    "Eric",
    "Adam",
    "Frank",
    "George",
    "Henry",
    "Jason",
    "Joe",
    "Justin",
    "Luke",
    "Matt",
    "Nick",
    "Richard",
    "Robert",
    "Scott",
    "Thomas",
    "William",
    "Andrew",
    "Anthony",
    "Charles",
    "Edward",
    "Jessica",
    "Linda",
    "Susan",
    "Karen",
    "Nancy",
    "Betty",
    "Helen",
)
#: BABA order ({B} first): "{B} and {A} …, {B} gave … to" → {A}; the ABBA version swaps the first two names.
IOI_TEMPLATES = (
    "Then, {B} and {A} went to the {PLACE}. {B} gave a {OBJECT} to",
    "Then, {B} and {A} had a lot of fun at the {PLACE}. {B} gave a {OBJECT} to",
    "Then, {B} and {A} were working at the {PLACE}. {B} decided to give a {OBJECT} to",
    "Then, {B} and {A} were thinking about going to the {PLACE}. {B} wanted to give a {OBJECT} to",
    "After {B} and {A} went to the {PLACE}, {B} gave a {OBJECT} to",
    "When {B} and {A} got a {OBJECT} at the {PLACE}, {B} decided to give it to",
    "When {B} and {A} got a {OBJECT} at the {PLACE}, {B} decided to give the {OBJECT} to",
    "While {B} and {A} were working at the {PLACE}, {B} gave a {OBJECT} to",
    "While {B} and {A} were commuting to the {PLACE}, {B} gave a {OBJECT} to",
    "After the lunch, {B} and {A} went to the {PLACE}. {B} gave a {OBJECT} to",
    "Afterwards, {B} and {A} went to the {PLACE}. {B} gave a {OBJECT} to",
    "Friends {B} and {A} found a {OBJECT} at the {PLACE}. {B} gave it to",
)
IOI_PLACES = ("store", "garden", "restaurant", "school", "hospital", "office", "house", "station", "park", "beach")
IOI_OBJECTS = ("ring", "kiss", "bone", "basketball", "computer", "necklace", "drink", "snack", "book", "flower")

CAPITALS = (
    ("France", "Paris"),
    ("Germany", "Berlin"),
    ("Italy", "Rome"),
    ("Spain", "Madrid"),
    ("Japan", "Tokyo"),
    ("China", "Beijing"),
    ("Russia", "Moscow"),
    ("England", "London"),
    ("Egypt", "Cairo"),
    ("Greece", "Athens"),
    ("Canada", "Ottawa"),
    ("Australia", "Canberra"),
    ("Turkey", "Ankara"),
    ("Iran", "Tehran"),
    ("Iraq", "Baghdad"),
    ("Kenya", "Nairobi"),
    ("Norway", "Oslo"),
    ("Sweden", "Stockholm"),
    ("Finland", "Helsinki"),
    ("Denmark", "Copenhagen"),
    ("Poland", "Warsaw"),
    ("Austria", "Vienna"),
    ("Hungary", "Budapest"),
    ("Portugal", "Lisbon"),
    ("Ireland", "Dublin"),
    ("Belgium", "Brussels"),
    ("Netherlands", "Amsterdam"),
    ("Switzerland", "Bern"),
    ("Thailand", "Bangkok"),
    ("Vietnam", "Hanoi"),
    ("Indonesia", "Jakarta"),
    ("Peru", "Lima"),
    ("Chile", "Santiago"),
    ("Cuba", "Havana"),
    ("Ukraine", "Kyiv"),
    ("Philippines", "Manila"),
    ("Pakistan", "Islamabad"),
    ("Nigeria", "Abuja"),
    ("Morocco", "Rabat"),
    ("Argentina", "Buenos Aires"),
    ("Scotland", "Edinburgh"),
    ("Wales", "Cardiff"),
    ("Israel", "Jerusalem"),
    ("Syria", "Damascus"),
    ("Lebanon", "Beirut"),
    ("Afghanistan", "Kabul"),
    ("Nepal", "Kathmandu"),
    ("Mongolia", "Ulaanbaatar"),
)
FACT_TEMPLATES = ("The capital of {C} is", "The capital city of {C} is", "{C}'s capital city is")

TokenSpecs = Sequence[Union[str, int]]


@dataclass(frozen=True)
class Task:
    """Clean/corrupt prompt pairs with per-prompt answer and wrong tokens (see the module docstring).

    ``clean`` / ``corrupt``: lists of strings or int tensors [n, pos]; ``answer`` / ``wrong``: one token
    (string or id) per prompt; ``metric_name``: one of :data:`TASK_METRICS` (default ``"logit_diff"``, so
    :attr:`metric` is ``LogitDiff(answer, wrong)`` at each prompt's last token).

    When the task is checked: a Task holds no model, and whether two strings have the same token length
    depends on the tokenizer. Pass ``model=`` (not stored) to check every pair when the Task is built —
    equal token lengths, one token per answer/wrong (:meth:`check`); without it, token-id tensors are still
    checked for equal shapes, but text pairs are checked only when an analysis first runs the task.
    :meth:`from_jsonl` always takes the model and checks each record, naming its line.
    """

    name: str
    clean: Union[list, Tensor] = field(repr=False)
    corrupt: Union[list, Tensor] = field(repr=False)
    answer: list = field(repr=False)
    wrong: list = field(repr=False)
    description: str = ""
    metric_name: str = "logit_diff"
    model: InitVar[Optional[Model]] = None

    def __post_init__(self, model: Optional[Model]) -> None:
        n = len(self.clean)
        if n == 0:
            raise ArgumentError(f"task {self.name!r}: clean is empty; give at least one prompt")
        for arg in ("corrupt", "answer", "wrong"):
            v = getattr(self, arg)
            if isinstance(v, str) or len(v) != n:
                raise ArgumentError(
                    f"task {self.name!r}: {arg} has {len(v) if not isinstance(v, str) else 'a string, not'} "
                    f"entries but clean has {n}; give one per clean prompt"
                )
        if isinstance(self.clean, Tensor) != isinstance(self.corrupt, Tensor):
            raise ArgumentError(f"task {self.name!r}: clean and corrupt must both be text or both be token ids")
        if (
            isinstance(self.clean, Tensor)
            and isinstance(self.corrupt, Tensor)
            and tuple(self.clean.shape) != tuple(self.corrupt.shape)
        ):
            raise ArgumentError(
                f"task {self.name!r}: clean has shape {tuple(self.clean.shape)} but corrupt has "
                f"{tuple(self.corrupt.shape)}; each clean/corrupt pair must have the same token length"
            )
        if not isinstance(self.metric_name, str) or self.metric_name not in TASK_METRICS:
            raise ArgumentError(
                f"metric_name={self.metric_name!r} is not a task metric; choose one of {list(TASK_METRICS)}"
            )
        object.__setattr__(self, "answer", list(self.answer))
        object.__setattr__(self, "wrong", list(self.wrong))
        if model is not None:
            self.check(model)

    @property
    def n(self) -> int:
        return len(self.clean)

    def __len__(self) -> int:
        return self.n

    @property
    def metric(self) -> Metric:
        """The task's metric at each prompt's last token (``metric_name``; by default logit[answer] − logit[wrong])."""
        if self.metric_name == "logprob":
            return LogProb(list(self.answer))
        if self.metric_name == "prob":
            return Prob(list(self.answer))
        if self.metric_name == "logit":
            return Logit(list(self.answer))
        return LogitDiff(answer=list(self.answer), wrong=list(self.wrong))

    def head(self, n: int) -> "Task":
        """The first ``n`` pairs."""
        n = check_positive_int("n", n)
        if n > self.n:
            raise ArgumentError(f"n={n} is more than the task's {self.n} pairs")
        return replace(
            self, clean=self.clean[:n], corrupt=self.corrupt[:n], answer=self.answer[:n], wrong=self.wrong[:n]
        )

    def check(self, model: Model) -> None:
        """A typed error if a pair differs in token length or an answer/wrong token is not one token for ``model``."""
        from interp.causal.internal import make_pair
        from interp.attribution.internal import resolve_tokens

        require_model(model)
        make_pair(model, self.clean, self.corrupt, self.metric, need_corrupt=True)
        resolve_tokens(model, list(self.wrong), self.n, "wrong")  # also when the metric does not read it

    @classmethod
    def from_jsonl(
        cls,
        path: Union[str, "os.PathLike[str]"],
        model: Model,
        *,
        name: Optional[str] = None,
        multi_token: str = "error",
        description: str = "",
    ) -> "Task":
        """A task from a JSON Lines file, checked for ``model`` record by record.

        Each non-blank line is one pair: ``{"clean": str, "corrupt": str, "answer": str | int, "wrong": str | int}``
        and optionally ``"metric"`` (one of :data:`TASK_METRICS`). A task has one metric: a line without
        ``"metric"`` means the default ``"logit_diff"``, and lines that disagree (``"logprob"`` on one line,
        none or another on an earlier one) are an :class:`~interp.errors.ArgumentError` naming both lines.
        Checked on load, each error naming the file and line: first everything that needs no model (the JSON,
        the keys, the types, the metric: :func:`read_pairs`), then equal token lengths of ``clean`` and
        ``corrupt`` (tokenised as the analyses do, BOS included) and that ``answer`` / ``wrong`` are one token.
        A text answer of several tokens is an error unless ``multi_token="first"``, which keeps its first token
        (as the shipped factual task does with multi-token capitals). ``name`` defaults to the file's stem.
        """
        require_model(model)
        if multi_token not in MULTI_TOKEN:
            raise ArgumentError(f"multi_token={multi_token!r} must be one of {list(MULTI_TOKEN)}")
        recs, metric_name = read_pairs(path)
        if not model.arch.has_logits:
            raise UnsupportedOperationError(
                f"path={str(path)!r}: a task reads logits; model {model.name!r} has none (an encoder)"
            )
        if model.tokenizer is None:
            raise UnsupportedOperationError(
                f"path={str(path)!r}: the pairs are text, but model {model.name!r} has no tokenizer"
            )
        where = lambda i: f"{os.fspath(path)}, line {i}"  # noqa: E731
        lc = _lengths(model, [r["clean"] for _, r in recs])
        lk = _lengths(model, [r["corrupt"] for _, r in recs])
        answers, wrongs = [], []
        for (i, rec), a, b in zip(recs, lc, lk):
            if a != b:
                raise ArgumentError(
                    f"{where(i)}: clean has {a} tokens but corrupt has {b} for {model.name!r}'s "
                    f"tokenizer (clean={rec['clean']!r}, corrupt={rec['corrupt']!r}); each pair "
                    "must have the same token length (patching aligns positions)"
                )
            answers.append(_pair_token(model, rec["answer"], f"{where(i)}: answer", multi_token))
            wrongs.append(_pair_token(model, rec["wrong"], f"{where(i)}: wrong", multi_token))
        stem = os.path.splitext(os.path.basename(os.fspath(path)))[0]
        return cls(
            stem if name is None else name,
            [r["clean"] for _, r in recs],
            [r["corrupt"] for _, r in recs],
            answers,
            wrongs,
            description=description or f"{len(recs)} pairs from {os.path.basename(os.fspath(path))}",
            metric_name=metric_name,
            model=model,
        )


def read_pairs(path: Union[str, "os.PathLike[str]"]) -> tuple[list[tuple[int, dict]], str]:
    """The records of a pairs file, checked without a model: ([(line number, record)], the task's metric name).

    Every check that needs no tokenizer, each error an :class:`~interp.errors.ArgumentError` naming the file and
    line: the JSON, the keys, the types and the metric (a line without ``"metric"`` means ``"logit_diff"``; lines
    that disagree are an error, not the last one silently applied to every line). :meth:`Task.from_jsonl` calls
    it first; ``interp circuit --pairs`` calls it before loading the model, so a bad file fails at once.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(f"path={path!r} must be a path to a JSON Lines file")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ArgumentError(f"path={str(path)!r} cannot be read: {e.strerror or e}") from None
    where = lambda i: f"{os.fspath(path)}, line {i}"  # noqa: E731
    recs: list[tuple[int, dict]] = []
    first: Optional[tuple[int, str, bool]] = None  # (line, metric, given on that line)
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ArgumentError(f"{where(i)}: not valid JSON ({e.msg}); each line must be one JSON object") from None
        if not isinstance(rec, dict):
            raise ArgumentError(f"{where(i)}: a {type(rec).__name__}, not a JSON object with keys {list(_PAIR_KEYS)}")
        missing = [k for k in _PAIR_KEYS if k not in rec]
        if missing:
            raise ArgumentError(
                f"{where(i)}: missing key(s) {missing}; each pair needs {list(_PAIR_KEYS)} (and optionally 'metric')"
            )
        extra = sorted(set(rec) - set(_PAIR_KEYS) - {"metric"})
        if extra:
            raise ArgumentError(f"{where(i)}: unknown key(s) {extra}; allowed: {list(_PAIR_KEYS) + ['metric']}")
        for k in ("clean", "corrupt"):
            if not isinstance(rec[k], str) or not rec[k].strip():
                raise ArgumentError(f"{where(i)}: {k}={rec[k]!r} must be a non-empty string")
        for k in ("answer", "wrong"):
            if not (isinstance(rec[k], str) or is_int(rec[k])):
                raise ArgumentError(f"{where(i)}: {k}={rec[k]!r} must be a token string or a token id")
        given = "metric" in rec
        m = rec["metric"] if given else DEFAULT_TASK_METRIC
        if given and (not isinstance(m, str) or m not in TASK_METRICS):
            raise ArgumentError(f"{where(i)}: metric={m!r} is not a task metric; choose one of {list(TASK_METRICS)}")
        if first is None:
            first = (i, m, given)
        elif m != first[1]:
            here = f"metric={m!r}" if given else f"no metric (the default {m!r})"
            there = f"gives metric={first[1]!r}" if first[2] else f"gives no metric (the default {first[1]!r})"
            raise ArgumentError(
                f"{where(i)}: {here} but line {first[0]} {there}; a task has one metric: give the "
                'same "metric" on every line, or on none (logit_diff)'
            )
        recs.append((i, rec))
    if not recs or first is None:
        raise ArgumentError(f"path={os.fspath(path)!r} holds no pairs; give one JSON object per line")
    return recs, first[1]


def _pair_token(model: Model, value: Union[str, int], where: str, multi_token: str) -> Union[str, int]:
    """``value`` if it is one output token (a string or an id), its first token id under ``multi_token="first"``."""
    d_out = int(model.weights.W_U.shape[1]) if model.weights.W_U is not None else model.arch.d_vocab
    if isinstance(value, int):
        if not 0 <= value < d_out:
            raise ArgumentError(f"{where}={value} is not an output token id: ids are in [0, {d_out - 1}]")
        return value
    ids = text_ids(model, value, where)
    if len(ids) == 1:
        return value
    if not ids:
        raise ArgumentError(f"{where}={value!r} tokenises to nothing; give one token")
    if multi_token == "first":
        return int(ids[0])
    pieces = [model.tokenizer.decode([t]) for t in ids]
    raise ArgumentError(
        f"{where}={value!r} is {len(ids)} tokens {pieces}; give one token, or pass "
        "multi_token='first' (CLI: --multi-token first) to keep its first token"
    )


def _single_token(model: Model, text: str) -> Optional[int]:
    """The id of ``text`` if it is one token that decodes back to it (not an unknown-word token)."""
    tok = model.tokenizer
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1 or ids[0] == getattr(tok, "unk_token_id", None) or tok.decode(ids).strip() != text.strip():
        return None
    return int(ids[0])


def _lengths(model: Model, prompts: list[str]) -> list[int]:
    return tokenize(model, prompts).attention_mask.sum(1).tolist()


def _modal(model: Model, rows: list[tuple], n: int, what: str) -> list[tuple]:
    """The rows whose clean and corrupt prompts (rows[i][0], rows[i][1]) all share the most common token length."""
    lc = _lengths(model, [r[0] for r in rows])
    lk = _lengths(model, [r[1] for r in rows])
    ok = [(r, a) for r, a, b in zip(rows, lc, lk) if a == b]
    if not ok:
        raise UnsupportedOperationError(f"{what}: no clean/corrupt pair tokenises to equal lengths for {model.name!r}")
    counts: dict[int, int] = {}
    for _, a in ok:
        counts[a] = counts.get(a, 0) + 1
    best = max(counts, key=lambda k: (counts[k], -k))
    kept = [r for r, a in ok if a == best]
    if len(kept) < n:
        raise UnsupportedOperationError(
            f"{what}: only {len(kept)} pairs of one token length ({best}) for {model.name!r}; ask for n <= {len(kept)}"
        )
    return kept[:n]


def _ioi(model: Model, n: int, seed: int) -> Task:
    names = [x for x in IOI_NAMES if _single_token(model, " " + x) is not None]
    if len(names) < 5:
        raise UnsupportedOperationError(
            f"task 'ioi': only {len(names)} of the candidate names are single tokens for "
            f"{model.name!r}'s tokenizer; IOI needs at least 5"
        )
    rng = random.Random(seed)
    rows = []
    for i in range(8 * n):
        t = IOI_TEMPLATES[i % len(IOI_TEMPLATES)]
        A, B, C, D, E = rng.sample(names, 5)
        place, obj = rng.choice(IOI_PLACES), rng.choice(IOI_OBJECTS)
        abba = i % 2 == 0
        first = t.replace("{B} and {A}", "{A} and {B}") if abba else t
        clean = first.format(A=A, B=B, PLACE=place, OBJECT=obj)
        # three other names: the two of the pair and the repeated subject each replaced by a different one
        x, y = (C, D)
        corrupt = (
            first.replace("{A} and {B}", "{X} and {Y}")
            .replace("{B} and {A}", "{Y} and {X}")
            .replace("{B}", "{Z}")
            .format(X=x, Y=y, Z=E, PLACE=place, OBJECT=obj)
        )
        rows.append((clean, corrupt, " " + A, " " + B, "ABBA" if abba else "BABA"))
    kept = _modal(model, rows, n, "task 'ioi'")
    return Task(
        "ioi",
        [r[0] for r in kept],
        [r[1] for r in kept],
        [r[2] for r in kept],
        [r[3] for r in kept],
        description=f"indirect object identification, {sum(r[4] == 'ABBA' for r in kept)} ABBA and "
        f"{sum(r[4] == 'BABA' for r in kept)} BABA prompts; corrupt: three other names; "
        "metric logit[IO] − logit[S]",
    )


def _factual(model: Model, n: Optional[int], seed: int) -> Task:
    rng = random.Random(seed)
    rows = [
        (ti, t.format(C=c), _first_token(model, " " + cap))
        for ti, t in enumerate(FACT_TEMPLATES)
        for c, cap in CAPITALS
    ]
    lengths = _lengths(model, [r[1] for r in rows])
    counts: dict[int, int] = {}
    for L in lengths:
        counts[L] = counts.get(L, 0) + 1
    best = max(counts, key=lambda k: (counts[k], -k))
    group = [r for r, L in zip(rows, lengths) if L == best]
    out = []
    for ti, prompt, a in group:  # the corrupt prompt: the same template with another country of this length
        others = [r for r in group if r[0] == ti and r[2] != a]
        if others:
            o = rng.choice(others)
            out.append((prompt, o[1], a, o[2]))
    rng.shuffle(out)
    want = len(out) if n is None else n
    if want > len(out):
        raise UnsupportedOperationError(
            f"task 'factual': only {len(out)} prompts of one token length for {model.name!r}; ask for n <= {len(out)}"
        )
    out = out[:want]
    return Task(
        "factual",
        [r[0] for r in out],
        [r[1] for r in out],
        [r[2] for r in out],
        [r[3] for r in out],
        description="country → capital; corrupt: another country of the same token length; metric "
        "logit[capital] − logit[the other country's capital] (first token of each)",
    )


def _first_token(model: Model, text: str) -> int:
    return int(model.tokenizer(text, add_special_tokens=False)["input_ids"][0])


def _induction(model: Model, n: int, seed: int, length: int) -> Task:
    a = model.arch
    total = 1 + 2 * length - 1
    if total > a.n_ctx:
        raise ArgumentError(
            f"length={length}: the prompts would have {total} tokens; {model.name!r} has n_ctx={a.n_ctx}"
        )
    bos: Optional[int]
    bos, low = ordinary_tokens(model, 2 * length)
    if a.d_vocab - low < 2 * length:
        raise ArgumentError(f"length={length}: the vocabulary has only {a.d_vocab - low} ordinary tokens")
    g = torch.Generator().manual_seed(seed)
    clean, corrupt, ans, wrong = [], [], [], []
    for _ in range(n):
        perm = torch.randperm(a.d_vocab - low, generator=g, device="cpu")[: 2 * length] + low
        s, r = perm[:length], perm[length:]
        head = [bos] if bos is not None else []
        clean.append(head + s.tolist() + s[:-1].tolist())
        corrupt.append(head + r.tolist() + s[:-1].tolist())
        ans.append(int(s[-1]))
        wrong.append(int(r[-1]))
    return Task(
        "induction",
        torch.tensor(clean, device=model.device),
        torch.tensor(corrupt, device=model.device),
        ans,
        wrong,
        description=f"{length} random tokens then the first {length - 1} again; answer the {length}-th token; "
        "corrupt: a different first half; wrong: its last token",
    )


def load_task(name: str, model: Model, *, n: Optional[int] = None, seed: int = 0, length: int = 10) -> Task:
    """A shipped task for ``model`` (see the module docstring): "ioi" (n defaults to 100), "induction" (50
    prompts of 2·``length`` tokens) or "factual" (every pair of the modal length). Deterministic in ``seed``."""
    require_model(model)
    if not isinstance(name, str) or name not in TASKS:
        raise ArgumentError(
            f"name={name!r} is not a task; tasks are {list(TASKS)} (or build interp.Task from your own prompts)"
        )
    if not model.arch.has_logits:
        raise UnsupportedOperationError(
            f"task {name!r} reads logits: model {model.name!r} has none (an encoder); "
            "build an interp.Task with your own prompts and use interp.Direction"
        )
    seed = check_int("seed", seed)
    if n is not None:
        n = check_positive_int("n", n)
    if name == "induction":
        length = check_int_min("length", length, 2)
        return _induction(model, 50 if n is None else n, seed, length)
    if model.tokenizer is None:
        raise UnsupportedOperationError(f"task {name!r} is text: model {model.name!r} has no tokenizer")
    if name == "ioi":
        return _ioi(model, 100 if n is None else n, seed)
    return _factual(model, n, seed)
