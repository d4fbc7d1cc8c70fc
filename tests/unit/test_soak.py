"""The soak phase's per-minute figures, from a made-up run."""

from bench.figures import Report
from bench.soak import MB, Sample, Soak, figures
from bench.traffic import Run


def soak_of(samples: list[Sample], minutes: int = 3) -> Soak:
    run = Run()
    run.completed = [i / 100 for i in range(minutes * 60 * 100)]  # 100 writes/s
    run.write_latencies = [0.01] * len(run.completed)
    return Soak(minutes * 60.0, run, 0.0, samples)


def test_the_memory_of_a_minute_is_the_median_of_its_samples() -> None:
    # a freed-but-not-returned spike in minute 2 and at the very end
    samples = [Sample(t, (500 + (400 if t in (70, 180) else 0)) * MB, 100 * MB)
               for t in range(0, 181, 10)]
    soak = soak_of(samples)
    assert [round(m.system_rss_mb) for m in soak.minutes()] == [500, 500, 500]
    report = Report()
    figures(report, soak, note="")
    growth = {f.name: f.value for f in report.figures}
    assert growth["soak system RSS growth"] == 0
    assert growth["soak broker RSS growth"] == 0


def test_growth_is_measured_after_the_first_minute() -> None:
    # +1 MB every 10 s from the start: minute 2's median 509 MB, minute 3's 515 MB
    samples = [Sample(t, (500 + t // 10) * MB, 100 * MB) for t in range(0, 181, 10)]
    report = Report()
    figures(report, soak_of(samples), note="")
    growth = {f.name: f.value for f in report.figures}
    assert growth["soak system RSS growth"] == 6


def test_once_the_tables_are_full_memory_is_flat() -> None:
    # +50 MB a minute until minute 5 (windows filling), flat afterwards
    samples = [Sample(t, (800 + 50 * min(t, 300) / 60) * MB, 100 * MB)
               for t in range(0, 12 * 60 + 1, 5)]
    report = Report()
    figures(report, soak_of(samples, minutes=12), note="", full_after=300)
    growth = {f.name: f.value for f in report.figures}
    assert growth["soak system RSS growth"] > 150
    assert growth["soak system RSS growth, tables full"] == 0
