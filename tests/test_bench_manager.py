"""benchmarks/bench_manager.py: the solve section's backend specs."""

import pytest
from script_loading import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/bench_manager.py", "bench_manager")


def test_multiprocessing_is_the_managers_default(bench):
    assert bench.solve_backend("multiprocessing") == {}


def test_plain_ray_takes_the_default_options(bench):
    from r2d2_agent.distributed.ray_backend import RayOptions

    assert bench.solve_backend("ray") == {"backend": "ray", "ray_options": RayOptions()}


def test_ray_fields_go_to_ray_options(bench):
    kwargs = bench.solve_backend("ray:send_interval=0.2, report_interval=0.5")
    assert kwargs["backend"] == "ray"
    assert kwargs["ray_options"].send_interval == 0.2
    assert kwargs["ray_options"].report_interval == 0.5


@pytest.mark.parametrize("spec", ["mp", "multiprocessing:send_interval=0.2", "ray2"])
def test_an_unknown_backend_is_named(bench, spec):
    with pytest.raises(SystemExit, match=f"got {spec!r}"):
        bench.solve_backend(spec)


def test_a_bad_ray_field_is_named(bench):
    with pytest.raises(ValueError, match="send_interval"):
        bench.solve_backend("ray:send_interval=-1")
