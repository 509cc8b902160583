"""The Linux numbers the sandbox passes to the kernel (``unshare`` flags, ``prctl`` options), named once; and the
grader process's one rule about ``fork``."""

import os
import resource
import threading
from pathlib import Path

# The grader forks (a child's preexec_fn, killing a sandbox user's processes) in worker threads while other
# worker threads may be inside numpy's BLAS (a recorded model evaluated outside the kernel). OpenBLAS shuts
# its thread pool down before every fork(); a product in flight in another thread then waits for workers
# that are gone, forever (seen: a grader without OMP_NUM_THREADS stalled at 100% CPU in exec_blas). So a
# fork and a BLAS call never overlap in the grader: both take this lock.
FORK_LOCK = threading.Lock()

# unshare(2) / clone(2) flags
CLONE_NEWNS = 0x00020000  # mounts
CLONE_NEWUTS = 0x04000000  # host name
CLONE_NEWIPC = 0x08000000  # System V IPC, POSIX message queues
CLONE_NEWUSER = 0x10000000  # user ids
CLONE_NEWPID = 0x20000000  # process ids (the first child is the namespace's init)
CLONE_NEWNET = 0x40000000  # network

# prctl(2) options
PR_SET_PDEATHSIG = 1  # a signal when the parent dies
PR_SET_DUMPABLE = 4  # 0: no core dumps, no ptrace or /proc/<pid>/fd by the same user
PR_CAPBSET_DROP = 24  # drop a capability from the bounding set
PR_SET_CHILD_SUBREAPER = 36  # orphans are re-parented here, not to the host's init
PR_SET_NO_NEW_PRIVS = 38  # execve never grants privileges (setuid, file capabilities)
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4


def thread_count() -> int:
    """Threads of this process (a fork copies only the calling one; a user namespace is made by a process of one)."""
    return len(os.listdir("/proc/self/task"))


def nvidia_gpu_here() -> bool:
    """Whether this machine has an NVIDIA GPU's device nodes (asked without loading anything)."""
    return os.path.exists("/dev/nvidiactl") or any(Path("/dev").glob("nvidia[0-9]*"))


def memory_rlimit() -> int:
    """The limit that caps a run's memory: its address space (RLIMIT_AS), except on a machine with an NVIDIA
    GPU's device nodes, where it is the data segment (RLIMIT_DATA: private writable memory, what arrays and
    tensors take). There, torch's CUDA build maps gigabytes of libraries and CUDA reserves address space far
    beyond any cap of the real memory: under a 4096 MB RLIMIT_AS, on an H200 with torch 2.11+cu130, A3's
    kernel died before it started and A5's and A7's solutions failed in oneDNN ("could not create a
    primitive"). What the data segment does not count (shared memory, tmpfs files) the watchdog's samples do
    (:mod:`autograder.runner.watchdog`), there as everywhere."""
    return resource.RLIMIT_DATA if nvidia_gpu_here() else resource.RLIMIT_AS
