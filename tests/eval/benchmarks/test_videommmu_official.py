"""videommmu: the official extraction's value on each output, and evr1's.

Official values from (how they were made: `official.py`):
    EvolvingLMMs-Lab/VideoMMMU @ 88b4ac3e07326eaabda3a4afe8e7f30dd02bc143
    lmms_eval/tasks/videommmu/utils.py parse_multi_choice_response (options A–E: ['a red car', 'a blue truck', 'the dog', 'nothing', 'a cat']).
"""

import pytest

from evr1.eval.prompting import strip_reasoning
from evr1.eval.extractors.mmmu import parse_multi_choice

TEXTS = ['a red car', 'a blue truck', 'the dog', 'nothing', 'a cat']
from evr1.eval.extractors.mmmu import eval_open, parse_open_response

from tests.eval.benchmarks.official import agreement_test

TABLE = [
    ('B', 'B'),
    ('(C)', 'C'),
    ('The answer is B', 'B'),
    ('the answer is b', 'No Answere Found'),
    ('The correct answer is (B).', 'B'),
    ('Answer: C', 'C'),
    ('Answer: (D) because', 'D'),
    ('Best option:(D) the car', 'D'),
    ('The best option is C', 'C'),
    ('The correct option is D', 'D'),
    ('Final Answer: C', 'C'),
    ('I think the answer is B, not C.', 'C'),
    ('The answer is A. Because C', 'A'),
    ('USA. The answer is B', 'A'),
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
    ('(E) the truck', 'E'),
    ('E', 'E'),
    ('F', 'No Answere Found'),
    ('The answer is E', 'E'),
    ('none of them', 'No Answere Found'),
    ('<answer>D</answer>', 'No Answere Found'),
    ('<answer>B</answer> because A is wrong', 'A'),
    ('<think>A or B? Probably C.</think>\nD', 'D'),
    ('<think>I guess A</think>The answer is C', 'C'),
    ('<THINK>A</THINK> B', 'B'),
    ('Therefore, the final answer is: C', 'C'),
    ('I am not sure', 'No Answere Found'),
    ('', 'API Error'),
    ('C) the dog', 'No Answere Found'),
    ('option D: run', 'D'),
    ('A<think>x</think>B', 'B'),
    ('It is B.', 'B'),
    ('B is correct, C is wrong', 'C'),
    ('答案是 选项B', 'B'),
    ('The answer: d', 'No Answere Found'),
    ('answer is a dog', 'No Answere Found'),
    ('The answer is (B)', 'B'),
    ('I choose A over B', 'B'),
    ('DNA. The answer is B', 'A'),
    ('The answer is the dog, clearly shown here', 'C'),
    ('It must be a blue truck, as the video shows', 'B'),
    ('A: yes, B: no', 'B'),
    ('A. first B: second', 'A'),
    ('(A) or (B)', 'B'),
    ('A B', 'B'),
    ('I would say A is right', 'A'),
]

DEVIATIONS = {

}


def ours(text):
    return parse_multi_choice(strip_reasoning(text), "ABCDE", TEXTS) or ("API Error" if not strip_reasoning(text) else "No Answere Found")


test_agrees_with_official = agreement_test(ours, TABLE, DEVIATIONS)


# Numerical items: eval_open(gt, parse_open_response(text)) as the official code computes it.
OPEN = [
    ('The answer is 42', '42', True),
    ('There are 12 chairs in total', '12', True),
    ('The total is 3,000 dollars', '3000', True),
    ('The room has 7 windows', '7', True),
    ('The number of apples is 5.', '5', True),
    ('Speed = 2.5 m/s', '2.5', True),
    ('It adds up to 17', '17', True),
    ('We counted 9', '9', True),
    ('5', '5', True),
    ('The value is 0.333', '0.33', True),
    ('<answer>42</answer>', '42', True),
    ('<think>maybe 3</think>The result is 4', '4', True),
    ('Result: 1e3', '1000', True),
    ('The answer is 42.\nThis is because 6*7 is 42', '42', True),
    ('They are 8', '8', True),
    ('', '1', False),
    ('no idea', '3', False),
    ('The voltage on the coil is 120 V and the current is 2 A', '2', True),
]


@pytest.mark.parametrize("text, gt, official", OPEN)
def test_open_agrees_with_official(text, gt, official):
    assert eval_open(gt, parse_open_response(strip_reasoning(text))) is official
