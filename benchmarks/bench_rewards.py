"""Reward throughput per task family on one core: responses scored per second by `compute_score`.

Run:  .venv/bin/python benchmarks/bench_rewards.py [--seconds 1.0]
Prints one JSON line: {"bench": "rewards", "responses_per_second": {family: n, ...}, ...}.
`--smoke`: every family through the same path for 0.01 s, 8 responses each: CI runs it (tests/benchmarks).
Target: >= 20,000/s for multiple choice, numerical and boolean (docs/perf-rewards.md).

Responses are realistic: a few hundred characters of reasoning in <think>, then the answer tag;
a quarter of them have no tag (the fallback path) and a quarter are wrong. Ground truths repeat
as they do in GRPO groups. Timed inline, after a warm-up that pays the lazy imports.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evr1.rewards import compute_score  # noqa: E402

REASONING = (
    "<think>The video shows a person walking into a kitchen, opening the fridge and taking out a "
    "carton of milk. Then they pour it into a glass on the counter. Counting the frames, the action "
    "starts around the middle of the clip and the camera stays fixed. I should compare the options "
    "against what I observed before answering.</think>\n"
)


def _cases(rng: random.Random) -> dict[str, list[tuple[str, dict]]]:
    def variants(answer_right: str, answer_wrong: str, plain: str) -> list[str]:
        return [
            REASONING + f"<answer>{answer_right}</answer>",
            REASONING + f"<answer>{answer_wrong}</answer>",
            REASONING + f"So the final answer is {plain}.",
            REASONING + f"<answer>{answer_right}</answer>",
        ]

    cases: dict[str, list[tuple[str, dict]]] = {}
    mc = []
    for i in range(64):
        letters = "ABCD"
        truth = letters[i % 4]
        sample = {
            "problem_type": "multiple choice",
            "answer": f"<answer>{truth}</answer>",
            "options": [f"{letter}. option {letter.lower()} {i}" for letter in letters],
        }
        for text in variants(f"({truth})", letters[(i + 1) % 4], truth):
            mc.append((text, sample))
    cases["multiple choice"] = mc
    cases["numerical"] = [
        (text, {"problem_type": "numerical", "answer": f"{g:.2f}"})
        for g in (rng.uniform(0, 1000) for _ in range(64))
        for text in variants(f"{g + 0.001:.3f} g", f"{g + 1:.2f}", f"{g:,.2f}")
    ]
    cases["regression"] = [
        (text, {"problem_type": "regression", "answer": str(g)})
        for g in (rng.randint(1, 500) for _ in range(64))
        for text in variants(str(g + 3), str(g * 2), str(g))
    ]
    cases["boolean"] = [
        (text, {"problem_type": "boolean", "answer": truth})
        for truth in ("Yes", "No") * 32
        for text in variants(f"{truth}.", "no" if truth == "Yes" else "yes", truth.lower())
    ]
    cases["temporal grounding"] = [
        (text, {"problem_type": "temporal grounding", "answer": json.dumps({"time": [s, s + 7.5]})})
        for s in (rng.uniform(0, 100) for _ in range(64))
        for text in variants(json.dumps({"time": [s + 1, s + 8]}), '{"time": [0, 1]}', f"from {s} to {s + 7}")
    ]
    cases["spatial-temporal grounding"] = [
        (
            text,
            {
                "problem_type": "spatial-temporal grounding",
                "answer": json.dumps({"time": [3, 6], "boxes": {str(t): [10, 10, 50, 50] for t in range(3, 7)}}),
            },
        )
        for _ in range(64)
        for text in variants(
            json.dumps({"time": [3, 7], "boxes": {str(t): [12, 10, 52, 50] for t in range(3, 8)}}),
            '{"time": [0, 1], "boxes": {}}',
            '{"time": [3, 7], "boxes": {}}',
        )
    ]
    cases["open-ended"] = [
        (text, {"problem_type": "open-ended", "answer": "a man pours milk into a glass in the kitchen"})
        for _ in range(64)
        for text in variants("the man pours milk into a glass", "a dog runs outside", "he is pouring milk")
    ]
    cases["ocr"] = [
        (text, {"problem_type": "ocr", "answer": "OPEN 24 HOURS EVERY DAY"})
        for _ in range(64)
        for text in variants("open 24 hours every day", "open 12 hours", "OPEN 24 HOURS")
    ]
    cases["preference"] = [
        (text, {"problem_type": "llava", "answer": "Response 1"})
        for _ in range(64)
        for text in variants("Response 1", "Tie", "response 2")
    ]
    cases["generic"] = [
        (text, {"problem_type": "caption-like unknown type", "answer": "kitchen"})
        for _ in range(64)
        for text in variants("Kitchen.", "bedroom", "the kitchen")
    ]
    return cases


def _rate(items: list[tuple[str, dict]], seconds: float) -> float:
    for response, sample in items:  # warm-up: lazy imports, caches
        compute_score(response, sample)
    done, started = 0, time.perf_counter()
    while True:
        for response, sample in items:
            compute_score(response, sample)
        done += len(items)
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return done / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per family")
    parser.add_argument("--smoke", action="store_true", help="0.01 s and 8 responses per family: CI's check")
    args = parser.parse_args()
    if args.smoke:
        args.seconds = 0.01
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the target says
    rng = random.Random(0)
    cases = {family: items[:8] if args.smoke else items for family, items in _cases(rng).items()}
    rates = {family: round(_rate(items, args.seconds)) for family, items in cases.items()}
    target = 20_000
    print(
        json.dumps(
            {
                "bench": "rewards",
                "smoke": args.smoke,
                "responses_per_second": rates,
                "target_per_second": target,
                "meets_target": all(rates[f] >= target for f in ("multiple choice", "numerical", "boolean")),
                "python": platform.python_version(),
                "cpu": platform.processor() or platform.machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
