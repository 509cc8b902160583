"""The watchdog stops a kernel by killing everything below the run's driver. A fork bomb makes new processes between
a listing of them and its kills: one pass left some alive, the driver waited out its whole grace for a kernel that
never went, and its report (what ran before, which the rules grade) was lost: seen as a normal user on a loaded
machine, where the hostile batch's fork bomb (tests/grading/test_autograder_e2e.py) scored 0 instead of 40. Under
bubblewrap, one of the bomb's processes that ended while the watchdog read its command line made it find no driver
at all, and kill nothing. After both fixes: 40 in 5 of 5 runs. The races cannot be made to happen on demand, so here
the process table is a fake one in which processes appear after each listing, or end as they are read."""

from __future__ import annotations

import sys

import psutil

from autograder.runner.watchdog import Watchdog


class Process:
    def __init__(self, pid: int):
        self.pid, self.killed = pid, False

    def kill(self) -> None:
        self.killed = True

    def status(self) -> str:
        return psutil.STATUS_ZOMBIE if self.killed else psutil.STATUS_RUNNING


class ForkingDriver:
    """The driver of a kernel that forks: after each of the first ``forks`` listings, two new processes appear."""

    def __init__(self, forks: int):
        self.processes = [Process(2)]
        self.forks, self.listings = forks, 0

    def children(self, recursive: bool = False) -> list[Process]:
        listed = list(self.processes)
        self.listings += 1
        if self.listings <= self.forks:  # made between this listing and its kills
            self.processes += [Process(len(self.processes) + 2 + i) for i in range(2)]
        return listed


class Waited:
    def wait(self, timeout=None) -> int:
        return 0

    def poll(self) -> int:
        return 0


def watchdog_of(driver: ForkingDriver) -> Watchdog:
    watchdog = Watchdog.__new__(Watchdog)
    watchdog.process, watchdog.root, watchdog.forked = Waited(), driver, True
    return watchdog


def test_stopping_a_kernel_kills_again_until_nothing_is_left_alive_below_the_driver():
    driver = ForkingDriver(forks=5)
    watchdog_of(driver).stop_kernel(grace=0)
    assert len(driver.processes) == 11
    assert [p.pid for p in driver.processes if not p.killed] == []
    assert driver.listings == 7  # six passes that found some alive, and one that found none


def test_processes_that_ended_are_not_waited_for():
    """A zombie below the driver (ended, not yet reaped) is not alive: it does not keep the watchdog killing."""
    driver = ForkingDriver(forks=0)
    driver.processes[0].killed = True
    watchdog_of(driver).stop_kernel(grace=0)
    assert driver.listings == 1


class Named(Process):
    """A process of a spawned run's tree, with its command line (``None``: it ended while it was looked at)."""

    def __init__(self, pid: int, command: list[str] | None, parent: int = 1):
        super().__init__(pid)
        self.command, self.parent = command, parent

    def cmdline(self) -> list[str]:
        if self.command is None:
            raise psutil.NoSuchProcess(self.pid)
        return self.command

    def ppid(self) -> int:
        return self.parent


class SpawnedTree:
    """bubblewrap (the root), the driver below it, its kernel, and a fork bomb's processes, some of which end
    while the watchdog reads their command lines."""

    def __init__(self):
        self.pid = 10
        self.driver = Named(11, [sys.executable, "-m", "autograder.runner.child"], parent=10)
        kernel = [sys.executable, "-m", "ipykernel_launcher"]
        self.below = [
            Named(12, kernel, 11),
            *(Named(13 + i, None if i % 2 else kernel, 12) for i in range(40)),
        ]

    def cmdline(self) -> list[str]:
        return ["bwrap", "--unshare-all"]

    def children(self, recursive: bool = False) -> list[Process]:
        return [self.driver, *[p for p in self.below if not p.killed]]


def test_a_fork_bombs_processes_that_end_while_looked_at_do_not_hide_the_driver():
    """Half of the bomb's processes end between the listing and the reading of their command lines: before, the
    watchdog then found no driver at all, killed nothing and waited out its grace, and the report was lost."""
    tree = SpawnedTree()
    watchdog = Watchdog.__new__(Watchdog)
    watchdog.process, watchdog.root, watchdog.forked = Waited(), tree, False
    assert watchdog._driver() is tree.driver
    tree.driver.children = lambda recursive=False: tree.below
    watchdog.stop_kernel(grace=0)
    assert all(p.killed for p in tree.below) and not tree.driver.killed


def test_a_driver_not_found_at_the_first_look_is_looked_for_again_before_the_watchdog_gives_up():
    class Running(Waited):
        def poll(self):
            return None

    tree = SpawnedTree()
    outer = Named(9, tree.driver.command, parent=10)  # the namespaces' outer process, whose child drives
    tree.driver.parent = 9
    looks = []

    def parent():  # the first look meets the inner driver as it is being read: an error, then the next look finds it
        looks.append(1)
        if len(looks) == 1:
            raise psutil.NoSuchProcess(tree.driver.pid)
        return 9

    tree.driver.ppid = parent
    tree.children = lambda recursive=False: [outer, tree.driver, *[p for p in tree.below if not p.killed]]
    tree.driver.children = lambda recursive=False: [p for p in tree.below if not p.killed]
    watchdog = Watchdog.__new__(Watchdog)
    watchdog.process, watchdog.root, watchdog.forked = Running(), tree, False
    watchdog.stop_kernel(grace=0)
    assert (
        len(looks) >= 2 and all(p.killed for p in tree.below) and not tree.driver.killed and not outer.killed
    )
