"""scripts/scale.py: the command lines it builds, how it records failures, and a real tiny study."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from apps import cli
from scripts import scale
from scripts.scale import GPU_WRAPPER, Point, command, run_point

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
OPENMPI = ["mpirun", "--allow-run-as-root"]


def lines(path) -> list[dict]:
    with open(path) as fh:
        return [json.loads(line) for line in fh]


# ------------------------------------------------------------------------------------------------ command lines
def test_lulesh_strong_ranks_split_the_mesh_and_weak_ranks_keep_it():
    strong = command(Point("lulesh", "grad", "ranks", 8, "strong", 60), 50, "r.json", [], "py", OPENMPI)
    assert strong == [
        *OPENMPI, "-n", "8", "py", "-m", "apps.lulesh", "-q", "-s", "30",
        "--mode", "grad", "--threads", "1", "--device", "cpu", "--json", "r.json", "-i", "50",
    ]  # fmt: skip
    weak = command(
        Point("lulesh", "primal", "ranks", 8, "weak", 30), None, "r.json", ["-r", "5"], "py", OPENMPI
    )
    assert weak == [
        *OPENMPI, "-n", "8", "py", "-m", "apps.lulesh", "-q", "-s", "30",
        "--mode", "primal", "--threads", "1", "--device", "cpu", "--json", "r.json", "-r", "5",
    ]  # fmt: skip
    one = command(Point("lulesh", "grad", "ranks", 1, "strong", 60), 50, "r.json", [], "py", OPENMPI)
    assert one[:3] == [*OPENMPI, "-n"] and one[3] == "1" and one[one.index("-s") + 1] == "60"


def test_lulesh_threads_run_alone_and_gpus_get_one_each():
    threads = command(
        Point("lulesh", "sensitivity", "threads", 16, "strong", 60), 50, "r.json", [], "py", OPENMPI
    )
    assert threads == [
        "py", "-m", "apps.lulesh", "-q", "-s", "60",
        "--mode", "sensitivity", "--threads", "16", "--device", "cpu", "--json", "r.json", "-i", "50",
    ]  # fmt: skip
    gpus = command(Point("lulesh", "grad", "gpus", 8, "strong", 60), 50, "r.json", [], "py", OPENMPI)
    assert gpus[:8] == [*OPENMPI, "-n", "8", "bash", GPU_WRAPPER, "--gpus", "8"]
    assert gpus[gpus.index("--device") + 1] == "gpu" and gpus[gpus.index("-s") + 1] == "30"
    assert (
        scale.environment(Point("lulesh", "grad", "threads", 16, "strong", 60))["NUMBA_NUM_THREADS"] == "16"
    )
    assert scale.environment(Point("lulesh", "grad", "ranks", 8, "strong", 60))["NUMBA_NUM_THREADS"] == "1"


def test_lulesh_ranks_sharing_gpus_split_strong_and_keep_weak_sizes_per_rank():
    """8 ranks on 2 GPUs: -s 120 strong is -s 60 per rank; -s 60 weak is -s 60 per rank, 8 times the work."""
    for scaling, size in (("strong", 120), ("weak", 60)):
        shared = Point("lulesh", "grad", "gpus", 2, scaling, size, 0, ranks_per_gpu=4)
        cmd = command(shared, 50, "r.json", [], "py", OPENMPI)
        assert cmd[:8] == [*OPENMPI, "-n", "8", "bash", GPU_WRAPPER, "--gpus", "2"], scaling
        assert cmd[cmd.index("-s") + 1] == "60" and (shared.ranks, shared.threads) == (8, 1)
    one = command(Point("lulesh", "grad", "gpus", 1, "weak", 60), 50, "r.json", [], "py", OPENMPI)
    assert one[3] == "1" and one[one.index("-s") + 1] == "60"


@pytest.mark.parametrize(
    ("point", "message"),
    [
        (Point("lulesh", "grad", "ranks", 2, "strong", 60), "cube number of ranks"),
        (Point("lulesh", "grad", "gpus", 2, "strong", 60), "cube number of ranks"),
        (Point("lulesh", "grad", "gpus", 2, "strong", 60, 0, 2), "cube number of ranks"),
        (Point("lulesh", "grad", "ranks", 8, "strong", 45), "do not make 8 equal cube"),
        (Point("lulesh", "grad", "threads", 2, "weak", 30), "do not make 1 equal cube"),
        (Point("minibude", "grad", "threads", 2, "weak", None), "weak scaling needs --sizes"),
    ],
)
def test_impossible_points_are_refused(point, message):
    with pytest.raises(ValueError, match=message):
        scale.app_arguments(point, None, "r.json")


def test_minibude_command_lines():
    threads = command(
        Point("minibude", "grad", "threads", 4, "strong", 4096), 3, "r.json", ["--deck", "bm1"], "py", []
    )
    assert threads == [
        "py", "-m", "apps.minibude", "--mode", "grad", "--threads", "4", "--device", "cpu", "--json", "r.json",
        "--poses", "4096", "--iterations", "3", "--deck", "bm1",
    ]  # fmt: skip
    weak = command(
        Point("minibude", "primal", "ranks", 4, "weak", 1000), None, "r.json", [], "py", ["mpiexec"]
    )
    assert weak[:3] == ["mpiexec", "-n", "4"] and weak[weak.index("--poses") + 1] == "4000"
    whole = command(
        Point("minibude", "primal", "gpus", 2, "strong", None), None, "r.json", [], "py", ["mpiexec"]
    )
    assert "--poses" not in whole and whole[3:5] == ["bash", GPU_WRAPPER]
    assert whole[whole.index("--device") + 1] == "gpu"


def test_bad_study_arguments_exit_2_before_running(capsys, tmp_path):
    out = tmp_path / "s.jsonl"
    for argv, message in (
        (
            ["minibude", "--kind", "threads", "--workers", "1", "--modes", "sensitivity"],
            "no mode sensitivity",
        ),
        (["lulesh", "--kind", "ranks", "--workers", "1", "2", "--sizes", "30"], "cube number of ranks"),
        (["lulesh", "--kind", "ranks", "--workers", "8", "--ranks-per-gpu", "2"], "only with --kind gpus"),
        (["lulesh", "--kind", "threads", "--workers", "1", "--mps"], "--mps: only with --kind gpus"),
        (
            ["lulesh", "--kind", "gpus", "--workers", "1", "2", "--ranks-per-gpu", "1", "4", "1"],
            "one per --workers entry (2)",
        ),
    ):
        with pytest.raises(SystemExit) as exc:
            scale.main([*argv, "--out", str(out)])
        assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not out.exists()


def test_dry_run_prints_every_command(capsys):
    argv = ["lulesh", "--kind", "ranks", "--workers", "1", "8", "--sizes", "60", "--iterations", "50"]
    assert scale.main([*argv, "--mpiexec", "mpirun --allow-run-as-root", "--dry-run", "--", "-b", "2"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 4 and all(p.startswith("mpirun --allow-run-as-root -n ") for p in printed)
    assert printed[2].split()[3] == "8" and " -s 30 " in printed[2] and printed[2].endswith("-i 50 -b 2")


# ------------------------------------------------------------------------------------------------ failures
def test_a_failing_point_is_recorded_and_the_study_goes_on(tmp_path, capsys):
    """Too many poses fails at once (exit 2, one line), the next size runs; the exit status reports it."""
    out = tmp_path / "s.jsonl"
    argv = ["minibude", "--kind", "threads", "--workers", "1", "--modes", "primal", "--sizes", "100000", "64"]
    assert scale.main([*argv, "--iterations", "1", "--out", str(out), "--", "--deck", "bm1"]) == 1
    bad, good = lines(out)
    assert not bad["ok"] and bad["result"] is None
    assert bad["error"].startswith("exit status 2: minibude: error: --poses: asked for 100000 poses")
    assert good["ok"] and good["error"] is None and good["result"]["problem"]["nposes"] == 64
    assert good["result"]["valid"] and good["machine"]["cores"] >= 1 and good["study"] == bad["study"]
    captured = capsys.readouterr()
    assert f"1 of 2 points ran; results in {out}" in captured.out
    assert "FAILED primal 1 threads size 100000: exit status 2" in captured.err


def test_missing_gpus_are_recorded_without_running(tmp_path, monkeypatch, capsys):
    out = tmp_path / "s.jsonl"
    monkeypatch.setattr(cli, "gpu_names", lambda: ["Fake GPU"])
    argv = ["minibude", "--kind", "gpus", "--workers", "2", "--modes", "primal", "grad", "--sizes", "64"]
    assert scale.main([*argv, "--mpiexec", MPIEXEC, "--out", str(out)]) == 1
    primal, grad = lines(out)
    for r in (primal, grad):
        assert r["machine"]["gpus"] == ["Fake GPU"] and r["result"] is None and r["wall_s"] < 1.0
        assert r["error"] == "asked for 2 GPU(s), this machine has 1 (nvidia-smi)"
        assert r["machine"]["launcher_flavour"] == "MPICH" and r["machine"]["mpi_library"].startswith("MPICH")
    assert capsys.readouterr().err.count("FAILED") == 2


# A launcher of another MPI, as Open MPI's mpirun is for the mpich wheel's mpi4py: it starts the processes but
# they do not join one job, so each is rank 0 of 1 and does the whole work.
OTHER_MPIRUN = """#!/bin/bash
if [[ "$1" == --version ]]; then echo "mpirun (Open MPI) 4.1.5"; exit 0; fi
n=$2; shift 2
pids=()
for ((i = 0; i < n; i++)); do OMPI_COMM_WORLD_SIZE=$n OMPI_COMM_WORLD_RANK=$i "$@" & pids+=($!); done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
"""


@pytest.fixture
def other_mpirun(tmp_path) -> str:
    path = tmp_path / "mpirun"
    path.write_text(OTHER_MPIRUN)
    path.chmod(0o755)
    return str(path)


def test_a_missing_or_foreign_launcher_stops_the_study_in_one_line(tmp_path, other_mpirun, capsys):
    """Before any point runs: exit status 2, one line naming the launcher and the MPI mpi4py was built for."""
    out = tmp_path / "s.jsonl"
    argv = ["minibude", "--kind", "ranks", "--workers", "1", "2", "--sizes", "64", "--out", str(out)]
    assert scale.main([*argv, "--mpiexec", "/nonexistent/mpiexec"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'/nonexistent/mpiexec' not found" in err and "MPICH" in err, err
    assert scale.main([*argv, "--mpiexec", other_mpirun]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"{other_mpirun} (mpirun (Open MPI) 4.1.5) does not start ranks of one job" in err
    assert "mpi4py's MPI (MPICH" in err and "COMM_WORLD sizes were 1, 1" in err
    assert not out.exists()


@pytest.mark.parametrize("app", [["minibude", "--poses", "16"], ["lulesh", "-s", "2", "-i", "1"]])
def test_the_apps_refuse_to_run_as_unconnected_copies(other_mpirun, app):
    proc = subprocess.run(
        [other_mpirun, "-n", "2", sys.executable, "-m", f"apps.{app[0]}", *app[1:]],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == "", proc
    (line,) = proc.stderr.strip().splitlines()
    assert "the launcher started 2 processes (OMPI_COMM_WORLD_SIZE=2) but mpi4py's MPI (MPICH" in line


def test_the_launcher_comes_from_the_environment_or_the_venv(monkeypatch):
    argv = ["minibude", "--kind", "ranks", "--workers", "2"]
    monkeypatch.delenv("PAD_MPIEXEC", raising=False)
    assert scale.parse_args(argv)[0].mpiexec == MPIEXEC
    monkeypatch.setenv("PAD_MPIEXEC", "srun --mpi=pmix")
    assert scale.parse_args(argv)[0].mpiexec == "srun --mpi=pmix"
    assert scale.flavour("slurm 23.02.6", ["srun"]) == "Slurm"
    assert scale.flavour("mpirun (Open MPI) 5.0.3", ["mpirun"]) == "Open MPI"
    assert scale.flavour("HYDRA build details:\n Version: 4.2.0", ["mpiexec"]) == "MPICH"


def test_studies_sh_leaves_the_launcher_to_scale_unless_told(tmp_path):
    """No Open MPI flag by default: ``--allow-run-as-root`` is Open MPI's, for root only (scale sets it then)."""
    record = tmp_path / "argv"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/bash\necho "$@" >> {record}\n')
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "MPIRUN"} | {"PYTHON": str(python)}
    subprocess.run(
        ["bash", "scripts/studies.sh", str(tmp_path / "out"), "minibude-ranks"], cwd=REPO, env=env, check=True
    )
    subprocess.run(
        ["bash", "scripts/studies.sh", str(tmp_path / "out"), "lulesh-ranks-weak"],
        cwd=REPO, env=env | {"MPIRUN": "srun --mpi=pmi2"}, check=True,
    )  # fmt: skip
    default, told = record.read_text().splitlines()
    assert default.startswith("-m scripts.scale minibude --out ") and "--mpiexec" not in default
    assert "--mpiexec srun --mpi=pmi2 " in told and "allow-run-as-root" not in default + told


def test_documented_studies_run_as_written(tmp_path, capsys):
    """docs/apps.md's scale commands plan as written (nothing Open MPI-only or root-only in them)."""
    with open(os.path.join(REPO, "docs", "apps.md")) as fh:
        documented = [line.split(" -m scripts.scale ", 1)[1] for line in fh if " -m scripts.scale " in line]
    assert len(documented) >= 3
    for example in documented:
        argv = shlex.split(example.split("#")[0])
        assert (
            "--allow-run-as-root" not in example
            and scale.main(["--dry-run", "--out", str(tmp_path / "s.jsonl"), *argv]) == 0
        )


def test_a_point_past_its_timeout_is_killed():
    start = time.perf_counter()
    cmd = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"]
    record, error = run_point(cmd, dict(os.environ), "/nonexistent/r.json", timeout=2)
    assert record is None and error == "timed out after 2 s: started"
    assert time.perf_counter() - start < 30


def _wrapped(ranks: int, env: dict[str, str], *wrapper_args: str) -> subprocess.CompletedProcess:
    """``ranks`` ranks under the GPU wrapper, each printing its node-local rank and CUDA_VISIBLE_DEVICES."""
    show = ["bash", "-c", "echo $MPI_LOCALRANKID $CUDA_VISIBLE_DEVICES"]
    cmd = [MPIEXEC, "-n", str(ranks), "bash", GPU_WRAPPER, *wrapper_args, *show]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def mps_control(tmp_path, monkeypatch) -> tuple[str, list[dict[str, str]]]:
    """A fake nvidia-cuda-mps-control on PATH that logs each call (its arguments, stdin and pipe folder) to a
    file, two fake GPUs, and the points' environments as scale would run them (no point runs)."""
    log = tmp_path / "mps.log"
    fake = tmp_path / "nvidia-cuda-mps-control"
    fake.write_text(f'#!/bin/bash\necho "args=$* stdin=$(cat) pipe=$CUDA_MPS_PIPE_DIRECTORY" >> {log}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(cli, "gpu_names", lambda: ["Fake GPU", "Fake GPU"])
    seen: list[dict[str, str]] = []

    def run(cmd, env, json_path, timeout):
        seen.append(env)
        with open(log, "a") as fh:
            fh.write(f"point pipe={env.get('CUDA_MPS_PIPE_DIRECTORY')}\n")
        return None, "not run"

    monkeypatch.setattr(scale, "run_point", run)
    return str(log), seen


def test_mps_daemon_serves_every_point_and_stops_with_the_study(tmp_path, mps_control):
    """--mps: the control daemon starts (-d) before the first point, every point is its client (the pipe
    folder in its environment), and it is told to quit when the study ends, the points having failed."""
    log, seen = mps_control
    out = tmp_path / "s.jsonl"
    argv = ["lulesh", "--kind", "gpus", "--workers", "2", "--ranks-per-gpu", "4", "--sizes", "8", "--mps"]
    assert scale.main([*argv, "--modes", "primal", "grad", "--mpiexec", MPIEXEC, "--out", str(out)]) == 1
    calls = Path(log).read_text().splitlines()
    pipe = seen[0]["CUDA_MPS_PIPE_DIRECTORY"]
    assert calls == [
        f"args=-d stdin= pipe={pipe}",
        *[f"point pipe={pipe}"] * 2,
        f"args= stdin=quit pipe={pipe}",
    ]
    assert all(env["CUDA_MPS_LOG_DIRECTORY"].startswith(os.path.dirname(pipe)) for env in seen)
    assert [(r["mps"], r["ranks"], r["error"]) for r in lines(out)] == [(True, 8, "not run")] * 2


def test_mps_daemon_that_cannot_start_stops_the_study_in_one_line(tmp_path, mps_control, monkeypatch, capsys):
    out = tmp_path / "s.jsonl"
    argv = ["lulesh", "--kind", "gpus", "--workers", "1", "--sizes", "8", "--mps", "--mpiexec", MPIEXEC]
    monkeypatch.setattr(scale, "MPS_CONTROL", "pad-no-such-mps-control")
    assert scale.main([*argv, "--out", str(out)]) == 2
    assert "--mps: pad-no-such-mps-control is not on PATH" in capsys.readouterr().err
    failing = tmp_path / "failing-mps-control"
    failing.write_text("#!/bin/sh\necho 'An instance of this daemon is already running' >&2\nexit 1\n")
    failing.chmod(0o755)
    monkeypatch.setattr(scale, "MPS_CONTROL", str(failing))
    assert scale.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "exited with status 1: An instance of this daemon is already running" in err
    assert not out.exists() and mps_control[1] == []


def test_studies_sh_puts_only_gpu_studies_under_mps(tmp_path):
    """MPS=1: ``--mps`` goes to the GPU studies' scale, before the app's own arguments, and to no other."""
    record = tmp_path / "argv"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/bash\necho "$@" >> {record}\n')
    python.chmod(0o755)
    env = {**os.environ, "PYTHON": str(python), "MPS": "1"}
    studies = ["minibude-ranks", "minibude-gpus", "lulesh-gpus-weak"]
    subprocess.run(
        ["bash", "scripts/studies.sh", str(tmp_path / "out"), *studies], cwd=REPO, env=env, check=True
    )
    ranks, bude, weak = (shlex.split(line) for line in record.read_text().splitlines())
    assert "--mps" not in ranks
    assert bude.index("--mps") < bude.index("--") and bude[-2:] == ["--deck", "bm1"]
    assert weak.count("--mps") == 1


def _assignment(proc: subprocess.CompletedProcess) -> dict[int, str]:
    assert proc.returncode == 0, proc.stderr
    return {int(rank): gpu for rank, gpu in (line.split() for line in proc.stdout.splitlines())}


@pytest.fixture
def two_gpus(tmp_path) -> dict[str, str]:
    """An environment whose nvidia-smi lists GPUs 0 and 1, and no CUDA_VISIBLE_DEVICES."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 0\necho 1\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    return {**env, "PATH": f"{tmp_path}{os.pathsep}{env['PATH']}"}


def test_wrapper_shares_gpus_round_robin_as_the_apps_choose_them(two_gpus):
    """8 ranks on nvidia-smi's 2 GPUs: local ranks 0 2 4 6 on GPU 0, 1 3 5 7 on GPU 1, the GPU apps.cli
    picks without the wrapper."""
    assert _assignment(_wrapped(8, two_gpus)) == {r: str(cli.gpu_for(r, 2)) for r in range(8)}
    assert [cli.gpu_for(r, 2) for r in range(8)] == [0, 1] * 4
    assert _assignment(_wrapped(3, two_gpus, "--gpus", "1")) == {0: "0", 1: "0", 2: "0"}


def test_wrapper_takes_the_visible_gpus_from_cuda_visible_devices(two_gpus):
    env = {**two_gpus, "CUDA_VISIBLE_DEVICES": "5,7,2"}
    assert _assignment(_wrapped(4, env)) == {0: "5", 1: "7", 2: "2", 3: "5"}
    assert _assignment(_wrapped(4, env, "--gpus", "2")) == {0: "5", 1: "7", 2: "5", 3: "7"}
    assert _assignment(_wrapped(2, {**env, "CUDA_VISIBLE_DEVICES": "3"})) == {0: "3", 1: "3"}


def test_wrapper_refuses_only_what_cannot_run(two_gpus):
    """No GPU visible, or more GPUs asked for than visible: a message and exit status 3; a bad --gpus: 2."""
    none = _wrapped(2, {**two_gpus, "CUDA_VISIBLE_DEVICES": ""})
    assert none.returncode == 3 and "no GPU is visible" in none.stderr
    more = _wrapped(1, two_gpus, "--gpus", "3")
    assert more.returncode == 3 and "--gpus 3: only 2 GPU(s) visible (0 1)" in more.stderr
    bad = _wrapped(1, two_gpus, "--gpus", "0")
    assert bad.returncode == 2 and "--gpus 0: expected a number of GPUs" in bad.stderr


# ------------------------------------------------------------------------------------------------ a real study
def test_tiny_study_records_every_point(tiny_study):
    runs = lines(tiny_study)
    assert [(r["kind"], r["workers"], r["mode"]) for r in runs] == [
        (kind, workers, mode)
        for kind in ("threads", "ranks")
        for workers in (1, 2)
        for mode in ("primal", "grad")
    ]
    for r in runs:
        result = r["result"]
        assert r["ok"] and result["valid"] and result["problem"]["nposes"] == 128, r
        assert (result["ranks"], result["threads"]) == (r["ranks"], r["threads"])
        assert result["mode"] == r["mode"] and result["checks"]["reference"]["poses"] == 128
        assert (result["time_grad_s"] is not None) == (r["mode"] == "grad") and result["time_primal_s"] > 0
        assert r["command"].startswith(f"{MPIEXEC} -n {r['workers']} ") == (r["kind"] == "ranks")
        machine = r["machine"]
        assert machine["cores"] >= 1 and machine["cpu"] and machine["versions"]["numba"] and machine["date"]
    assert len({r["study"] for r in runs}) == 2  # one per invocation, both appended to the same file


def test_every_study_of_studies_sh_can_be_planned(capsys):
    """The studies for the lent hosts: each plans (no point refused), GPU studies run through the wrapper;
    LULESH on GPUs runs 1 rank on 1 GPU, 8 ranks on 2 and 8 ranks on 8."""
    listed = subprocess.run(
        ["bash", "scripts/studies.sh", "-l"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    modes = {
        "minibude-threads": {"primal", "grad"}, "minibude-ranks": {"primal", "grad"},
        "lulesh-threads": {"primal", "grad"}, "lulesh-ranks-strong": {"primal", "grad"},
        "lulesh-ranks-weak": {"primal", "grad"}, "lulesh-ranks-threads": {"primal", "grad"},
        "minibude-gpus": {"primal", "grad"}, "lulesh-gpus-strong": {"primal", "grad", "sensitivity"},
        "lulesh-gpus-weak": {"primal", "grad"},
    }  # fmt: skip
    assert [line.split(":")[0] for line in listed] == list(modes)
    for line in listed:
        name, argv = line.split(":")[0], line.split("python -m scripts.scale ")[1].split()
        assert (
            scale.main([argv[0], "--mpiexec", "mpirun --allow-run-as-root", "--dry-run", *argv[1:]]) == 0
        ), line
        commands = capsys.readouterr().out.splitlines()
        assert {c.split("--mode ")[1].split()[0] for c in commands} == modes[name], line
        if "--kind gpus" in line:
            assert all(f"bash {GPU_WRAPPER} --gpus " in c and "--device gpu" in c for c in commands)
        if name.startswith("lulesh-gpus"):
            runs = {(c.split()[3], c.split()[7], c.split(" -s ")[1].split()[0]) for c in commands}
            edge = "120" if name.endswith("strong") else "60"
            assert runs == {("1", "1", edge), ("8", "2", "60"), ("8", "8", "60")}, line
        if "--threads-per-rank 2" in line:  # 8 ranks of 2 threads
            assert all(
                c.startswith("mpirun --allow-run-as-root -n 8 ") and "--threads 2 " in c for c in commands
            )


def test_weak_gpu_tables_count_the_ranks_each_gpu_holds(tmp_path):
    """Weak scaling over GPUs shared by 4 ranks each gives each GPU 4 ranks' problems: a time 4 times one
    rank's on one GPU is full efficiency, and the table says how many ranks ran, under MPS or not."""
    from scripts import results

    machine = {
        "cpu": "CPU",
        "cores": 32,
        "gpus": ["GPU", "GPU"],
        "pad_commit": "abcdef0",
        "date": "2026-11-26T14:00",
    }

    def point(mode, workers, ranks, primal, grad=None):
        result = {"time_primal_s": primal}
        if grad is not None:
            result |= {"time_grad_s": grad, "overhead": grad / primal}
        return {
            "study": "s", "app": "lulesh", "mode": mode, "kind": "gpus", "workers": workers, "ranks": ranks,
            "scaling": "weak", "size": 60, "mps": True, "ok": True, "result": result, "machine": machine,
        }  # fmt: skip

    study = [point("primal", 1, 1, 1e-3), point("grad", 1, 1, 1e-3, 8e-3), point("primal", 2, 8, 4e-3)]
    study.append(point("grad", 2, 8, 4e-3, 16e-3))
    (tmp_path / "lulesh-gpus-weak.jsonl").write_text("".join(json.dumps(p) + "\n" for p in study))
    table = results.studies(tmp_path)
    assert "| 1 | 1 ms | 8 ms | 8.00x | 1.00 | 1.00 |" in table
    assert "| 2 (8 ranks, MPS) | 4 ms | 16 ms | 4.00x | 1.00 | 2.00 |" in table
