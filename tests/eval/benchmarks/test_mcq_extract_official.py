"""lvbench and mlvu: the official extraction's value on each output, and evr1's (one table: both use it).

Official values from (how they were made: `official.py`):
    EvolvingLMMs-Lab/lmms-eval @ 75571cfe0fa36ca5ec2e6aa2bb268f9d38295af3
    lmms_eval/tasks/_task_utils/mcq_extract.py extract_mcq_answer(text, choices=A–D), as both
    lvbench/utils.py and mlvu/utils.py call it. evr1 gives mlvu its six options A–F (its deviation).
"""

from evr1.eval.prompting import strip_reasoning
from evr1.eval.extractors.lmms import mcq_extract

from tests.eval.benchmarks.official import agreement_test

TABLE = [
    ('B', 'B'),
    ('(C)', 'C'),
    ('The answer is B', 'B'),
    ('the answer is b', ''),
    ('The correct answer is (B).', 'B'),
    ('Answer: C', 'C'),
    ('Answer: (D) because', 'D'),
    ('Best option:(D) the car', 'D'),
    ('The best option is C', 'C'),
    ('The correct option is D', 'D'),
    ('Final Answer: C', 'C'),
    ('I think the answer is B, not C.', 'C'),
    ('The answer is A. Because C', 'C'),
    ('USA. The answer is B', 'B'),
    ('The choice is D', 'D'),
    ('My answer is C', 'C'),
    ('The correct option is D.', 'D'),
    ('答案是C', 'C'),
    ('答案为B', 'B'),
    ('选D', 'D'),
    ('我选 C', 'C'),
    ('答えはB', 'B'),
    ('정답은 D', 'D'),
    ('답: C', 'C'),
    ('옵션 B', 'B'),
    ('A cat is on the mat', 'A'),
    ('D.', 'D'),
    ('(E) the truck', ''),
    ('E', ''),
    ('F', ''),
    ('The answer is E', ''),
    ('none of them', ''),
    ('<answer>D</answer>', 'D'),
    ('<answer>B</answer> because A is wrong', 'A'),
    ('<think>A or B? Probably C.</think>\nD', 'D'),
    ('<think>I guess A</think>The answer is C', 'C'),
    ('<THINK>A</THINK> B', 'B'),
    ('Therefore, the final answer is: C', 'C'),
    ('I am not sure', ''),
    ('', ''),
    ('C) the dog', 'C'),
    ('option D: run', 'D'),
    ('A<think>x</think>B', 'B'),
    ('It is B.', 'B'),
    ('B is correct, C is wrong', 'B'),
    ('答案是 选项B', 'B'),
    ('The answer: d', ''),
    ('answer is a dog', ''),
    ('The answer is (B)', 'B'),
    ('I choose A over B', 'B'),
]

LVBENCH_DEVIATIONS = {
    'A<think>x</think>B': 'A',
}
MLVU_DEVIATIONS = {
    **LVBENCH_DEVIATIONS,
    '(E) the truck': 'E',
    'E': 'E',
    'F': 'F',
    'The answer is E': 'E',
}


def lvbench(text):
    return mcq_extract(strip_reasoning(text), "ABCD")


def mlvu(text):
    return mcq_extract(strip_reasoning(text), "ABCDEF")


test_lvbench_agrees_with_official = agreement_test(lvbench, TABLE, LVBENCH_DEVIATIONS)
test_mlvu_agrees_with_official = agreement_test(mlvu, TABLE, MLVU_DEVIATIONS)
