"""charades_sta: the official extraction's value on each output, and evr1's.

Official values from (how they were made: `official.py`):
    EvolvingLMMs-Lab/lmms-eval @ 75571cfe0fa36ca5ec2e6aa2bb268f9d38295af3
    lmms_eval/tasks/charades_sta/utils.py extract_time.
"""

import pytest

from evr1.eval.prompting import strip_reasoning
from evr1.eval.extractors.grounding import extract_time
from evr1.eval.extractors.grounding import predicted_span

from tests.eval.benchmarks.official import agreement_test

TABLE = [
    ('The event happens in the 24.3 - 30.4 seconds.', [[24.3, 30.4]]),
    ('The event happens in the 24.3 – 30.4 seconds.', [[24.3, 30.4]]),
    ('24.3 – 30.4', [[24.3, 30.4]]),
    ('The event happens from 24.3 seconds to 30.4 seconds.', []),
    ('The event happens from 24.3 to 30.4 seconds.', [[24.3, 30.4]]),
    ('The event happens in the 30.4 - 24.3 seconds.', [[24.3, 30.4]]),
    ('It happens at 00:24 - 00:30.', [[24.0, 30.0]]),
    ('It happens at 00:24 – 00:30.', [[24.0, 30.0]]),
    ('The event starts at 00:00:18 and ends at 00:00:23.', [[18.0, 23.0]]),
    ('The event starts at 00:00:18\nand ends at 00:00:23.', [[18.0, 23.0]]),
    ('Start: 00:00, End: 00:05', [[0.0, 5.0]]),
    ('Start time: 0.8 seconds\nEnd time: 1.1 seconds', [[0.8, 1.1]]),
    ('24.3\n30.4', [[24.3, 30.4]]),
    ('24.3s-30.4s', [[24.3, 30.4]]),
    ('1.5 - 3 and later 7 - 9', [[1.5, 3.0]]),
    ('I cannot tell.', []),
    ('It starts at 5.', []),
    ('From 1:02:03 to 1:02:10 the event happens', [[3723.0, 3730.0]]),
    ('The event happens between 12 and 18 seconds', []),
    ('<answer>{"time": [24.3, 30.4]}</answer>', []),
    ('{"time": [3.0, 7.5]}', []),
    ('<think>maybe 1 - 2</think>The event happens in the 5.0 - 9.0 seconds.', [[5.0, 9.0]]),
    ('The event starts at 12.5s and ends at 20s.', []),
    ('The event happens in the 1:05 - 1:15.', [[65.0, 75.0]]),
    ('start 10 end 20', []),
    ('The person turns on the light at 3.2 seconds. It ends at 8 seconds.', []),
]

TABLE_OFFICIAL = dict(TABLE)

DEVIATIONS = {

}


def ours(text):
    return [list(p) for p in extract_time(strip_reasoning(text))]


test_agrees_with_official = agreement_test(ours, TABLE, DEVIATIONS)


# The listed deviation: EasyVideoR1's JSON answer is read before extract_time (which reads nothing in it).
@pytest.mark.parametrize("text, ours_span", [
    ('<answer>{"time": [24.3, 30.4]}</answer>', (24.3, 30.4)),
    ('{"time": [30.4, 24.3]}', (24.3, 30.4)),
])
def test_json_answer_deviation(text, ours_span):
    assert TABLE_OFFICIAL.get(text, []) == [] and predicted_span(text) == ours_span
