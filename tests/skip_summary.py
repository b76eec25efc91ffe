"""A pytest plugin that ends every run with its skipped tests grouped by reason.

A suite run on a machine without bubblewrap, Chromium or an optional extra still "passes"; the
summary makes what was not exercised loud: one line per reason with its count, most frequent
first, and where to get the missing pieces. ``tests/conftest.py`` re-exports the hook, so every
run of this suite has it; ``pytest -p tests.skip_summary`` loads it into any other run.
"""

from __future__ import annotations

from collections import Counter

#: printed under the summary when anything was skipped
INSTALL_HINT = (
    "most of these install with `make install-test-deps` (run by `make test`; Debian packages "
    "need root; TEST_DEPS_SKIP leaves steps out)"
)


def skip_reason(report) -> str:
    """The reason text of one skipped test or module's report, without pytest's ``Skipped: ``.

    ``report`` is a pytest ``TestReport`` or ``CollectReport`` whose outcome is ``skipped``: its
    ``longrepr`` is the tuple ``(path, lineno, message)`` for a skip; anything else is shown as
    its string.
    """
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        message = str(longrepr[2])
    else:
        message = str(longrepr)
    return message.removeprefix("Skipped: ").strip() or "(no reason given)"


def count_skips(reports) -> Counter:
    """Reason -> number of skipped reports (a module skipped at collection counts once)."""
    return Counter(skip_reason(r) for r in reports)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Write the ``skipped tests by reason`` section at the end of the run."""
    counts = count_skips(terminalreporter.stats.get("skipped", []))
    if not counts:
        terminalreporter.write_line("skipped tests by reason: none skipped")
        return
    total = sum(counts.values())
    terminalreporter.section(f"skipped tests by reason ({total})", sep="=", yellow=True, bold=True)
    width = len(str(max(counts.values())))
    for reason, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        terminalreporter.write_line(f"{n:>{width}}  {reason}", yellow=True)
    terminalreporter.write_line(INSTALL_HINT)
