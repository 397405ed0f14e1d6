"""longvideobench: the official extraction's value on each output, and evr1's.

Official values from (how they were made: `official.py`):
    EvolvingLMMs-Lab/lmms-eval @ 75571cfe0fa36ca5ec2e6aa2bb268f9d38295af3
    lmms_eval/tasks/longvideobench/utils.py parse_multi_choice_response (random.choice replaced by the marker '<random>').
"""

from evr1.eval.prompting import strip_reasoning
from evr1.eval.benchmarks.longvideobench import PREFIXES
from evr1.eval.extractors.lmms import classic

from tests.eval.benchmarks.official import agreement_test

TABLE = [
    ('B', 'B'),
    ('(C)', 'C'),
    ('The answer is B', 'B'),
    ('the answer is b', '<random>'),
    ('The correct answer is (B).', 'B'),
    ('Answer: C', 'A'),
    ('Answer: (D) because', 'A'),
    ('Best option:(D) the car', 'D'),
    ('The best option is C', 'C'),
    ('The correct option is D', 'D'),
    ('Final Answer: C', 'A'),
    ('I think the answer is B, not C.', 'B'),
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
    ('F', '<random>'),
    ('The answer is E', 'E'),
    ('none of them', '<random>'),
    ('<answer>D</answer>', 'D'),
    ('<answer>B</answer> because A is wrong', 'B'),
    ('<think>A or B? Probably C.</think>\nD', 'D'),
    ('<think>I guess A</think>The answer is C', 'C'),
    ('<THINK>A</THINK> B', 'A'),
    ('Therefore, the final answer is: C', 'C'),
    ('I am not sure', '<random>'),
    ('', '<random>'),
    ('C) the dog', 'C'),
    ('option D: run', 'D'),
    ('A<think>x</think>B', 'A'),
    ('It is B.', 'B'),
    ('B is correct, C is wrong', 'B'),
    ('答案是 选项B', 'B'),
    ('The answer: d', '<random>'),
    ('answer is a dog', '<random>'),
    ('The answer is (B)', 'B'),
    ('I choose A over B', 'A'),
]

DEVIATIONS = {
    'Answer: C': 'C',
    'Answer: (D) because': 'D',
    'Final Answer: C': 'C',
    '<THINK>A</THINK> B': 'B',
}


def ours(text):
    return classic(strip_reasoning(text), "ABCDE", prefixes=PREFIXES) or "<random>"


test_agrees_with_official = agreement_test(ours, TABLE, DEVIATIONS)
