"""The multiple-choice judge: `select` the best candidate, `rank` them all, `score` each one.

Judges prefer some positions over others, so each item is shown in several *display orders* and the
answers are mapped back to the caller's order before they are counted:

- K = 2: both orders;
- K > 2: `orders` evenly spaced cyclic shifts with a seeded offset (with `orders = K` every candidate sits
  in every position once), or seeded random permutations (`permutation="random"`).

Each order can be sampled `samples` times; the choice is the majority of all parsed votes, ties broken by
the option-letter probabilities and then by a seeded coin. `Verdict.choice` and `Verdict.probs` always
index the candidates as given.

    judge = Judge(make_backend("runs/tiny-judge"), JudgeConfig(orders=2))
    [v.choice for v in judge.select(items)]
"""

from __future__ import annotations

import math
import random
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from judge.backends.base import Backend, ChatRequest, Generation, SamplingParams
from judge.config import setting
from judge.images import FittedImage, PixelRange, fit_pixels, load_image
from judge.parser import extract_reasoning, parse_choice
from judge.prompt import PromptConfig, build_messages
from judge.types import MCItem, Verdict

__all__ = ["Judge", "JudgeConfig", "batch_seed", "candidate_scores", "display_orders", "item_rng"]


@dataclass
class JudgeConfig:
    """How the judge asks and aggregates. Loadable from YAML as a plain mapping."""

    # De-biasing and voting
    orders: int | None = setting(None, "display orders per item; default: 2 (both orders for two candidates)")
    permutation: Literal["cyclic", "random"] = setting(
        "cyclic", "how display orders are drawn for more than two candidates: cyclic shifts or seeded shuffles"
    )
    samples: int = setting(1, "calls per display order, majority-voted; more than 1 needs temperature > 0")
    seed: int = setting(0, "seeds display orders, sampling and tie-breaks; the same seed gives the same verdicts")

    # Decoding
    temperature: float = setting(0.0, "sampling temperature; 0 is greedy")
    top_p: float = setting(1.0, "nucleus sampling: the smallest token set with this mass")
    max_new_tokens: int = setting(512, "generation budget per call (reasoning and answer)")

    # Image size (Qwen's min_pixels / max_pixels)
    min_pixels: int | None = setting(
        None,
        "images with fewer pixels are enlarged to about N (aspect kept, sides multiples of 28) before "
        "the judge sees them; default: the model's processor config",
        metavar="N",
    )
    max_pixels: int | None = setting(
        None,
        "images with more pixels are shrunk to at most N before the judge sees them, e.g. 1003520 "
        "(1280*28*28: at most 1,280 visual tokens); default: the model's processor config (stock "
        "Qwen2.5-VL: 12845056, up to ~16k visual tokens per image)",
        metavar="N",
    )

    # Batching and prompt
    batch_size: int = setting(8, "items per backend call (each item makes orders x samples requests)")
    prompt: PromptConfig = setting(help="the prompt's wording (PromptConfig fields; YAML only)", factory=PromptConfig)

    def __post_init__(self) -> None:
        if isinstance(self.prompt, dict):
            self.prompt = PromptConfig(**self.prompt)
        if self.orders is not None and self.orders < 1:
            raise ValueError(f"orders ({self.orders}) must be at least 1")
        if self.samples < 1:
            raise ValueError(f"samples ({self.samples}) must be at least 1")
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(
                f"samples ({self.samples}) > 1 with temperature 0 repeats one greedy answer; "
                "set temperature > 0 (e.g. 0.7) or samples = 1"
            )
        if self.permutation not in ("cyclic", "random"):
            raise ValueError(f"permutation must be 'cyclic' or 'random', got {self.permutation!r}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size ({self.batch_size}) must be at least 1")
        SamplingParams(self.max_new_tokens, self.temperature, self.top_p)  # validates the decoding fields
        PixelRange(self.min_pixels, self.max_pixels)  # validates the image size range

    @property
    def pixels(self) -> PixelRange:
        """The image size range the judge resizes into (`min_pixels`, `max_pixels`)."""
        return PixelRange(self.min_pixels, self.max_pixels)

    def pixel_options(self) -> dict[str, int]:
        """The image-size settings that are set, as backend options (the model's processor gets the same range)."""
        return self.pixels.options()


def item_rng(seed: int, item_id: object, salt: str = "") -> random.Random:
    """A generator that depends only on (seed, item id): verdicts do not change with batching or order."""
    return random.Random(zlib.crc32(f"{seed}\x00{item_id}\x00{salt}".encode()))


def batch_seed(seed: int, items: Sequence[Any], salt: str = "sampling") -> int | None:
    """A batch's sampling seed, from its first item's `id`: the same batch gets it on any executor.

    None for an empty batch (nothing is sampled). Items need only an `id` (benchmark items, questions).
    """
    return item_rng(seed, items[0].id, salt).randrange(2**31) if items else None


def display_orders(k: int, n_orders: int, *, rng: random.Random, permutation: str = "cyclic") -> list[list[int]]:
    """Display orders for `k` candidates: `order[d]` is the original index shown at position `d`.

    Cyclic: `n_orders` evenly spaced shifts from a seeded offset, so K = 2 with two orders is both orders.

    sorted(display_orders(2, 2, rng=random.Random(0)))
    [[0, 1], [1, 0]]
    display_orders(3, 3, rng=random.Random(1))
    [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    """
    if permutation == "cyclic":
        offset = rng.randrange(k)
        shifts = [(offset + (j * k) // n_orders) % k for j in range(n_orders)]
        return [[(d + s) % k for d in range(k)] for s in shifts]
    distinct = math.factorial(k) if k <= 10 else None
    orders: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    while len(orders) < n_orders:
        perm = list(range(k))
        rng.shuffle(perm)
        if tuple(perm) in seen and (distinct is None or len(seen) < distinct):
            continue  # prefer unseen permutations while there are any
        seen.add(tuple(perm))
        orders.append(perm)
    return orders


def candidate_scores(verdict: Verdict, k: int) -> list[float]:
    """Each of `k` candidates' probability of being best: option-letter probabilities where the engine gave
    log-probs, else the share of parsed votes, else uniform.

    >>> candidate_scores(Verdict(1, 0, None, False, [0, 0, 1, None], "", []), 2)
    [0.6666666666666666, 0.3333333333333333]
    """
    if verdict.probs is not None:
        return list(verdict.probs)
    parsed = [v for v in verdict.votes if v is not None]
    if not parsed:
        return [1.0 / k] * k
    counts = Counter(parsed)
    return [counts.get(c, 0) / len(parsed) for c in range(k)]


def _softmax(logprobs: Sequence[float]) -> list[float]:
    top = max(logprobs)
    weights = [math.exp(x - top) if math.isfinite(x) else 0.0 for x in logprobs]
    total = sum(weights)
    return [w / total for w in weights]


class Judge:
    """A multiple-choice reasoning judge over any `Backend`.

    Args:
        backend: the inference engine.
        config: de-biasing, voting, decoding and prompt settings.
        image_root: folder that relative image paths in items are resolved against.
        adapter: a LoRA adapter loaded in the backend to judge with (None: the bare base model).
    """

    def __init__(
        self,
        backend: Backend,
        config: JudgeConfig | None = None,
        *,
        image_root: str | Path | None = None,
        adapter: str | None = None,
    ):
        self.backend = backend
        self.config = config or JudgeConfig()
        self.image_root = image_root
        self.adapter = adapter

    def with_adapter(self, adapter: str | None) -> Judge:
        """The same judge answering through `adapter` (shares the backend, so no weights are copied)."""
        return Judge(self.backend, self.config, image_root=self.image_root, adapter=adapter)

    # -- public API -------------------------------------------------------------------------------------

    def select(self, items: Sequence[MCItem], progress: Callable[[int], None] | None = None) -> list[Verdict]:
        """One verdict per item: the best candidate, its probability, the votes and the reasoning.

        Args:
            items: the questions to judge.
            progress: called with the number of items finished after each batch.
        """
        verdicts: list[Verdict] = []
        size = self.config.batch_size
        for start in range(0, len(items), size):
            chunk = items[start : start + size]
            verdicts.extend(self._judge_chunk(chunk))
            if progress:
                progress(len(chunk))
        return verdicts

    def score(self, items: Sequence[MCItem]) -> list[list[float]]:
        """Each candidate's probability of being best.

        From option-letter probabilities where the engine gives log-probs; otherwise the share of parsed
        votes each candidate received (uniform when no call parsed).
        """
        return [candidate_scores(verdict, len(item.candidates)) for item, verdict in zip(items, self.select(items))]

    def rank(self, items: Sequence[MCItem]) -> list[list[int]]:
        """A full order of each item's candidates, best first, by repeated selection.

        Round r asks the judge for the best of the candidates not yet placed; all items share each round's
        batches. A round that parses no answer places the remaining candidates by their scores.
        """
        remaining = [list(range(len(item.candidates))) for item in items]
        ranking: list[list[int]] = [[] for _ in items]
        images = [self.fit_images(item.images) for item in items]  # resized once, not once per round
        while True:
            active = [i for i, rest in enumerate(remaining) if len(rest) >= 2]
            if not active:
                break
            sub_items = [
                MCItem(
                    id=f"{items[i].id}#rank{len(ranking[i])}",
                    question=items[i].question,
                    candidates=[items[i].candidates[c] for c in remaining[i]],
                    image=images[i] or None,
                )
                for i in active
            ]
            for i, sub, verdict in zip(active, sub_items, self.select(sub_items)):
                if verdict.choice is None:
                    scores = candidate_scores(verdict, len(sub.candidates))
                    order = sorted(range(len(remaining[i])), key=lambda c: -scores[c])
                    ranking[i].extend(remaining[i][c] for c in order)
                    remaining[i] = []
                else:
                    ranking[i].append(remaining[i].pop(verdict.choice))
        for i, rest in enumerate(remaining):
            ranking[i].extend(rest)
        return ranking

    def fit_images(self, refs: Sequence[Any]) -> list[FittedImage]:
        """`refs` loaded and resized into the judge's range now, so that the items sharing them (a tournament's
        games, `rank`'s rounds) are judged without loading or resizing them again."""
        pixels = self.config.pixels
        return [ref if isinstance(ref, FittedImage) else FittedImage(self._image(ref, pixels)) for ref in refs]

    # -- internals --------------------------------------------------------------------------------------

    def _orders_for(self, item: MCItem) -> list[list[int]]:
        n_orders = self.config.orders or 2
        rng = item_rng(self.config.seed, item.id, "orders")
        return display_orders(len(item.candidates), n_orders, rng=rng, permutation=self.config.permutation)

    def _image(self, ref: Any, pixels: PixelRange) -> Any:
        """One image at the size the model will use. The judge is where images enter the model, so it resizes
        them, once, into its range; images fitted where they came in (the reward server's decode) are kept."""
        if isinstance(ref, FittedImage):
            return ref.image
        image = load_image(ref, self.image_root)
        return fit_pixels(image, **pixels.options()) if pixels else image

    def _requests_for(self, item: MCItem, orders: list[list[int]]) -> list[ChatRequest]:
        pixels = self.config.pixels
        images = [self._image(ref, pixels) for ref in item.images]  # once per item, shared by its display orders
        requests = []
        for order in orders:
            shown = [item.candidates[i] for i in order]
            messages = build_messages(item.question, shown, n_images=len(images), config=self.config.prompt)
            request = ChatRequest(
                messages=messages,
                images=images,
                n_options=len(shown),
                adapter=self.adapter,
                images_fitted=bool(pixels),  # a backend that resizes (HTTP) leaves them as they are
            )
            requests.extend(request for _ in range(self.config.samples))
        return requests

    def _judge_chunk(self, items: Sequence[MCItem]) -> list[Verdict]:
        plans = [(item, self._orders_for(item)) for item in items]
        requests = [req for item, orders in plans for req in self._requests_for(item, orders)]
        params = SamplingParams(
            max_new_tokens=self.config.max_new_tokens,
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            seed=batch_seed(self.config.seed, items),
        )
        generations = self.backend.generate(requests, params)
        if len(generations) != len(requests):
            raise RuntimeError(
                f"backend {self.backend.name} returned {len(generations)} results for {len(requests)} requests"
            )
        verdicts, cursor = [], 0
        for item, orders in plans:
            n = len(orders) * self.config.samples
            verdicts.append(self._aggregate(item, orders, generations[cursor : cursor + n]))
            cursor += n
        return verdicts

    def _aggregate(self, item: MCItem, orders: list[list[int]], generations: Sequence[Generation]) -> Verdict:
        k = len(item.candidates)
        votes: list[int | None] = []
        prob_sums, n_prob = [0.0] * k, 0
        for j, gen in enumerate(generations):
            order = orders[j // self.config.samples]
            shown_choice = parse_choice(gen.text, k)
            votes.append(None if shown_choice is None else order[shown_choice])
            if gen.label_logprobs is not None:
                for shown, p in enumerate(_softmax(gen.label_logprobs)):
                    prob_sums[order[shown]] += p
                n_prob += 1
        parsed = [v for v in votes if v is not None]
        probs = [p / n_prob for p in prob_sums] if n_prob and parsed else None
        choice = self._majority(item, parsed, probs)
        consistent = (len(set(parsed)) == 1) if len(parsed) >= 2 else None
        reasoning = next(
            (extract_reasoning(g.text) for g, v in zip(generations, votes) if v == choice and choice is not None),
            "",
        )
        return Verdict(
            id=item.id,
            choice=choice,
            probs=probs,
            consistent=consistent,
            votes=votes,
            reasoning=reasoning,
            raw=[g.text for g in generations],
            usage={
                "prompt_tokens": sum(g.prompt_tokens for g in generations),
                "completion_tokens": sum(g.completion_tokens for g in generations),
            },
        )

    def _majority(self, item: MCItem, parsed: list[int], probs: list[float] | None) -> int | None:
        if not parsed:
            return None
        counts = Counter(parsed)
        best = max(counts.values())
        tied = sorted(c for c, n in counts.items() if n == best)
        if len(tied) == 1:
            return tied[0]
        if probs is not None:
            top = max(probs[c] for c in tied)
            tied = [c for c in tied if probs[c] == top]
        return tied[0] if len(tied) == 1 else item_rng(self.config.seed, item.id, "tie").choice(tied)
