"""Background work that yields to the user's: a niced process's priority given to its whole session.

Under Linux's autogroup scheduling niceness ranks processes only within their session, so
`setsid nice -n 19 hsedit finetune train` took a whole core from an engine started in another
session (seen: a test run and a "background" training each at ~100%). A session leader can set
its session's group niceness (/proc/self/autogroup), and set it back to 0 later without
privileges (only a negative value needs them): a compiled engine started behind the warm one
yields while it compiles, then serves at full priority.
"""

from __future__ import annotations

import os
from pathlib import Path

AUTOGROUP = Path("/proc/self/autogroup")


def yield_like_niceness(autogroup: Path = AUTOGROUP) -> bool:
    """Give this process's niceness to its whole session, where it leads one. Only a session
    leader: a process in the user's terminal would lower the terminal's whole session.
    Returns whether it did."""
    niceness = os.nice(0)
    if niceness <= 0 or os.getsid(0) != os.getpid() or not autogroup.exists():
        return False
    return _write(autogroup, niceness)


def restore_session_priority(autogroup: Path = AUTOGROUP) -> bool:
    """Set this session's group back to niceness 0 (after `yield_like_niceness`): the session's
    processes then compete with other sessions as any un-niced one does. Returns whether it did."""
    if os.getsid(0) != os.getpid() or not autogroup.exists():
        return False
    return _write(autogroup, 0)


def _write(autogroup: Path, niceness: int) -> bool:
    try:
        autogroup.write_text(str(niceness))
    except OSError:
        return False
    return True
