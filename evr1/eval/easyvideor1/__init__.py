"""The `easyvideor1` scoring profile: EasyVideoR1's evaluation, reproduced for side-by-side numbers.

One prompt builder, one answer extractor, one per-type scorer and one aggregation for every benchmark
(EasyVideoR1 `eval/code/AsyncLLMEngine_eval_videobench_qwen3vl_multi_task.py`, spec §5.3–5.4),
including its known extraction and scoring bugs, so our numbers can be set beside its published ones.
The one bug not copied: failed or skipped items count as 0 instead of leaving the denominator.

- `prompt(item, ctx)` (prompt.py, wording in templates.py)
- `extract_answer(output, problem_type)` (extract.py)
- `score(output, item)` (score.py) → {"score", "pred"} (+ "iou" for temporal grounding)
- `aggregate(pairs)` (aggregate.py) → Report("mean_acc", …)
"""

from evr1.eval.easyvideor1.aggregate import aggregate
from evr1.eval.easyvideor1.extract import extract_answer
from evr1.eval.easyvideor1.prompt import prompt
from evr1.eval.easyvideor1.score import score

__all__ = ["aggregate", "extract_answer", "prompt", "score"]
