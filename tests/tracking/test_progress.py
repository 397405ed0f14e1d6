"""Progress displays: sinks see every stage's bar, the training bar splits warm-up from GRPO steps and
carries reward and step time, and nothing is drawn on a non-terminal stderr."""

from evr1.tracking import progress


class Recording:
    """A sink that remembers what it was told (a stand-in display, not a mocked component)."""

    def __init__(self):
        self.bars: dict[str, list] = {}

    def __call__(self, name, total, unit):
        seen = self.bars.setdefault(name, [("open", total, unit)])

        class Bar:
            def update(self, done, **fields):
                seen.append(("update", done, fields))

            def close(self, done=None):
                seen.append(("close", done))
        return Bar()


def test_training_progress_reports_warmup_then_steps_with_reward_and_step_time(capsys):
    sink = Recording()
    with progress.sinks(sink):
        bars = progress.TrainingProgress(warmup_steps=2, steps=3)
        bars({"warmup/nll": 2.0}, 1)
        bars({"warmup/nll": 1.5}, 2)
        for step in (1, 2, 3):
            bars({"reward/overall": 0.1 * step, "time/step_s": 1.5}, step)
        bars.close()
    warm, train = sink.bars["warm-up"], sink.bars["train"]
    assert warm[0] == ("open", 2.0, "steps") and warm[-1] == ("close", 2.0)
    assert train[0] == ("open", 3.0, "steps") and train[-1] == ("close", 3.0)
    assert train[-2] == ("update", 3, {"reward": 0.30000000000000004, "s/step": 1.5})
    assert capsys.readouterr().err == ""  # stderr is not a terminal under pytest: no bar drawn


def test_a_failed_block_does_not_claim_100_percent_and_sinks_are_removed_after():
    sink = Recording()
    with progress.sinks(sink):
        try:
            with progress.tracked("merge", 2, "steps") as bar:
                bar.update(1)
                raise RuntimeError("boom")
        except RuntimeError:
            pass
    assert sink.bars["merge"][-1] == ("close", None)
    progress.track("after", 1).close(1)
    assert "after" not in sink.bars


def test_eval_progress_reports_items_rate_and_score_so_far():
    sink = Recording()
    with progress.sinks(sink):
        bar = progress.EvalProgress(2)
        bar("heldout", {"score": 1.0})
        bar("heldout", {"score": 0.0})
        bar.close()
    updates = [e for e in sink.bars["eval"] if e[0] == "update"]
    assert [u[1] for u in updates] == [1, 2] and updates[-1][2]["score"] == 0.5 and updates[-1][2]["items/s"] > 0
