"""The end of a run on the terminal: kept lines last, Ctrl-C as one line and exit status 130.

Each case runs a small Python program in its own session (as Snakemake's main process would
run), so the signal handling under test never touches the test process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from vlbench.planning.run_end import INTERRUPTED, INTERRUPTED_EXIT_STATUS, descendants


def run_program(source: str, **kwargs: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(source)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    )


def test_descendants_are_the_whole_tree_below_a_process() -> None:
    tree = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(descendants(tree.pid)) < 2:
            assert time.monotonic() < deadline, "the shell never started its children"
            time.sleep(0.05)
        found = descendants(tree.pid)
        assert len(found) == 2 and tree.pid not in found
        assert tree.pid in descendants(os.getpid())
        assert set(found) <= set(descendants(os.getpid()))
    finally:
        tree.kill()
        tree.wait()
        for pid in descendants(tree.pid):
            os.kill(pid, signal.SIGKILL)


def test_kept_lines_are_printed_after_everything_else() -> None:
    program = run_program(
        """
        import sys
        from vlbench.planning.run_end import say_last
        say_last(["vlbench: first cause", "vlbench: second cause"])
        print("a line printed later", file=sys.stderr)
        sys.exit(1)
        """
    )
    _, stderr = program.communicate(timeout=60)
    assert program.returncode == 1
    assert stderr.splitlines() == [
        "a line printed later",
        "vlbench: first cause",
        "vlbench: second cause",
    ]


def test_threads_started_after_arming_and_their_children_block_sigint() -> None:
    program = run_program(
        """
        import subprocess, sys, threading
        from vlbench.planning.run_end import stop_cleanly_on_interrupt

        def blocked(status: str) -> bool:
            mask = int(status.split("SigBlk:")[1].split()[0], 16)
            return bool(mask & (1 << 1))  # SIGINT is signal 2

        stop_cleanly_on_interrupt()
        seen = {}
        def spawn():
            seen["thread"] = blocked(open("/proc/thread-self/status").read())
            seen["child"] = blocked(subprocess.run(
                ["cat", "/proc/self/status"], capture_output=True, text=True).stdout)
        thread = threading.Thread(target=spawn)
        thread.start()
        thread.join()
        seen["main"] = blocked(open("/proc/thread-self/status").read())
        print(seen)
        """
    )
    stdout, stderr = program.communicate(timeout=60)
    assert program.returncode == 0, stderr
    assert stdout.strip() == "{'thread': True, 'child': True, 'main': False}"


def test_ctrl_c_stops_the_children_and_ends_on_one_line_with_status_130(tmp_path: Path) -> None:
    pids = tmp_path / "child.pid"
    program = run_program(
        f"""
        import subprocess, sys, threading, time
        from vlbench.planning.run_end import say_last, stop_cleanly_on_interrupt

        stop_cleanly_on_interrupt()
        say_last(["a cause that an interrupted run does not print"])
        def job():
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            open({str(pids)!r}, "w").write(str(child.pid))
            child.wait()
        threading.Thread(target=job).start()
        print("noise the interrupted run no longer prints", flush=True)
        try:
            time.sleep(60)
        finally:
            print("more noise", file=sys.stderr)
        """
    )
    deadline = time.monotonic() + 30
    while not pids.exists() or not pids.read_text():
        assert program.poll() is None and time.monotonic() < deadline, program.stderr
        time.sleep(0.05)
    child = int(pids.read_text())
    os.killpg(program.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
    stdout, stderr = program.communicate(timeout=60)
    assert program.returncode == INTERRUPTED_EXIT_STATUS == 130
    assert stderr == f"{INTERRUPTED}\n"
    assert stdout == "noise the interrupted run no longer prints\n"
    deadline = time.monotonic() + 10  # stopped (SIGTERM) and reaped, not left to sleep on
    while Path(f"/proc/{child}").exists():
        assert time.monotonic() < deadline, f"process {child} outlived the interrupted run"
        time.sleep(0.05)
