"""BusyNeighbours: llama.cpp threads shed while other processes keep the cores busy, on scripted
CPU-time readings and a virtual clock (the figures are a benchmark's: bench/ab_v2v.py --hogs)."""

from __future__ import annotations

from rejoinder._threads import BusyNeighbours, cpu_seconds


class Machine:
    """CPU seconds of a machine with ``cpus`` cores (all processes, and this one), and a clock."""

    def __init__(self, cpus: int = 2) -> None:
        self.cpus = cpus
        self.busy = self.mine = self.t = 0.0
        self.reads = 0

    def read(self):
        self.reads += 1
        return self.busy, self.mine, self.cpus

    def now(self):
        return self.t

    def run(self, seconds: float, mine: float, others: float) -> None:
        """``seconds`` of wall time with this process on ``mine`` cores and others on ``others``."""
        self.t += seconds
        self.mine += mine * seconds
        self.busy += (mine + others) * seconds


def gauge(m: Machine) -> BusyNeighbours:
    return BusyNeighbours(period_ms=250.0, on=0.5, off=0.25, read=m.read, now=m.now)


def test_a_busy_neighbour_on_two_cores_sheds_one_of_two_threads_until_it_stops():
    m = Machine(2)
    g = gauge(m)
    assert g.update(2) == 0  # the first reading: nothing to compare with yet
    m.run(0.3, mine=1.8, others=0.1)  # this process alone keeps the cores busy: no shedding
    assert g.update(2) == 0 and round(g.others, 2) == 0.1
    m.run(0.3, mine=1.0, others=1.0)  # a busy loop beside it
    assert g.update(2) == 1 and g.sheds == 1
    m.run(0.3, mine=1.0, others=0.4)  # under `on` beyond the free cores, over `off`: kept
    assert g.update(2) == 1
    m.run(0.3, mine=1.0, others=0.2)  # under `off`: given back
    assert g.update(2) == 0 and g.sheds == 1


def test_never_all_threads_and_never_more_than_the_neighbours_take():
    m = Machine(4)
    g = gauge(m)
    g.update(4)
    m.run(0.3, mine=1.0, others=2.0)  # 2 cores taken of 4: two of four threads shed
    assert g.update(4) == 2
    m.run(0.3, mine=1.0, others=9.0)  # everything taken: one thread is left
    assert g.update(4) == 3
    assert g.update(1) == 0  # one configured thread: nothing to shed


def test_free_cores_absorb_a_neighbour():
    m = Machine(8)
    g = gauge(m)
    g.update(2)
    m.run(0.3, mine=2.0, others=5.0)  # 6 cores are free of the 2 threads' need; 5 are taken
    assert g.update(2) == 0
    m.run(0.3, mine=2.0, others=6.6)  # 0.6 of a core beyond them
    assert g.update(2) == 1


def test_readings_at_most_once_a_period():
    m = Machine(2)
    g = gauge(m)
    g.update(2)
    m.run(0.3, mine=1.0, others=1.0)
    assert g.update(2) == 1 and m.reads == 2
    for _ in range(20):  # between tokens, 10 ms apart: no reading, the decision kept
        m.run(0.01, mine=1.0, others=0.0)
        assert g.update(2) == 1
    assert m.reads == 2
    m.run(0.1, mine=1.0, others=0.0)
    assert g.update(2) == 0 and m.reads == 3  # 0.3 s on: read over the whole 0.3 s


def test_no_reading_no_shedding():
    g = BusyNeighbours(read=lambda: None)
    assert g.update(2) == 0 and g.update(2) == 0 and g.shed == 0


def test_the_real_reading():
    got = cpu_seconds()
    assert got is not None  # psutil reads /proc/stat on Linux
    busy, mine, cpus = got
    assert cpus >= 1 and busy > 0 and mine > 0
    x = 0
    for i in range(2_000_000):
        x += i
    busy2, mine2, _ = cpu_seconds()
    assert mine2 > mine and busy2 >= busy
