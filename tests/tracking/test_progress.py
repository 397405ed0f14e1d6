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


def test_phases_are_timed_nested_and_reported_to_the_status_sink(tmp_path):
    import json

    status = progress.StatusFile(str(tmp_path / "status.json"))
    sink = Recording()
    before = len(progress.TIMELINE)
    with progress.sinks(status, sink):
        lead = progress.lead_in("Prefect: starting")
        with progress.phase("train") as outer:  # a phase ends the lead-in before it
            assert lead.end is not None and lead.end <= outer.start
            assert json.loads((tmp_path / "status.json").read_text())["stage"] == "train"
            with progress.phase("train: starting Ray") as inner:
                assert json.loads((tmp_path / "status.json").read_text())["stage"] == "train: starting Ray"
            progress.lead_in("train: starting the actors")
            bars = progress.TrainingProgress(warmup_steps=0, steps=2)
            bars({"val/accuracy": 0.5}, 0)  # the validation before RL: the bar opens, the lead-in ends
            bars({"reward/overall": 0.1, "time/step_s": 1.0, "time/rollout_s": 0.4, "time/update_s": 0.5}, 1)
            bars({"reward/overall": 0.2, "time/step_s": 1.0}, 2)
            bars.close()
    spans = progress.TIMELINE[before:]
    names = [(s.name, s.depth) for s in spans]
    assert names == [("Prefect: starting", 0), ("train", 0), ("train: starting Ray", 1),
                     ("train: starting the actors", 1), ("first GRPO step (step 1)", 1)]
    assert inner.end <= outer.end and all(s.end is not None for s in spans)
    first = spans[-1]
    assert first.detail == {"parts": {"rollout": 0.4, "update": 0.5}, "step_s": 1.0}
    assert outer.shown and not inner.shown  # a bar was drawn inside `train`, none inside `starting Ray`
    assert "train: starting Ray" not in sink.bars  # phases go only to sinks that ask for them (not artifacts)


def test_a_failed_phase_says_so_and_a_terminal_gets_status_lines(monkeypatch, capsys):
    monkeypatch.setattr(progress, "terminal", lambda: True)
    monkeypatch.setattr(progress, "QUIET_S", 0.0)
    with progress.phase("ingest"):
        pass
    try:
        with progress.phase("cache"):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    err = capsys.readouterr().err
    assert "✓ ingest" in err and "✗ cache failed after" in err
    assert progress.TIMELINE[-1].detail == {"failed": True}


def test_the_timings_report_stops_at_the_first_step_and_shows_its_parts():
    from evr1.tracking.progress import Span
    from evr1.tracking.timings import report

    t = 1000.0
    timeline = [Span("Prefect: starting", t, t + 10), Span("ingest", t + 10, t + 14),
                Span("train", t + 14, t + 60), Span("train: starting Ray", t + 14, t + 18, depth=1),
                Span("first GRPO step (step 1)", t + 30, t + 33, depth=1, detail={"parts": {"rollout": 1.0}}),
                Span("merge", t + 60, t + 62)]
    lines = report(timeline)
    assert lines[0] == "time to the first training step: 33.0 s, phase by phase"
    assert [ln.split()[0] for ln in lines[1:]] == ["Prefect:", "ingest", "train", "train:", "first"]
    assert "train (until the first step)" in lines[3] and lines[3].rstrip().endswith("19.0 s")
    assert lines[-1].endswith("3.0 s   (rollout 1.0 s)") and not any("merge" in ln for ln in lines)
    assert report([Span("ingest", t, t + 2)])[0] == "phases of this run: 2.0 s (no training step ran)"
