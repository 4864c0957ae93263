import pytest

from fgl_workbench.errors import ConfigError
from fgl_workbench.running.threads import choose_threads, free_cores


def chosen(
    requested=None, executor="serial", workers=1, cores=2, load=0.0, torch_threads=2, env=None
):
    return choose_threads(requested, executor, workers, cores, load, torch_threads, env or {})


@pytest.mark.parametrize(
    ("cores", "load", "free"),
    [(2, 0.0, 2), (2, 0.4, 2), (2, 1.0, 1), (2, 1.6, 1), (2, 4.9, 1), (16, 3.2, 13)],
)
def test_free_cores_subtract_the_load_in_whole_cores(cores, load, free):
    assert free_cores(cores, load) == free


def test_a_busy_core_leaves_the_serial_cell_one_thread():
    """Two cores, one busy: torch's default two threads would thrash; the cell gets one."""
    assert chosen(load=1.0).per_cell == 1
    assert chosen(load=0.0).per_cell == 2  # an idle machine keeps both


def test_never_more_than_torch_would_use():
    """Torch's own count (its default, or the caller's torch.set_num_threads) caps the choice."""
    threads = chosen(cores=16, load=3.2, torch_threads=8)
    assert threads.per_cell == 8 and "torch's own count 8" in threads.reason


def test_process_workers_share_the_free_cores():
    assert chosen(executor="process", workers=2, cores=8, torch_threads=8).per_cell == 4
    assert chosen(executor="process", workers=2, cores=8, load=3.0, torch_threads=8).per_cell == 2
    assert chosen(executor="process", workers=4, cores=2, load=1.0).per_cell == 1


def test_a_ray_task_gets_one_thread():
    assert chosen(executor="ray", workers=2, cores=8, torch_threads=8).per_cell == 1


def test_an_explicit_count_wins():
    """--threads over everything; OMP_NUM_THREADS (torch read it) over the load."""
    assert chosen(requested=3, load=5.0, env={"OMP_NUM_THREADS": "1"}).per_cell == 3
    omp = chosen(load=5.0, torch_threads=2, env={"OMP_NUM_THREADS": "2"})
    assert omp.per_cell == 2 and omp.reason == "OMP_NUM_THREADS"


@pytest.mark.parametrize("bad", [0, -1])
def test_a_bad_count_is_one_line_naming_the_flag(bad):
    with pytest.raises(ConfigError, match=r"^--threads: expected a whole number >= 1"):
        chosen(requested=bad)
