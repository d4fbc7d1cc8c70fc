"""Every mistake a user makes on the command line ends in one line saying what
is wrong and what to do: exit code 2 for usage, 1 for what stops the start,
and nothing left behind."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import binaries
from bench.baseline import BaselineFailed, EtcdCrds
from launcher.cli import main
from launcher.parser import build_parser

COMMANDS = ("up", "worker", "serve", "trends", "dashboard", "fleet", "bench")


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def usage_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    # argparse: the usage, then one line with the error
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def test_a_port_out_of_range(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = usage_error(capsys, ["up", "--data-dir", str(tmp_path / "d"), "--port", "99999"])
    assert "99999 is not a port number (0 to 65535" in line
    assert not (tmp_path / "d").exists()


def test_an_unknown_log_level(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = usage_error(capsys, ["--log-level", "verbose", "up", "--data-dir", str(tmp_path)])
    assert "invalid choice: 'verbose'" in line and "debug" in line


@pytest.mark.parametrize("option", ["--window", "--since"])
def test_a_zero_duration(capsys: pytest.CaptureFixture[str], option: str) -> None:
    line = usage_error(capsys, ["trends", option, "0s"])
    assert "'0s' is not longer than nothing" in line


def test_a_duration_that_is_none(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, ["trends", "--window", "soon"])
    assert "'soon' is not a duration like 30s, 5m, 1h or 7d" in line


def test_serve_without_its_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = usage_error(capsys, ["serve", "--tls-cert", str(tmp_path / "no.pem"),
                                "--tls-key", str(tmp_path / "no.key")])
    assert "no.pem is not a file" in line


def test_worker_without_its_servers(capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("CLICKHOUSE_URL", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["worker"])
    assert exited.value.code == 2
    assert "needs KAFKA_BOOTSTRAP and CLICKHOUSE_URL" in one_line(capsys.readouterr().err)


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def run_cli(*argv: str, env: dict[str, str] | None = None, timeout: float = 60
            ) -> tuple[subprocess.CompletedProcess[str], float]:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("KAFKA_BOOTSTRAP", "CLICKHOUSE_URL")}
    environment.update(env or {})
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "launcher.cli", *argv], capture_output=True,
                          text=True, timeout=timeout, env=environment)
    return done, time.monotonic() - started


def test_a_port_in_use_is_told_before_anything_starts(busy_port: int, tmp_path: Path) -> None:
    done, seconds = run_cli("up", "--data-dir", str(tmp_path / "d"), "--port", str(busy_port))
    assert done.returncode == 1
    assert one_line(done.stderr) == (
        f"reports-pipeline up: cannot listen on 127.0.0.1:{busy_port}: the port is in use;"
        " give another --port, or --port 0 for any free one")
    assert not (tmp_path / "d").exists()
    assert seconds < 10


def test_an_unreachable_kafka(tmp_path: Path) -> None:
    done, _ = run_cli("up", "--data-dir", str(tmp_path), env={"KAFKA_BOOTSTRAP": "127.0.0.1:1"})
    assert done.returncode == 1
    assert one_line(done.stderr) == (
        "reports-pipeline up: no Kafka broker answers at 127.0.0.1:1; check KAFKA_BOOTSTRAP"
        " (unset it and `up` runs its own broker)")


def test_an_unreachable_clickhouse(tmp_path: Path) -> None:
    done, _ = run_cli("up", "--data-dir", str(tmp_path),
                      env={"CLICKHOUSE_URL": "http://reports:secret@127.0.0.1:1"})
    assert done.returncode == 1
    assert one_line(done.stderr) == (
        "reports-pipeline up: ClickHouse at http://reports:***@127.0.0.1:1 cannot be used:"
        " Connection refused; check CLICKHOUSE_URL (unset it and `up` uses the embedded chDB)")


def test_a_data_dir_that_cannot_be_made(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    done, _ = run_cli("up", "--data-dir", str(tmp_path / "file" / "data"))
    assert done.returncode == 1
    assert one_line(done.stderr).startswith(
        f"reports-pipeline up: cannot use --data-dir {tmp_path / 'file' / 'data'}: ")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_explains_itself(capsys: pytest.CaptureFixture[str], command: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    description = text.split("\n\n")[1]
    assert len(description) > 80 and "``" not in text, text
    # every option has its text
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub.choices[command]._actions:
        assert action.help, f"{command} {action.option_strings} has no help"
    if command in ("up", "worker", "serve"):
        assert "KAFKA_BOOTSTRAP" in text and "CLICKHOUSE_URL" in text
    if command == "trends":
        assert "(default: 1m)" in text and "CLICKHOUSE_URL" in text
    if command == "up":
        assert "(default: 127.0.0.1)" in text and "endpoints.json" in text


def test_the_top_level_help_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "``" not in text
    for command in COMMANDS:
        assert f"\n  {command} " in text


UNREACHABLE_CLICKHOUSE = "http://reports:secret@127.0.0.1:1"
REFUSED = ("ClickHouse at http://reports:***@127.0.0.1:1 cannot be used: Connection refused;"
           " check CLICKHOUSE_URL")


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_server_process_without_clickhouse(command: str, tmp_path: Path) -> None:
    done, _ = run_cli(command, "--data-dir", str(tmp_path), *(
        ("--port", "0") if command == "serve" else ()),
        env={"KAFKA_BOOTSTRAP": "127.0.0.1:1", "CLICKHOUSE_URL": UNREACHABLE_CLICKHOUSE})
    assert done.returncode == 1
    assert one_line(done.stderr) == f"reports-pipeline {command}: {REFUSED}"


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_server_process_without_kafka(command: str, tmp_path: Path) -> None:
    # chDB stands in for the ClickHouse server, so Kafka is what is missing
    done, _ = run_cli(command, "--data-dir", str(tmp_path / "d"), *(
        ("--port", "0") if command == "serve" else ()),
        env={"KAFKA_BOOTSTRAP": "127.0.0.1:1",
             "CLICKHOUSE_URL": f"chdb://{tmp_path / 'clickhouse'}"})
    assert done.returncode == 1
    assert one_line(done.stderr) == (f"reports-pipeline {command}: no Kafka broker answers at"
                                     " 127.0.0.1:1; check KAFKA_BOOTSTRAP")


@pytest.mark.parametrize("command", ["trends", "dashboard"])
def test_a_reader_without_clickhouse(command: str) -> None:
    done, _ = run_cli(command, *(("--port", "0") if command == "dashboard" else ()),
                      env={"CLICKHOUSE_URL": UNREACHABLE_CLICKHOUSE})
    assert done.returncode == 1
    assert one_line(done.stderr) == f"reports-pipeline {command}: {REFUSED}"


@pytest.mark.parametrize("command", ["trends", "dashboard"])
def test_a_reader_of_a_clickhouse_without_the_database(command: str, tmp_path: Path) -> None:
    done, _ = run_cli(command, *(("--port", "0") if command == "dashboard" else ()),
                      env={"CLICKHOUSE_URL": f"chdb://{tmp_path}", "REPORTS_DATABASE": "nowhere"})
    assert done.returncode == 1
    assert one_line(done.stderr) == (
        f"reports-pipeline {command}: ClickHouse at chdb://{tmp_path} has no database"
        " 'nowhere'; check REPORTS_DATABASE (a worker against this server makes it)")


@pytest.mark.parametrize("command", ["trends", "dashboard"])
def test_a_reader_of_an_up_that_is_not_running(command: str, tmp_path: Path,
                                               busy_port: int) -> None:
    # the kubeconfig a stopped `up` leaves behind
    (tmp_path / "kubeconfig").write_text(
        "current-context: c\ncontexts:\n- {name: c, context: {cluster: k, user: u}}\n"
        "clusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:1'}\n"
        "users:\n- name: u\n  user: {token: t}\n")
    done, _ = run_cli(command, "--data-dir", str(tmp_path),
                      *(("--port", "0") if command == "dashboard" else ()))
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert line.startswith(f"reports-pipeline {command}: nothing answers at https://127.0.0.1:1")
    assert line.endswith(f"is `reports-pipeline up --data-dir {tmp_path}` running?")


@pytest.mark.parametrize("command", ["trends", "dashboard"])
def test_a_reader_without_a_source(command: str) -> None:
    done, _ = run_cli(command)
    assert done.returncode == 1
    assert one_line(done.stderr) == (f"reports-pipeline {command}: give --data-dir of a running"
                                     " `up`, or set CLICKHOUSE_URL")


def test_a_bench_on_a_data_dir_that_cannot_be_made(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    done, _ = run_cli("bench", "--quick", "--data-dir", str(tmp_path / "file" / "d"))
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert line.startswith("reports-pipeline bench: ") and "Not a directory" in line, line


def test_a_bench_against_a_kubeconfig_that_is_not_there(tmp_path: Path) -> None:
    done, _ = run_cli("bench", "--against", str(tmp_path / "nowhere"))
    assert done.returncode == 1
    assert one_line(done.stderr) == (f"reports-pipeline bench: --against {tmp_path / 'nowhere'}:"
                                     " no such kubeconfig")


async def test_a_baseline_without_go_says_how_to_go_on(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(binaries, "GO_INSTALLED", tmp_path / "go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing built yet
    with pytest.raises(BaselineFailed) as failed:
        await EtcdCrds(tmp_path / "etcd", progress=lambda _: None).start()
    assert str(failed.value) == (
        "the etcd-CRD baseline cannot be built: the Go toolchain is not installed"
        " (kube-apiserver and etcd are built from their Go modules with it); --no-baseline"
        " runs the benchmark without it")


def test_a_bench_with_a_mix_it_does_not_know() -> None:
    done, _ = run_cli("bench", "--mix", "admission=1,fishing=2")
    assert done.returncode == 1
    assert one_line(done.stderr) == ("reports-pipeline bench: bad mix entry 'fishing=2': use"
                                     " admission=N,background=N,read=N")


def test_a_demo_against_servers_of_its_own(tmp_path: Path) -> None:
    done, _ = run_cli("demo", "--data-dir", str(tmp_path / "d"),
                      env={"KAFKA_BOOTSTRAP": "127.0.0.1:1"})
    assert done.returncode == 1
    assert one_line(done.stderr) == (
        "reports-pipeline demo: the demo fills the embedded broker and ClickHouse of a data"
        " directory: unset KAFKA_BOOTSTRAP and CLICKHOUSE_URL")


def without_the_bench_extra(*argv: str) -> subprocess.CompletedProcess[str]:
    """The command as in an install without the ``bench`` extra (no psycopg)."""
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from launcher.cli import main; sys.exit(main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("argv", [["bench"], ["bench", "--quick", "--data-dir", "d"],
                                  ["bench", "--help"]])
def test_a_bench_without_its_extra_says_what_to_install(argv: list[str]) -> None:
    done = without_the_bench_extra(*argv)
    assert done.returncode == 1
    assert one_line(done.stderr) == ("reports-pipeline bench: needs the bench extra (psycopg"
                                     " is not installed): pip install -e '.[bench]'")


def test_the_help_lists_the_bench_without_its_extra() -> None:
    done = without_the_bench_extra("--help")
    assert done.returncode == 0
    assert "bench               (not installed: pip install -e '.[bench]')" in done.stdout


def test_a_fleet_source_that_is_not_one(capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    line = usage_error(capsys, ["fleet", "--data-dir", str(tmp_path), "--source", "prod"])
    assert "--source 'prod': expected NAME=BOOTSTRAP[/PREFIX]" in line


def test_a_fleet_without_clusters(tmp_path: Path) -> None:
    done, _ = run_cli("fleet", "--data-dir", str(tmp_path / "f"))
    assert done.returncode == 2
    assert one_line(done.stderr) == ("reports-pipeline fleet: give the clusters to follow"
                                     " (--source or --config)")


def test_a_fleet_config_that_is_wrong(tmp_path: Path) -> None:
    config = tmp_path / "fleet.yaml"
    config.write_text("clusters:\n  - name: a\n")
    done, _ = run_cli("fleet", "--data-dir", str(tmp_path / "f"), "--config", str(config))
    assert done.returncode == 1
    assert one_line(done.stderr) == (f"reports-pipeline fleet: {config}: clusters[0] needs a"
                                     " name and a bootstrap")


def test_a_resync_of_a_cluster_not_given(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("")
    done, _ = run_cli("fleet", "--data-dir", str(tmp_path / "f"), "--source", "a=k:9092",
                      "--resync", "b", "--kubeconfig", str(kubeconfig))
    assert done.returncode == 1
    assert one_line(done.stderr) == ("reports-pipeline fleet: cluster b is not among the"
                                     " sources given")


def test_trends_by_cluster_counts_every_namespace(tmp_path: Path) -> None:
    done, _ = run_cli("trends", "--data-dir", str(tmp_path), "--by", "cluster",
                      "--namespace", "x")
    assert done.returncode == 1
    assert one_line(done.stderr) == ("reports-pipeline trends: --by cluster counts every"
                                     " namespace: drop --namespace")
