"""The soak phase's per-minute figures, from a made-up run."""

import math

from bench.figures import Report
from bench.soak import MB, Sample, Scrape, Soak, figures, gauge, table
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


def test_the_server_alone_is_kept_apart_from_its_children() -> None:
    # up alone 300 MB of the system's 500 (the agent's process the rest);
    # samples that could not tell (0) leave the column unknown
    known = soak_of([Sample(t, 500 * MB, 100 * MB, own=(300 + (50 if t == 70 else 0)) * MB)
                     for t in range(0, 181, 10)])
    assert [round(m.own_rss_mb) for m in known.minutes()] == [300, 300, 300]
    assert [round(m.system_rss_mb) for m in known.minutes()] == [500, 500, 500]
    unknown = soak_of([Sample(t, 500 * MB, 100 * MB) for t in range(0, 181, 10)])
    assert all(math.isnan(m.own_rss_mb) for m in unknown.minutes())
    assert "UP RSS MB" in table(known.minutes()).splitlines()[0]


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


def test_each_minute_shows_where_the_memory_is() -> None:
    page = ('# HELP reports_consumer_lag_records x\n'
            'reports_consumer_lag_records{agent="committer"} 3.0\n'
            'reports_consumer_lag_records{agent="materializer"} 120.0\n'
            'reports_consumer_lag_records{agent="aggregate"} 80.0\n'
            'reports_clickhouse_memory_bytes 2.097152e+08\n'
            'reports_python_allocated_blocks 1.5e+06\n')
    assert gauge(page, "reports_consumer_lag_records", 'agent="materializer"') == 120
    assert gauge(page, "reports_consumer_lag_records", 'agent="aggregate"') == 80
    assert gauge(page, "reports_clickhouse_memory_bytes") == 200 * MB
    assert math.isnan(gauge(page, "reports_missing"))
    soak = soak_of([Sample(t, 500 * MB, 100 * MB) for t in range(0, 181, 10)])
    soak.scrapes = [Scrape(t, t, 2 * t, 200 + t // 60, 1500 + t) for t in range(5, 180, 10)]
    rows = soak.minutes()
    assert [r.clickhouse_mb for r in rows] == [200, 201, 202]
    assert [r.python_kblocks for r in rows] == [1530, 1590, 1650]
    assert [r.clickhouse_lag for r in rows] == [55, 115, 175]
    assert [r.aggregate_lag for r in rows] == [110, 230, 350]
    assert "CH MEM MB" in table(rows) and "1590" in table(rows) and "AGG LAG" in table(rows)


def test_each_minute_shows_the_cpu_per_write_of_each_side() -> None:
    # 100 writes/s; `up` spends 0.4 CPU-s a second until minute 2, then 0.6;
    # the broker 0.1 throughout; samples every 10 s
    samples = [Sample(t, 500 * MB, 100 * MB, system_cpu=0.4 * min(t, 120) + 0.6 * max(t - 120, 0),
                      broker_cpu=0.1 * t) for t in range(0, 181, 10)]
    rows = soak_of(samples).minutes()
    assert [round(r.system_cpu_ms, 6) for r in rows] == [4.0, 4.0, 6.0]
    assert [round(r.broker_cpu_ms, 6) for r in rows] == [1.0, 1.0, 1.0]
    assert "SYSTEM CPU MS/W" in table(rows) and "6.00" in table(rows)


def test_cpu_per_write_comes_from_the_samples_nearest_each_minute() -> None:
    # the first sample comes just after the phase starts; the sampler stops
    # at 130 s and then once more at 150 s
    samples = [Sample(t + 0.5, 500 * MB, 100 * MB, system_cpu=0.4 * t, broker_cpu=0.1 * t)
               for t in [*range(0, 131, 10), 150]]
    rows = soak_of(samples).minutes()
    # minute 1 from 0.5 s; minute 3 from 120.5 s to 150.5 s
    assert [round(r.system_cpu_ms, 6) for r in rows] == [4.0, 4.0, 4.0]
    # a sampler that stopped before minute 3 gives it no figure
    rows = soak_of(samples[:11]).minutes()
    assert math.isnan(rows[2].system_cpu_ms) and math.isnan(rows[2].broker_cpu_ms)
    assert table(rows).splitlines()[3].split()[-3:-1] == ["-", "-"]


def test_each_minute_shows_the_writes_per_transaction() -> None:
    # 100 requests a second, in 10 transactions a second until 120 s, then in 4
    page = ('reports_committer_batch_requests_sum 4200.0\n'
            'reports_committer_batch_requests_count 420.0\n')
    assert gauge(page, "reports_committer_batch_requests_sum") == 4200
    soak = soak_of([Sample(t, 500 * MB, 100 * MB) for t in range(0, 181, 10)])
    soak.scrapes = [Scrape(t, 0, 0, 0, 0, batched=100 * t,
                           transactions=10 * min(t, 120) + 4 * max(t - 120, 0))
                    for t in range(5, 180, 10)]
    rows = soak.minutes()
    assert [round(r.batch_requests, 6) for r in rows] == [10, 10, 25]
    assert table(rows).splitlines()[3].split()[-1] == "25.0"
    # fewer than two scrapes in a minute, or scrapes without the histogram: no figure
    soak.scrapes = [*soak.scrapes[:12], Scrape(125, 0, 0, 0, 0)]
    assert [math.isnan(r.batch_requests) for r in soak.minutes()] == [False, False, True]
